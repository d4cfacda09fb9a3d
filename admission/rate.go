package admission

import (
	"math"
	"time"
)

// dispatchRate remembers a partition's recent dispatch times, to tell a
// refused client when its partition's queue will have room.
type dispatchRate struct {
	at   [16]time.Time
	n    int
	next int
}

func (d *dispatchRate) record(t time.Time) {
	d.at[d.next] = t
	d.next = (d.next + 1) % len(d.at)
	d.n = min(d.n+1, len(d.at))
}

// perSecond is the dispatches remembered over the time since the oldest of
// them: a queue that stopped moving sees its rate decay as time passes.
// 0 means unknown (nothing dispatched yet); +Inf, that all came at once.
func (d *dispatchRate) perSecond(now time.Time) float64 {
	if d.n == 0 {
		return 0
	}
	oldest := d.at[(d.next-d.n+len(d.at))%len(d.at)]
	span := now.Sub(oldest).Seconds()
	if span <= 0 {
		return math.Inf(1)
	}
	return float64(d.n) / span
}

// maxRetryAfter bounds the estimate when no queue timeout is configured.
const maxRetryAfter = time.Minute

// retryAfter estimates how long until a partition with queued waiting
// requests has room: queued over the rate, in whole seconds, at least 1s. It
// is at most the queue timeout, by which time every request waiting now has
// left the queue; with an unknown rate it is that bound.
func retryAfter(queued int, rate float64, timeout time.Duration) time.Duration {
	upper := maxRetryAfter
	if timeout > 0 {
		upper = max(time.Second, (timeout + time.Second - 1).Truncate(time.Second))
	}
	if rate <= 0 {
		return upper
	}
	est := time.Duration(math.Ceil(float64(queued)/rate)) * time.Second
	return min(max(est, time.Second), upper)
}

package admission

import "time"

// Clock is the scheduler's only source of time: the gateway passes
// SystemClock, tests and the fleet simulator pass their own.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, in its own goroutine, after d; the scheduler
	// uses it for queue timeouts.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// SystemClock is the wall clock, for the gateway.
var SystemClock Clock = systemClock{}

var _ Clock = systemClock{}

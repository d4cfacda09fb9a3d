package handlers

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"
)

// errIdle is the cause of an attempt cancelled because its worker went
// silent for longer than the idle timeout.
var errIdle = errors.New("worker idle timeout")

// idleBody cancels the attempt when no byte arrives from the worker for
// timeout: a worker that accepted a request and then stalls must not hold
// the client forever. Each read that returns data rearms the timer. Only the
// worker's silence counts: while the gateway waits on its client (a write),
// a timer that fires starts over instead.
type idleBody struct {
	io.ReadCloser
	timer   *time.Timer
	timeout atomic.Int64 // a time.Duration: shortenIdle changes it while the timer may fire
	state   atomic.Int32 // notWriting, writing, or writingFired: the timer fired during a write
	// Owned by the relay's goroutine: when the current write began, and the
	// time spent writing since the timer was last armed.
	pausedAt time.Time
	owed     time.Duration
}

const (
	notWriting int32 = iota
	writing
	writingFired
)

// noIdleTimeout stands for an idle timeout of 0 (none): the body still gets
// a timer, so that shortenIdle can bound what is left of it.
const noIdleTimeout = 1<<63 - 1

func newIdleBody(body io.ReadCloser, timeout time.Duration, cancel context.CancelCauseFunc) io.ReadCloser {
	if timeout <= 0 {
		timeout = noIdleTimeout
	}
	b := &idleBody{ReadCloser: body}
	b.timeout.Store(int64(timeout))
	b.timer = time.AfterFunc(timeout, func() {
		if b.state.CompareAndSwap(writing, writingFired) || b.state.Load() == writingFired {
			return // resume starts the clock over
		}
		cancel(errIdle)
	})
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.timer.Reset(time.Duration(b.timeout.Load()))
		b.owed = 0
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

// pause and resume bracket a write to the client: the gateway, not the
// worker, is holding things up. They run around every write of a stream, so
// they cost an atomic operation each, not a timer's. A timer that fires
// during the write starts over when it ends; so does one whose writes since
// it was armed add up to an eighth of the timeout: the worker never loses
// more than that of its allowance to a slow client.
func (b *idleBody) pause(now time.Time) {
	b.pausedAt = now
	b.state.Store(writing)
}

func (b *idleBody) resume(now time.Time) {
	fired := b.state.Swap(notWriting) == writingFired
	b.owed += now.Sub(b.pausedAt)
	if timeout := time.Duration(b.timeout.Load()); fired || b.owed > timeout/8 {
		b.timer.Reset(timeout)
		b.owed = 0
	}
}

// shortenIdle gives what is left of body at most d of silence: an error
// answer's body, or the end of a stream after [DONE], is not worth the
// full idle timeout. A body without an idle timer is left as it is.
func shortenIdle(body io.ReadCloser, d time.Duration) {
	if b, ok := body.(*idleBody); ok && d < time.Duration(b.timeout.Load()) {
		b.timeout.Store(int64(d))
		b.timer.Reset(d)
	}
}

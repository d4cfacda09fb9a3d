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
}

const (
	notWriting int32 = iota
	writing
	writingFired
)

func newIdleBody(body io.ReadCloser, timeout time.Duration, cancel context.CancelCauseFunc) io.ReadCloser {
	if timeout <= 0 {
		return body
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
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

// pause stops the clock while the gateway, not the worker, is the one
// holding things up (a write to the client); resume restarts it if it ran
// out meanwhile. They run around every write of a stream, so they cost an
// atomic operation each, not a timer's.
func (b *idleBody) pause() { b.state.Store(writing) }

func (b *idleBody) resume() {
	if b.state.Swap(notWriting) == writingFired {
		b.timer.Reset(time.Duration(b.timeout.Load()))
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

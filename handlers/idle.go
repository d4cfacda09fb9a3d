package handlers

import (
	"context"
	"errors"
	"io"
	"time"
)

// errIdle is the cause of an attempt cancelled because its worker went
// silent for longer than the idle timeout.
var errIdle = errors.New("worker idle timeout")

// idleBody cancels the attempt when no byte arrives from the worker for
// timeout: a worker that accepted a request and then stalls must not hold
// the client forever. Each read that returns data rearms the timer. Only the
// worker's silence counts: while the gateway waits on its client (a write),
// the timer is paused.
type idleBody struct {
	io.ReadCloser
	timer   *time.Timer
	timeout time.Duration
}

func newIdleBody(body io.ReadCloser, timeout time.Duration, cancel context.CancelCauseFunc) io.ReadCloser {
	if timeout <= 0 {
		return body
	}
	return &idleBody{ReadCloser: body, timeout: timeout, timer: time.AfterFunc(timeout, func() { cancel(errIdle) })}
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.timer.Reset(b.timeout)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

// pause stops the clock while the gateway, not the worker, is the one
// holding things up; resume restarts it.
func (b *idleBody) pause()  { b.timer.Stop() }
func (b *idleBody) resume() { b.timer.Reset(b.timeout) }

// shortenIdle gives what is left of body at most d of silence: an error
// answer's body, or the end of a stream after [DONE], is not worth the
// full idle timeout. A body without an idle timer is left as it is.
func shortenIdle(body io.ReadCloser, d time.Duration) {
	if b, ok := body.(*idleBody); ok && d < b.timeout {
		b.timeout = d
		b.timer.Reset(d)
	}
}

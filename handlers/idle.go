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
// the client forever. Each read that returns data rearms the timer.
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

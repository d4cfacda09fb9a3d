package handlers

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// clientWriteChunk is the most written to a client under one deadline: a
// large answer gets a fresh deadline per piece, so a slow but live client
// is never cut off, and a stopped one is within one timeout.
const clientWriteChunk = 64 << 10

// clientWriter writes an answer to the client under a deadline per write
// (limits.client_write_timeout: each write has at least half of it, at most
// all). Without one, a client that stops reading
// while keeping its connection open blocks the handler in Write for ever,
// and with it the worker's in-flight count, the routing reservation and the
// admission credit. A write past the deadline fails, and the request counts
// as gone (the client's doing, neutral for the worker). While it writes,
// the worker's idle timer is paused: a slow client is not the worker's
// silence.
type clientWriter struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	timeout  time.Duration
	now      func() time.Time
	idle     *idleBody // nil when the attempt has no idle timeout
	deadline time.Time // the deadline set; zero when none is (it must be cleared)
}

func (g *Gateway) newClientWriter(w http.ResponseWriter, upstream io.ReadCloser) clientWriter {
	cw := clientWriter{w: w, rc: http.NewResponseController(w), timeout: g.opts.ClientWriteTimeout, now: g.opts.Now}
	cw.idle, _ = upstream.(*idleBody)
	return cw
}

// arm gives the next write timeout to complete. Moving a connection's
// deadline costs more than reading the clock, so a deadline still more than
// half a timeout away is kept: a write then has at least half the timeout.
func (c *clientWriter) arm() {
	if c.timeout <= 0 {
		return
	}
	now := c.now()
	if !c.deadline.IsZero() && c.deadline.Sub(now) > c.timeout/2 {
		return
	}
	d := now.Add(c.timeout)
	if err := c.rc.SetWriteDeadline(d); err != nil {
		c.timeout = 0 // the writer cannot (a test recorder): stop trying
		return
	}
	c.deadline = d
}

// write writes p, in pieces of clientWriteChunk, each under a deadline.
func (c *clientWriter) write(p []byte) error {
	if c.idle != nil {
		c.idle.pause(c.now())
		defer func() { c.idle.resume(c.now()) }()
	}
	for len(p) > 0 {
		n := min(len(p), clientWriteChunk)
		c.arm()
		if _, err := c.w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// flush sends what the server has buffered, under a deadline.
func (c *clientWriter) flush() error {
	if c.idle != nil {
		c.idle.pause(c.now())
		defer func() { c.idle.resume(c.now()) }()
	}
	c.arm()
	if err := c.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// done clears the deadline: the connection may serve the client's next
// request, which must not inherit it.
func (c *clientWriter) done() {
	if !c.deadline.IsZero() {
		_ = c.rc.SetWriteDeadline(time.Time{})
	}
}

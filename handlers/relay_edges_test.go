package handlers

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With upstream.idle_timeout 0 (no limit) a stream still ends at [DONE]: the
// body keeps a timer that shortenIdle can bound.
func TestStreamEndsAtDoneWithoutAnIdleTimeout(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		okStream(w, r, nil)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(8 * time.Second):
		}
	})}, func(o *Options) { o.IdleTimeout = 0; o.ClientWriteTimeout = time.Second })
	start := time.Now()
	resp := h.post(t, "/v1/chat/completions", streamBody)
	body := readAll(t, resp.Body)
	assert.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), "%q", body)
	assert.Less(t, time.Since(start), 2*time.Second, "the stream should end at [DONE] (took %s)", time.Since(start))
}

type slowReader struct{ delay time.Duration }

func (s slowReader) Read(p []byte) (int, error) { time.Sleep(s.delay); p[0] = 'x'; return 1, nil }
func (slowReader) Close() error                 { return nil }

// Time spent writing to a slow client is not the worker's silence, even when
// the write ends just before the timer would fire.
func TestWriteTimeIsNotTheWorkersSilence(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	b := newIdleBody(slowReader{delay: 0}, 800*time.Millisecond, cancel).(*idleBody)
	defer b.Close()
	buf := make([]byte, 1)
	_, _ = b.Read(buf) // worker sent a byte: timer armed for 800 ms
	b.pause(time.Now())
	time.Sleep(700 * time.Millisecond) // a slow client write
	b.resume(time.Now())
	// The worker's next byte comes 200 ms later: 200 ms of real silence.
	b.ReadCloser = slowReader{delay: 200 * time.Millisecond}
	_, _ = b.Read(buf)
	assert.NoError(t, context.Cause(ctx), "worker silent for 200 ms of an 800 ms idle timeout")
}

// A body takes its share of the budget as its bytes arrive: connections that
// declare max-size bodies and send nothing cannot lock the others out.
func TestDeclaredButUnsentBodiesTakeNoBudget(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, func(o *Options) {
		o.MaxBufferedBodyBytes = 4 * o.MaxBodyBytes // 4 x 64 KiB
		o.BodyReadTimeout = time.Minute
	})
	for range 4 {
		declareBody(t, h, int(h.gw.opts.MaxBodyBytes)) // headers only: 1 byte of body sent
	}
	require.Eventually(t, func() bool { return h.gw.bodyBytes.Load() == 4 }, 5*time.Second, time.Millisecond, "one byte each")
	resp := h.post(t, "/v1/chat/completions", chatBody)
	readAll(t, resp.Body)
	assert.Equal(t, 200, resp.StatusCode, "4 idle connections (~1 KB sent in total) lock out a 60-byte request")
}

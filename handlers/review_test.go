package handlers

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/workers"
)

func tooMany(w http.ResponseWriter, _ *http.Request, _ []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "7")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, `{"error":{"message":"queue full","type":"rate_limit_error","param":null,"code":"queue_full"}}`)
}

// With no other worker to try, a worker's 429 reaches the client as it is.
func TestLast429IsPassedThrough(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, tooMany)})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "7", resp.Header.Get("Retry-After"))
	assert.Contains(t, readAll(t, resp.Body), `"code":"queue_full"`)
	assert.Equal(t, 0.0, counterValue(t, h.gw.metrics.retries), "no other worker: nothing was retried")
	assert.Equal(t, 1.0, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "status_429")))
}

func Test429IsRetriedOnAnotherWorker(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, tooMany), newFakeWorker(t, okJSON)})
	for range 3 {
		resp := h.post(t, "/v1/chat/completions", chatBody)
		assert.Equal(t, 200, resp.StatusCode)
	}
}

// A worker that sends one event and then stalls: after the idle timeout the
// client's stream ends with the error event, and the gateway lets go.
func TestStalledStreamEndsAfterTheIdleTimeout(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})}, func(o *Options) { o.IdleTimeout = 200 * time.Millisecond })
	start := time.Now()
	resp := h.post(t, "/v1/chat/completions", streamBody)
	body := readAll(t, resp.Body)
	assert.Less(t, time.Since(start), 3*time.Second)
	assert.Equal(t, "data: {\"n\":1}\n\n"+string(streamErrorEvent), body)
	assert.Equal(t, 1.0, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "timeout")))
	assert.Eventually(t, func() bool { return h.inflightTotal() == 0 && h.reservedTotal() == 0 }, time.Second, 5*time.Millisecond)
	assert.Eventually(t, func() bool { return strings.Contains(h.logText(), `"level":"WARN","msg":"request"`) }, time.Second, 5*time.Millisecond,
		"a broken stream is logged as a warning although its status was 200")
}

// A worker that sends headers and then stalls before its first event is
// retried elsewhere: nothing had reached the client.
func TestStallBeforeTheFirstEventIsRetried(t *testing.T) {
	stall := newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	h := newHarness(t, []*fakeWorker{stall, newFakeWorker(t, okStream)}, func(o *Options) { o.IdleTimeout = 200 * time.Millisecond })
	for range 2 {
		resp := h.post(t, "/v1/chat/completions", streamBody)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Contains(t, readAll(t, resp.Body), "data: [DONE]")
	}
}

// A stream cut mid-line: the fragment is dropped so the error event starts
// on an event boundary and parses.
func TestStreamCutMidLineEndsWithAParsableErrorEvent(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\ndata: {\"par")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})})
	resp := h.post(t, "/v1/chat/completions", streamBody)
	assert.Equal(t, "data: {\"n\":1}\n\n"+string(streamErrorEvent), readAll(t, resp.Body))
}

// panicTransport panics inside an attempt, as a bug on the path would.
type panicTransport struct{}

func (panicTransport) RoundTrip(*http.Request) (*http.Response, error) { panic("bug in the transport") }

func TestPanicInsideAnAttemptReleasesEverything(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, func(o *Options) { o.Transport = panicTransport{} })
	resp := h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 500, resp.StatusCode)
	assert.Equal(t, "server_error", decodeError(t, resp).Error.Type)
	assert.Zero(t, h.inflightTotal(), "in-flight count released while the panic unwound")
	assert.Zero(t, h.reservedTotal(), "routing reservation released while the panic unwound")
	w := h.reg.Workers()[0]
	assert.True(t, w.Routable(time.Now()), "the breaker ticket was returned")
}

// A declared body that never arrives does not hold the connection (or a
// buffer of its declared size) beyond the body read timeout.
func TestSlowBodyIsCutOff(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, func(o *Options) { o.BodyReadTimeout = 200 * time.Millisecond })
	conn := declareBody(t, h, 60000)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(3*time.Second)))
	start := time.Now()
	got, err := io.ReadAll(conn)
	require.NoError(t, err, "the gateway closed the connection; it did not hold it until our deadline")
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.True(t, len(got) == 0 || bytes.HasPrefix(got, []byte("HTTP/1.1 4")), "cut off, or told why: %q", got)
}

// A model no known worker serves, while some worker has not yet told its
// models, is "not now" (503), not "not found" (404): clients treat 404 as final.
func TestModelOfAWorkerNotYetKnownIs503(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)})
	_, err := h.reg.Add(workers.Spec{ID: "late", URL: "http://127.0.0.1:1", Engine: workers.EngineVLLM})
	require.NoError(t, err)
	resp := h.post(t, "/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"x"}]}`)
	assert.Equal(t, 503, resp.StatusCode)
	resp = h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 200, resp.StatusCode, "models the known workers serve are unaffected")
}

// panicAfterFirstEvent answers a stream whose body panics once its first
// event has been read: a bug in the gateway after the answer has begun.
type panicAfterFirstEvent struct{}

func (panicAfterFirstEvent) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": []string{"text/event-stream"}},
		Body: io.NopCloser(io.MultiReader(strings.NewReader("data: {\"n\":1}\n\n"), panicReader{}))}, nil
}

type panicReader struct{}

func (panicReader) Read([]byte) (int, error) { panic("bug after the first event") }

func TestPanicAfterTheAnswerBeganCutsTheConnection(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okStream)}, func(o *Options) { o.Transport = panicAfterFirstEvent{} })
	resp := h.post(t, "/v1/chat/completions", streamBody)
	assert.Equal(t, 200, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	assert.Error(t, err, "the stream is cut, not ended")
	assert.Equal(t, "data: {\"n\":1}\n\n", string(body), "no JSON error inside the stream")
	require.Eventually(t, func() bool { return strings.Contains(h.logText(), "bug after the first event") }, 5*time.Second, 10*time.Millisecond)
	assert.Zero(t, h.inflightTotal())
	assert.Zero(t, h.reservedTotal())
}

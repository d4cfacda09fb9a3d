package handlers

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestErrorTable(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)})
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<16) + `"}]}`
	tests := []struct {
		name, method, path, body string
		status                   int
		typ, code, param         string
	}{
		{"bad json", "POST", "/v1/chat/completions", `{"model":`, 400, "invalid_request_error", "", ""},
		{"not an object", "POST", "/v1/chat/completions", `[1,2]`, 400, "invalid_request_error", "", ""},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "", "model"},
		{"missing messages", "POST", "/v1/chat/completions", `{"model":"m"}`, 400, "invalid_request_error", "", "messages"},
		{"empty messages", "POST", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "invalid_request_error", "", "messages"},
		{"messages not array", "POST", "/v1/chat/completions", `{"model":"m","messages":"hi"}`, 400, "invalid_request_error", "", "messages"},
		{"missing prompt", "POST", "/v1/completions", `{"model":"m"}`, 400, "invalid_request_error", "", "prompt"},
		{"prompt wrong type", "POST", "/v1/completions", `{"model":"m","prompt":5}`, 400, "invalid_request_error", "", "prompt"},
		{"stream wrong type", "POST", "/v1/chat/completions", `{"model":"m","stream":"yes","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "", "stream"},
		{"negative max_tokens", "POST", "/v1/completions", `{"model":"m","prompt":"x","max_tokens":-1}`, 400, "invalid_request_error", "", "max_tokens"},
		{"zero n", "POST", "/v1/completions", `{"model":"m","prompt":"x","n":0}`, 400, "invalid_request_error", "", "n"},
		{"unknown model", "POST", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "invalid_request_error", "model_not_found", "model"},
		{"body over limit", "POST", "/v1/chat/completions", big, 413, "invalid_request_error", "request_too_large", ""},
		{"unknown route", "GET", "/v1/nothing", "", 404, "invalid_request_error", "unknown_url", ""},
		{"wrong method", "GET", "/v1/chat/completions", "", 405, "invalid_request_error", "method_not_allowed", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, h.srv.URL+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, tt.status, resp.StatusCode)
			e := decodeError(t, resp)
			assert.Equal(t, tt.typ, e.Error.Type)
			if tt.code != "" {
				require.NotNil(t, e.Error.Code)
				assert.Equal(t, tt.code, *e.Error.Code)
			}
			if tt.param != "" {
				require.NotNil(t, e.Error.Param)
				assert.Equal(t, tt.param, *e.Error.Param)
			}
		})
	}
	assert.Zero(t, h.workers[0].hitCount(), "no malformed request reached the worker")
}

func TestNonStreamingRelay(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, readAll(t, resp.Body), `"content":"hi"`)
	assert.Equal(t, "a", resp.Header.Get("X-Kvgate-Worker"))
	assert.Equal(t, "round_robin", resp.Header.Get("X-Kvgate-Decision"))
	assert.Len(t, resp.Header.Get("X-Request-Id"), 32)
	assert.Zero(t, h.inflightTotal())
	assert.Zero(t, h.reservedTotal())
}

func TestRequestIDIsKept(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, b []byte) {
		assert.Equal(t, "req-123", r.Header.Get("X-Request-Id"), "the worker sees the same id")
		okJSON(w, r, b)
	})})
	req, _ := http.NewRequest("POST", h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("X-Request-Id", "req-123")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, "req-123", resp.Header.Get("X-Request-Id"))
	_ = readAll(t, resp.Body)
	require.Eventually(t, func() bool { return strings.Contains(h.logText(), `"request_id":"req-123"`) }, time.Second, 5*time.Millisecond)
	line := h.logText()
	for _, key := range []string{`"model":"m"`, `"worker":"a"`, `"status":200`, `"decision":"round_robin"`, `"duration_ms"`} {
		assert.Contains(t, line, key)
	}
}

func TestStreamingRelaysEventByEvent(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		<-release // the second event waits: the first must already be at the client
		_, _ = io.WriteString(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	})})
	resp := h.post(t, "/v1/chat/completions", streamBody)
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: {\"n\":1}\n", line, "first event arrives before the worker sends the second")
	close(release)
	rest := readAll(t, br)
	assert.Equal(t, "\ndata: {\"n\":2}\n\ndata: [DONE]\n\n", rest)
	assert.Eventually(t, func() bool { return h.inflightTotal() == 0 && h.reservedTotal() == 0 }, time.Second, 5*time.Millisecond)
}

func TestRetriesOnAnotherWorkerBeforeTheFirstByte(t *testing.T) {
	bad := newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	good := newFakeWorker(t, okJSON)
	h := newHarness(t, []*fakeWorker{bad, good})
	for range 4 {
		resp := h.post(t, "/v1/chat/completions", chatBody)
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "b", resp.Header.Get("X-Kvgate-Worker"))
	}
	assert.Equal(t, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "status_5xx")), counterValue(t, h.gw.metrics.retries),
		"every failure on a was retried once, on b")
	assert.Positive(t, counterValue(t, h.gw.metrics.retries))
	assert.Zero(t, h.inflightTotal())
	assert.Zero(t, h.reservedTotal())
}

func TestStreamThatFailsBeforeItsFirstEventIsRetried(t *testing.T) {
	cut := newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	h := newHarness(t, []*fakeWorker{cut, newFakeWorker(t, okStream)})
	for range 2 {
		resp := h.post(t, "/v1/chat/completions", streamBody)
		require.Equal(t, 200, resp.StatusCode)
		body := readAll(t, resp.Body)
		assert.Contains(t, body, "data: [DONE]")
		assert.NotContains(t, body, "error")
	}
}

func TestMidStreamFailureEndsWithAnErrorEvent(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})})
	resp := h.post(t, "/v1/chat/completions", streamBody)
	require.Equal(t, 200, resp.StatusCode)
	done := make(chan string)
	go func() { done <- readAll(t, resp.Body) }()
	select {
	case body := <-done:
		assert.True(t, strings.HasPrefix(body, "data: {\"n\":1}\n\n"))
		assert.Contains(t, body, `"code":"upstream_stream_error"`)
		assert.NotContains(t, body, "[DONE]")
	case <-time.After(5 * time.Second):
		t.Fatal("the stream hung after the worker died")
	}
	assert.Eventually(t, func() bool { return h.inflightTotal() == 0 && h.reservedTotal() == 0 }, time.Second, 5*time.Millisecond)
	assert.Equal(t, 1.0, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "stream")))
}

func TestWorker4xxPassesThrough(t *testing.T) {
	body := `{"error":{"message":"context too long","type":"BadRequestError","param":null,"code":400}}`
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, body)
	})})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 400, resp.StatusCode)
	assert.Equal(t, body, readAll(t, resp.Body))
	assert.Zero(t, counterValue(t, h.gw.metrics.retries), "a 4xx is the request's fault: no retry")
}

func TestWorker500Is502(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":{"message":"CUDA out of memory","type":"InternalServerError"}}`)
	})})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 502, resp.StatusCode)
	e := decodeError(t, resp)
	assert.Equal(t, "server_error", e.Error.Type)
	assert.Contains(t, e.Error.Message, "CUDA out of memory")
}

func TestNoRoutableWorkerIs503(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)})
	h.reg.Drain(h.reg.Workers()[0].ID())
	resp := h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 503, resp.StatusCode)
	assert.Zero(t, counterValue(t, h.gw.metrics.retries))
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	e := decodeError(t, resp)
	assert.Equal(t, "no_routable_worker", *e.Error.Code)
}

// Workers that pass health checks but drop every request: the client gets a
// 502 once the attempts run out, and every attempt went to another worker.
func TestAllWorkersFailingIs502(t *testing.T) {
	drop := func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	a, b := newFakeWorker(t, drop), newFakeWorker(t, drop)
	h := newHarness(t, []*fakeWorker{a, b})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 502, resp.StatusCode)
	e := decodeError(t, resp)
	assert.Equal(t, "upstream_error", *e.Error.Code)
	assert.Equal(t, 1, a.hitCount())
	assert.Equal(t, 1, b.hitCount(), "the retry excluded the worker that failed")
	assert.Zero(t, h.inflightTotal())
	assert.Zero(t, h.reservedTotal())
}

func TestBreakerOpensAfterRepeatedFailures(t *testing.T) {
	var calls atomic.Int32
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		calls.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	})})
	for range 3 {
		resp := h.post(t, "/v1/chat/completions", chatBody)
		_ = readAll(t, resp.Body)
	}
	n := calls.Load()
	assert.Equal(t, int32(3), n, "threshold 3: three failures open the circuit")
	resp := h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 503, resp.StatusCode, "open circuit: no routable worker")
	assert.Equal(t, n, calls.Load(), "nothing reaches a worker whose circuit is open")
}

func TestClientCancelReachesTheWorker(t *testing.T) {
	cancelled := make(chan struct{})
	started := make(chan struct{})
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
		close(cancelled)
	})})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/chat/completions", strings.NewReader(streamBody))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	<-started
	cancel()
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the worker never saw the cancellation")
	}
	assert.Eventually(t, func() bool { return h.inflightTotal() == 0 && h.reservedTotal() == 0 }, 2*time.Second, 5*time.Millisecond)
}

func TestModelsHealthReadyMetrics(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)})
	get := func(path string) (int, string) {
		resp, err := http.Get(h.srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode, readAll(t, resp.Body)
	}
	code, body := get("/v1/models")
	assert.Equal(t, 200, code)
	assert.JSONEq(t, `{"object":"list","data":[{"id":"m","object":"model","created":0,"owned_by":"kvgate"}]}`, body)
	code, _ = get("/health")
	assert.Equal(t, 200, code)
	code, _ = get("/readyz")
	assert.Equal(t, 200, code)

	_ = h.post(t, "/v1/chat/completions", chatBody)
	code, body = get("/metrics")
	assert.Equal(t, 200, code)
	for _, series := range []string{
		`kvgate_requests_total{model="m",status="200"} 1`,
		`kvgate_worker_inflight{worker="a"} 0`,
		`kvgate_worker_healthy{worker="a"} 1`,
		`kvgate_routing_decisions_total{decision="round_robin",model="m"} 1`,
		`kvgate_request_duration_seconds_count{model="m"} 1`,
		`kvgate_ttft_seconds_count{model="m"} 1`,
		`kvgate_retries_total 0`,
	} {
		assert.Contains(t, body, series)
	}

	h.reg.Drain(h.reg.Workers()[0].ID())
	code, _ = get("/readyz")
	assert.Equal(t, 503, code, "no routable worker: not ready")
	code, body = get("/v1/models")
	assert.Equal(t, 200, code)
	assert.JSONEq(t, `{"object":"list","data":[]}`, body)
}

func TestPanicBecomes500(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)})
	h.gw.Mount("/boom", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	resp, err := http.Get(h.srv.URL + "/boom")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, 500, resp.StatusCode)
	assert.Equal(t, "server_error", decodeError(t, resp).Error.Type)
	// the process is still serving
	assert.Equal(t, 200, h.post(t, "/v1/chat/completions", chatBody).StatusCode)
}

func TestEmptySuccessIsAWorkerFailure(t *testing.T) {
	empty := newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(200) })
	h := newHarness(t, []*fakeWorker{empty, newFakeWorker(t, okJSON)})
	for range 2 {
		resp := h.post(t, "/v1/chat/completions", chatBody)
		require.Equal(t, 200, resp.StatusCode)
		assert.Contains(t, readAll(t, resp.Body), `"content":"hi"`, "retried on the worker that answers")
	}
}

// Events that arrive together leave together; an event followed by a partial
// one is flushed at once, so the client never waits for what the gateway holds.
func TestEventBuffered(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"", false},
		{"data: {\"n\":2}\n", false},
		{"data: {\"n\":2}\n\n", true},
		{"data: {\"n\":2}\r\n\r\n", true},
		{"data: {\"n\":2", false},
	} {
		br := bufio.NewReader(strings.NewReader("data: {\"n\":1}\n\n" + tc.in))
		_, err := br.ReadSlice('\n') // the current event's data line
		require.NoError(t, err)
		_, err = br.ReadSlice('\n') // its blank line
		require.NoError(t, err)
		assert.Equal(t, tc.want, eventBuffered(br), "%q", tc.in)
	}
}

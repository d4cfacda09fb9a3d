package handlers

import (
	"bytes"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// fakeWorker is a scriptable OpenAI-compatible worker on loopback.
type fakeWorker struct {
	*httptest.Server
	handle func(w http.ResponseWriter, r *http.Request, body []byte)
	hits   chan struct{}
}

func newFakeWorker(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *fakeWorker {
	t.Helper()
	f := &fakeWorker{handle: handle, hits: make(chan struct{}, 1024)}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(http.StatusOK)
		case "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
		case "/metrics":
			http.NotFound(w, r)
		default:
			body, _ := io.ReadAll(r.Body)
			select {
			case f.hits <- struct{}{}:
			default:
			}
			f.handle(w, r, body)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeWorker) hitCount() int { return len(f.hits) }

func okJSON(w http.ResponseWriter, _ *http.Request, _ []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
}

func okStream(w http.ResponseWriter, _ *http.Request, _ []byte) {
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for _, tok := range []string{"a", "b", "c"} {
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"`+tok+`"}}]}`+"\n\n")
		fl.Flush()
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

type harness struct {
	gw       *Gateway
	srv      *httptest.Server
	reg      *workers.Registry
	router   *routing.Router
	metrics  *prometheus.Registry
	logs     *lockedWriter
	workers  []*fakeWorker
	attempts int
}

type harnessOption func(*Options)

func newHarness(t *testing.T, fakes []*fakeWorker, opts ...harnessOption) *harness {
	t.Helper()
	transport := workers.NewTransport(workers.TransportOptions{
		DialTimeout: time.Second, ResponseHeaderTimeout: 5 * time.Second, IdleConnsPerWorker: 16, IdleConnTimeout: time.Minute,
	})
	reg := workers.NewRegistry(workers.Options{
		Client:         &http.Client{Transport: transport},
		HealthInterval: 20 * time.Millisecond, HealthTimeout: time.Second, HealthPath: "/health",
		UnhealthyThreshold: 1, HealthyThreshold: 1,
		BreakerThreshold: 3, BreakerOpenFor: time.Minute,
	})
	policy, _ := routing.NewPolicy("round_robin", routing.DefaultPolicyConfig())
	router := routing.NewRouter(policy, routing.Options{Rand: rand.New(rand.NewPCG(1, 2))})
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(reg)
	logs := &lockedWriter{w: new(bytes.Buffer)}
	o := Options{
		Registry: reg, Router: router, Transport: transport,
		MaxBodyBytes: 1 << 16, MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Metrics: promReg, Gatherer: promReg, LogRequests: true,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	for _, opt := range opts {
		opt(&o)
	}
	gw := New(o)
	srv := httptest.NewServer(gw)
	h := &harness{gw: gw, srv: srv, reg: reg, router: router, metrics: promReg, logs: logs, workers: fakes}
	t.Cleanup(func() {
		srv.Close()
		reg.Close()
		transport.CloseIdleConnections()
	})
	for i, f := range fakes {
		_, err := reg.Add(workers.Spec{ID: string(rune('a' + i)), URL: f.URL, Engine: workers.EngineVLLM})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		for _, w := range reg.Workers() {
			if !w.Healthy() {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "workers become healthy")
	return h
}

func (h *harness) post(t *testing.T, path, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(h.srv.URL+path, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, resp *http.Response) openAIError {
	t.Helper()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var e openAIError
	require.NoError(t, json.Unmarshal([]byte(readAll(t, resp.Body)), &e))
	require.NotEmpty(t, e.Error.Message)
	require.NotEmpty(t, e.Error.Type)
	return e
}

func (h *harness) inflightTotal() int {
	n := 0
	for _, w := range h.reg.Workers() {
		n += w.Inflight()
	}
	return n
}

func (h *harness) reservedTotal() int {
	n := 0
	for _, w := range h.reg.Workers() {
		r, _ := h.router.Reserved(w.ID())
		n += r
	}
	return n
}

func counterValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`

func (h *harness) logText() string {
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	return h.logs.w.(*bytes.Buffer).String()
}

func workersSpec(id, url string) workers.Spec {
	return workers.Spec{ID: id, URL: url, Models: []string{"m"}, Engine: workers.EngineVLLM}
}

// emptyRegistry has no workers: every well-formed request ends in 404.
func emptyRegistry(tb testing.TB) *workers.Registry {
	reg := workers.NewRegistry(workers.Options{})
	tb.Cleanup(reg.Close)
	return reg
}

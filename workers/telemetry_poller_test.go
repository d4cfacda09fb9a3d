package workers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// telemetryRoute is a canned answer; status 0 means 200.
type telemetryRoute struct {
	status int
	body   string
	block  bool // hold the request until the client gives up
}

// telemetryTestServer is a worker on loopback answering telemetry paths
// from a table that tests may swap mid-run, counting hits per path.
type telemetryTestServer struct {
	*httptest.Server
	started chan string // receives the path of each blocked request

	mu     sync.Mutex
	routes map[string]telemetryRoute
	hits   map[string]int
	accept map[string]string
	query  map[string]string
}

func newTelemetryTestServer(t *testing.T, routes map[string]telemetryRoute) *telemetryTestServer {
	t.Helper()
	s := &telemetryTestServer{
		started: make(chan string, 16),
		routes:  routes,
		hits:    map[string]int{},
		accept:  map[string]string{},
		query:   map[string]string{},
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *telemetryTestServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	route, ok := s.routes[r.URL.Path]
	s.hits[r.URL.Path]++
	s.accept[r.URL.Path] = r.Header.Get("Accept")
	s.query[r.URL.Path] = r.URL.RawQuery
	s.mu.Unlock()
	switch {
	case !ok:
		http.NotFound(w, r)
	case route.block:
		s.started <- r.URL.Path
		<-r.Context().Done()
	default:
		if route.status != 0 {
			w.WriteHeader(route.status)
		}
		_, _ = w.Write([]byte(route.body))
	}
}

func (s *telemetryTestServer) set(routes map[string]telemetryRoute) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes = routes
}

func (s *telemetryTestServer) lastRequest(path string) (accept, query string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accept[path], s.query[path]
}

func (s *telemetryTestServer) hitsOf(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

var telemetryTestNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func telemetryTestClock() time.Time { return telemetryTestNow }

const telemetryGetLoadDP2 = `[{"dp_rank":0,"num_reqs":3,"num_waiting_reqs":1,"num_tokens":900,"ts_tic":1.5},{"dp_rank":1,"num_reqs":0,"num_waiting_reqs":0,"num_tokens":0,"ts_tic":1.5}]`

func TestFetchVLLM(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {body: vllmMetricsDP2}})
	f := NewTelemetryFetcher(srv.Client(), srv.URL+"/", EngineVLLM, 2)

	s, err := f.Fetch(t.Context(), telemetryTestClock)
	require.NoError(t, err)
	assert.Equal(t, telemetryTestNow, s.At, "stamped with the gateway clock")
	assert.Equal(t, SourceVLLMMetrics, s.Source)
	assert.Equal(t, 42, s.Running)
	assert.Equal(t, 64, s.Waiting)
	assert.True(t, s.Complete)
	accept, _ := srv.lastRequest("/metrics")
	assert.Contains(t, accept, "text/plain", "asks for the text format the parser reads")
}

func TestFetchSGLangFallsBackFromLoadsToGetLoad(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{
		"/v1/loads": {status: http.StatusNotFound, body: `{"detail":"Not Found"}`},
		"/get_load": {body: telemetryGetLoadDP2},
	})
	f := NewTelemetryFetcher(srv.Client(), srv.URL, EngineSGLang, 2)

	for range 3 {
		s, err := f.Fetch(t.Context(), telemetryTestClock)
		require.NoError(t, err)
		assert.Equal(t, SourceSGLangGetLoad, s.Source)
		assert.Equal(t, 2, s.Running)
		assert.Equal(t, 1, s.Waiting)
		assert.True(t, s.Complete)
	}
	assert.Equal(t, 1, srv.hitsOf("/v1/loads"), "the 404 is remembered, not asked again every poll")
	assert.Equal(t, 3, srv.hitsOf("/get_load"))
	_, query := srv.lastRequest("/v1/loads")
	assert.Equal(t, "include=core", query)
}

func TestFetchSGLangFallsBackToMetrics(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{
		"/v1/loads": {status: http.StatusNotFound},
		"/get_load": {body: `{"load": 5120}`}, // the oldest form: no request counts
		"/metrics":  {body: sglangMetricsDPAttention},
	})
	f := NewTelemetryFetcher(srv.Client(), srv.URL, EngineSGLang, 0)

	s, err := f.Fetch(t.Context(), telemetryTestClock)
	require.NoError(t, err)
	assert.Equal(t, SourceSGLangMetrics, s.Source)
	assert.Equal(t, 32, s.Running)
}

func TestFetchSGLangServerErrorDoesNotFallBack(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{
		"/v1/loads": {status: http.StatusServiceUnavailable},
		"/get_load": {body: telemetryGetLoadDP2},
	})
	f := NewTelemetryFetcher(srv.Client(), srv.URL, EngineSGLang, 0)

	_, err := f.Fetch(t.Context(), telemetryTestClock)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "503")
	assert.Zero(t, srv.hitsOf("/get_load"), "a failing endpoint says nothing about which endpoint to use")
}

func TestFetchReprobesAtOnceWhenTheEndpointGoes(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/v1/loads": {body: sglangLoadsDP2}})
	f := NewTelemetryFetcher(srv.Client(), srv.URL, EngineSGLang, 2)
	s, err := f.Fetch(t.Context(), telemetryTestClock)
	require.NoError(t, err)
	require.Equal(t, SourceSGLangLoads, s.Source)

	// Downgraded in place: /v1/loads is gone, /get_load answers.
	srv.set(map[string]telemetryRoute{"/get_load": {body: telemetryGetLoadDP2}})
	s, err = f.Fetch(t.Context(), telemetryTestClock)
	require.NoError(t, err, "a vanished endpoint is replaced within the same poll")
	assert.Equal(t, SourceSGLangGetLoad, s.Source)
}

func TestFetchAutoDetection(t *testing.T) {
	tests := []struct {
		name       string
		routes     map[string]telemetryRoute
		wantSource string
		// how often each path is hit over two fetches
		wantHits map[string]int
	}{
		{
			name:       "vLLM",
			routes:     map[string]telemetryRoute{"/metrics": {body: vllmMetricsDP2}, "/v1/loads": {body: sglangLoadsDP2}},
			wantSource: SourceVLLMMetrics,
			wantHits:   map[string]int{"/metrics": 2, "/v1/loads": 0},
		},
		{
			name: "SGLang without --enable-metrics",
			routes: map[string]telemetryRoute{
				"/v1/loads": {body: sglangLoadsDP2},
			},
			wantSource: SourceSGLangLoads,
			wantHits:   map[string]int{"/metrics": 1, "/v1/loads": 2},
		},
		{
			name: "SGLang whose /metrics is the only load report",
			routes: map[string]telemetryRoute{
				"/metrics":  {body: sglangMetricsDPAttention},
				"/v1/loads": {status: http.StatusNotFound},
				"/get_load": {status: http.StatusMethodNotAllowed},
			},
			wantSource: SourceSGLangMetrics,
			// detection reads /metrics as vLLM, then as SGLang; then it is remembered
			wantHits: map[string]int{"/metrics": 3, "/v1/loads": 1, "/get_load": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newTelemetryTestServer(t, tt.routes)
			f := NewTelemetryFetcher(srv.Client(), srv.URL, EngineAuto, 0)
			for range 2 {
				s, err := f.Fetch(t.Context(), telemetryTestClock)
				require.NoError(t, err)
				assert.Equal(t, tt.wantSource, s.Source)
			}
			for path, n := range tt.wantHits {
				assert.Equal(t, n, srv.hitsOf(path), path)
			}
		})
	}
}

func TestFetchAutoRedetectsAfterRepeatedFailures(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {body: vllmMetricsDP2}})
	f := NewTelemetryFetcher(srv.Client(), srv.URL, "", 0) // empty engine is auto
	s, err := f.Fetch(t.Context(), telemetryTestClock)
	require.NoError(t, err)
	require.Equal(t, SourceVLLMMetrics, s.Source)

	// The address now serves SGLang, with metrics on.
	srv.set(map[string]telemetryRoute{
		"/metrics":  {body: sglangMetricsDPAttention},
		"/v1/loads": {body: sglangLoadsDP2},
	})
	for i := range telemetryRedetectAfter {
		_, err := f.Fetch(t.Context(), telemetryTestClock)
		require.ErrorIs(t, err, ErrTelemetryFormat, "failure %d still reads vLLM", i+1)
	}
	assert.Zero(t, srv.hitsOf("/v1/loads"), "no probing while the detection holds")
	s, err = f.Fetch(t.Context(), telemetryTestClock)
	require.NoError(t, err)
	assert.Equal(t, SourceSGLangLoads, s.Source)
}

func TestFetchAutoGivesUpOnUnknownWorker(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {body: "process_cpu_seconds_total 12.5\n"}})
	f := NewTelemetryFetcher(srv.Client(), srv.URL, EngineAuto, 0)
	_, err := f.Fetch(t.Context(), telemetryTestClock)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrTelemetryFormat)
	assert.Contains(t, err.Error(), "no auto load endpoint answered")
}

func TestFetchTimeout(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {block: true}})
	f := NewTelemetryFetcher(srv.Client(), srv.URL, EngineVLLM, 0)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.Fetch(ctx, telemetryTestClock)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestFetchErrors(t *testing.T) {
	t.Run("oversized body", func(t *testing.T) {
		huge := strings.Repeat("# padding padding padding padding padding padding\n", telemetryMaxBody/50+1)
		srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {body: huge}})
		_, err := NewTelemetryFetcher(srv.Client(), srv.URL, EngineVLLM, 0).Fetch(t.Context(), nil)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "larger than")
	})
	t.Run("unknown engine", func(t *testing.T) {
		_, err := NewTelemetryFetcher(nil, "http://127.0.0.1:1", "trtllm", 0).Fetch(t.Context(), nil)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "unknown engine")
	})
	t.Run("worker down", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		_, err := NewTelemetryFetcher(srv.Client(), url, EngineAuto, 0).Fetch(t.Context(), nil)
		require.Error(t, err)
		assert.NotErrorIs(t, err, ErrTelemetryFormat)
	})
}

// telemetryPublished collects what a poller publishes.
type telemetryPublished struct {
	mu      sync.Mutex
	samples []Sample
	errs    []error
	any     chan struct{}
}

func newTelemetryPublished() *telemetryPublished {
	return &telemetryPublished{any: make(chan struct{}, 1000)}
}

func (p *telemetryPublished) publish(s Sample, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.errs = append(p.errs, err)
	} else {
		p.samples = append(p.samples, s)
	}
	p.any <- struct{}{}
}

func (p *telemetryPublished) counts() (samples, errs int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.samples), len(p.errs)
}

// runTelemetryPollerAsync starts the poller and returns what stops it and
// waits for it to return.
func runTelemetryPollerAsync(f *TelemetryFetcher, interval time.Duration, pub *telemetryPublished) (stop func() bool) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunTelemetryPoller(ctx, f, interval, 0, telemetryTestClock, pub.publish)
	}()
	return func() bool {
		cancel()
		select {
		case <-done:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}
}

func TestRunTelemetryPollerPublishesUntilCancelled(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {body: vllmMetricsDP2}})
	pub := newTelemetryPublished()
	stop := runTelemetryPollerAsync(NewTelemetryFetcher(srv.Client(), srv.URL, EngineVLLM, 0), 10*time.Millisecond, pub)

	for range 3 {
		select {
		case <-pub.any:
		case <-time.After(5 * time.Second):
			t.Fatal("no poll published")
		}
	}
	require.True(t, stop(), "the poller returns once its context is done")
	samples, errs := pub.counts()
	assert.GreaterOrEqual(t, samples, 3)
	assert.Zero(t, errs)
	pub.mu.Lock()
	assert.Equal(t, telemetryTestNow, pub.samples[0].At)
	pub.mu.Unlock()

	time.Sleep(30 * time.Millisecond)
	after, _ := pub.counts()
	assert.Equal(t, samples, after, "nothing is published after return")
}

func TestRunTelemetryPollerTimesOutSlowPolls(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {block: true}})
	pub := newTelemetryPublished()
	stop := runTelemetryPollerAsync(NewTelemetryFetcher(srv.Client(), srv.URL, EngineVLLM, 0), 20*time.Millisecond, pub)

	select {
	case <-pub.any:
	case <-time.After(5 * time.Second):
		t.Fatal("a hung worker must not hang the poller")
	}
	require.True(t, stop())
	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.NotEmpty(t, pub.errs)
	assert.ErrorIs(t, pub.errs[0], context.DeadlineExceeded)
}

func TestRunTelemetryPollerStopsDuringJitter(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {body: vllmMetricsDP2}})
	pub := newTelemetryPublished()
	// With an hour's interval the first poll is almost surely still waiting
	// out its random start.
	stop := runTelemetryPollerAsync(NewTelemetryFetcher(srv.Client(), srv.URL, EngineVLLM, 0), time.Hour, pub)
	require.True(t, stop(), "the start delay does not outlive the context")
}

func TestRunTelemetryPollerCancelledMidPoll(t *testing.T) {
	srv := newTelemetryTestServer(t, map[string]telemetryRoute{"/metrics": {block: true}})
	pub := newTelemetryPublished()
	// The worker never answers; the poll's own timeout is a whole interval
	// after it starts, so cancelling as soon as it starts cuts it short.
	stop := runTelemetryPollerAsync(NewTelemetryFetcher(srv.Client(), srv.URL, EngineVLLM, 0), 500*time.Millisecond, pub)
	select {
	case <-srv.started:
	case <-time.After(5 * time.Second):
		stop()
		t.Fatal("the first poll never started")
	}
	require.True(t, stop(), "a poll in progress does not outlive the context")
	samples, errs := pub.counts()
	assert.Zero(t, samples)
	assert.Zero(t, errs, "a poll cut short by shutdown is not the worker's failure")
}

func TestRunTelemetryPollerNeedsAnInterval(t *testing.T) {
	f := NewTelemetryFetcher(nil, "http://127.0.0.1:1", EngineVLLM, 0)
	assert.Panics(t, func() { RunTelemetryPoller(t.Context(), f, 0, 0, nil, func(Sample, error) {}) })
}

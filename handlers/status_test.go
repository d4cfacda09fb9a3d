package handlers

import (
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// withCacheAware routes with cache_aware over prefix blocks of 64 bytes.
func withCacheAware(o *Options) {
	o.Router = routing.NewRouter(routing.NewCacheAware(routing.DefaultPolicyConfig(), routing.NewIndex(1<<16, time.Hour)),
		routing.Options{Rand: rand.New(rand.NewPCG(1, 2))})
	o.BlockBytes = 64
	o.TelemetryMaxAge = time.Minute
}

// prefixedChat is a chat request whose prompt spans several 64-byte blocks.
func prefixedChat(tail string) string {
	return `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("You are a careful assistant. ", 12) + tail + `"}]}`
}

func (h *harness) status(t *testing.T, query string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(h.srv.URL + "/api/status" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func (h *harness) statusReport(t *testing.T, query string) statusReport {
	t.Helper()
	resp, body := h.status(t, query)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var rep statusReport
	require.NoError(t, json.Unmarshal(body, &rep))
	return rep
}

func (h *harness) sendOK(t *testing.T, body string) {
	t.Helper()
	resp := h.post(t, "/v1/chat/completions", body)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func keysOf(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	require.True(t, ok, "want a JSON object, got %T", v)
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func TestStatusJSONShape(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, withCacheAware)
	w := h.reg.Get("a")
	w.StoreSample(workers.Sample{At: time.Now(), Running: 1, KVUsage: 0.25, Complete: true, Source: workers.SourceVLLMMetrics}, nil)
	h.sendOK(t, prefixedChat("shape"))
	h.gw.recordStatus()

	resp, body := h.status(t, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "a status answer is never reused")

	var doc map[string]any
	require.NoError(t, json.Unmarshal(body, &doc))
	assert.Equal(t, []string{"admission", "generated_at", "history", "partitions", "routing", "uptime_seconds", "workers"}, keysOf(t, doc))
	ws := doc["workers"].([]any)
	require.Len(t, ws, 1)
	assert.Equal(t, []string{"circuit", "engine", "health", "id", "inflight", "models", "prefix_blocks", "pressure", "routable", "telemetry", "url"},
		keysOf(t, ws[0]))
	assert.Equal(t, []string{"age_seconds", "complete", "fresh", "kv_usage", "max_running", "running", "source", "waiting"},
		keysOf(t, ws[0].(map[string]any)["telemetry"]))
	routingDoc := doc["routing"]
	assert.Equal(t, []string{"decisions", "index_blocks", "policy", "prefix_hit_ratio", "seeding"}, keysOf(t, routingDoc))
	decisions := routingDoc.(map[string]any)["decisions"].([]any)
	require.NotEmpty(t, decisions)
	assert.Equal(t, []string{"label", "last_minute", "total"}, keysOf(t, decisions[0]))
	assert.Equal(t, []string{"last_minute", "total"}, keysOf(t, routingDoc.(map[string]any)["prefix_hit_ratio"]))
	assert.Equal(t, []string{"mode", "outstanding"}, keysOf(t, doc["admission"]))
	assert.Equal(t, []any{}, doc["partitions"], "no admission: an empty list, not null")
	history := doc["history"]
	assert.Equal(t, []string{"interval_seconds", "samples"}, keysOf(t, history))
	samples := history.(map[string]any)["samples"].([]any)
	require.Len(t, samples, 1)
	assert.Equal(t, []string{"inflight", "queue", "t"}, keysOf(t, samples[0]))
}

func TestStatusNumbersFollowRequests(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON), newFakeWorker(t, okJSON)}, withCacheAware)
	h.reg.Get("a").StoreSample(workers.Sample{At: time.Now(), Running: 3, Waiting: 1, KVUsage: 0.5, MaxRunning: 8,
		Complete: true, Source: workers.SourceVLLMMetrics}, nil)

	before := h.statusReport(t, "")
	require.Len(t, before.Workers, 2)
	a, b := before.Workers[0], before.Workers[1]
	assert.Equal(t, "a", a.ID)
	assert.Equal(t, h.workers[0].URL, a.URL)
	assert.Equal(t, []string{"m"}, a.Models)
	assert.Equal(t, "healthy", a.Health)
	assert.True(t, a.Routable)
	assert.Equal(t, "closed", a.Circuit)
	require.NotNil(t, a.Telemetry)
	assert.Equal(t, 3, a.Telemetry.Running)
	assert.Equal(t, 1, a.Telemetry.Waiting)
	require.NotNil(t, a.Telemetry.KVUsage)
	assert.InDelta(t, 0.5, *a.Telemetry.KVUsage, 1e-9)
	assert.True(t, a.Telemetry.Fresh)
	assert.GreaterOrEqual(t, a.Telemetry.AgeSeconds, 0.0)
	require.NotNil(t, a.Pressure, "fresh telemetry: pressure is known")
	assert.InDelta(t, 0.5, *a.Pressure, 1e-9, "max(KV 0.5, (3+1)/8)")
	assert.Nil(t, b.Telemetry, "b never reported")
	assert.Nil(t, b.Pressure, "unknown is never 0")
	for _, w := range before.Workers {
		require.NotNil(t, w.PrefixBlocks)
		assert.Zero(t, *w.PrefixBlocks)
		assert.Zero(t, w.Inflight)
	}
	assert.Equal(t, "cache_aware", before.Routing.Policy)
	require.NotNil(t, before.Routing.IndexBlocks)
	assert.Zero(t, *before.Routing.IndexBlocks)
	assert.Empty(t, before.Routing.Decisions)
	assert.Nil(t, before.Routing.PrefixHitRatio.Total, "no routed request: no ratio")
	assert.Equal(t, "off", before.Admission.Mode)

	const n = 4
	for range n {
		h.sendOK(t, prefixedChat("same conversation"))
	}
	after := h.statusReport(t, "")

	var total, minute uint64
	labels := map[string]uint64{}
	for _, d := range after.Routing.Decisions {
		total += d.Total
		minute += d.LastMinute
		labels[d.Label] = d.Total
	}
	assert.Equal(t, uint64(n), total, "one decision a request")
	assert.Equal(t, total, minute, "no history a minute old: the last minute is everything")
	assert.Equal(t, uint64(1), labels[string(routing.LabelColdP2C)], "the first request finds no owner")
	assert.Equal(t, uint64(n-1), labels[string(routing.LabelOwnerHit)], "the others go to it")
	require.NotNil(t, after.Routing.IndexBlocks)
	assert.Positive(t, *after.Routing.IndexBlocks)
	owned := 0
	for _, w := range after.Workers {
		owned += *w.PrefixBlocks
	}
	assert.Equal(t, *after.Routing.IndexBlocks, owned, "one owner per block")
	require.NotNil(t, after.Routing.PrefixHitRatio.Total)
	assert.InDelta(t, float64(n-1)/n, *after.Routing.PrefixHitRatio.Total, 1e-9, "a miss, then whole-prefix hits")
	assert.Greater(t, after.UptimeSeconds, before.UptimeSeconds)
}

// fakeClock is the gateway's clock in tests that move time.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestStatusLastMinuteCountsFromTheHistory(t *testing.T) {
	clock := &fakeClock{}
	t0 := time.Now().Truncate(time.Second)
	clock.set(t0)
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, withCacheAware, func(o *Options) { o.Now = clock.now })

	h.gw.recordStatus() // t0: nothing yet
	for i := range 2 {
		h.sendOK(t, prefixedChat("early "+strconv.Itoa(i)))
	}
	clock.advance(10 * time.Second)
	h.gw.recordStatus() // t0+10s: 2 decisions
	for i := range 3 {
		h.sendOK(t, prefixedChat("late "+strconv.Itoa(i)))
	}
	clock.advance(60 * time.Second)

	rep := h.statusReport(t, "")
	var total, minute uint64
	for _, d := range rep.Routing.Decisions {
		total += d.Total
		minute += d.LastMinute
	}
	assert.Equal(t, uint64(5), total)
	assert.Equal(t, uint64(3), minute, "counted from the sample a minute (and a bit) ago")
	require.NotNil(t, rep.Routing.PrefixHitRatio.LastMinute)
	require.NotNil(t, rep.Routing.PrefixHitRatio.Total)
	assert.InDelta(t, 70.0, rep.UptimeSeconds, 1e-9)

	require.Len(t, rep.History.Samples, 2)
	assert.Equal(t, 1.0, rep.History.IntervalSeconds)
	assert.Equal(t, t0.UnixMilli(), rep.History.Samples[0].T)
	assert.Equal(t, map[string]int{"a": 0}, rep.History.Samples[1].Inflight)
	assert.Empty(t, rep.History.Samples[1].Queue, "no telemetry: no queue to chart")

	since := h.statusReport(t, "?since="+strconv.FormatInt(t0.UnixMilli(), 10))
	require.Len(t, since.History.Samples, 1, "since leaves out what the page has")
	assert.Equal(t, t0.Add(10*time.Second).UnixMilli(), since.History.Samples[0].T)
	assert.Len(t, since.Routing.Decisions, len(rep.Routing.Decisions), "since trims the history only")

	for _, bad := range []string{"soon", "-1", "1.5"} {
		resp, err := http.Get(h.srv.URL + "/api/status?since=" + bad)
		require.NoError(t, err)
		e := decodeError(t, resp)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		require.NotNil(t, e.Error.Param)
		assert.Equal(t, "since", *e.Error.Param)
	}
}

func TestStatusHistoryKeepsFiveMinutes(t *testing.T) {
	clock := &fakeClock{}
	t0 := time.Now().Truncate(time.Second)
	clock.set(t0)
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, func(o *Options) { o.Now = clock.now })
	for range statusHistoryLen + 20 {
		h.gw.recordStatus()
		clock.advance(time.Second)
	}
	rep := h.statusReport(t, "")
	require.Len(t, rep.History.Samples, statusHistoryLen)
	assert.Equal(t, t0.Add(20*time.Second).UnixMilli(), rep.History.Samples[0].T, "the oldest are dropped first")
	for i := 1; i < len(rep.History.Samples); i++ {
		require.Less(t, rep.History.Samples[i-1].T, rep.History.Samples[i].T, "oldest first")
	}
	assert.Nil(t, rep.Routing.IndexBlocks, "round_robin keeps no index")
	assert.Nil(t, rep.Workers[0].PrefixBlocks)
}

func TestStatusWorkerStates(t *testing.T) {
	failing := newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
	})
	h := newHarness(t, []*fakeWorker{failing, newFakeWorker(t, okJSON), newFakeWorker(t, okJSON)},
		func(o *Options) { o.MaxAttempts = 1 })
	h.reg.Drain("c")
	require.Eventually(t, func() bool {
		resp := h.post(t, "/v1/chat/completions", chatBody)
		_, _ = io.Copy(io.Discard, resp.Body)
		return h.reg.Get("a").CircuitState(time.Now()) == workers.BreakerOpen
	}, 5*time.Second, time.Millisecond, "a's failures open its circuit")
	h.workers[1].Close()
	require.Eventually(t, func() bool { return !h.reg.Get("b").Healthy() }, 5*time.Second, 5*time.Millisecond)

	rep := h.statusReport(t, "")
	require.Len(t, rep.Workers, 3)
	got := map[string]workerStatus{}
	for _, w := range rep.Workers {
		got[w.ID] = w
	}
	assert.Equal(t, "open", got["a"].Circuit)
	assert.Equal(t, "healthy", got["a"].Health)
	assert.False(t, got["a"].Routable, "an open circuit takes no requests")
	assert.Equal(t, "unhealthy", got["b"].Health)
	assert.False(t, got["b"].Routable)
	assert.Equal(t, "draining", got["c"].Health)
	assert.False(t, got["c"].Routable)
}

func TestStatusPartitionsFromAdmission(t *testing.T) {
	parts := []admission.Partition{
		{Name: "gold", Weight: 3, APIKeys: []string{"gold-key"}},
		{Name: "free", Weight: 1},
	}
	resolver, err := admission.NewResolver(parts, "free", "")
	require.NoError(t, err)
	sched, err := admission.NewScheduler(admission.Config{Mode: admission.ModeEnforce, Partitions: parts, DefaultPartition: "free"},
		admission.CapacityFunc(func() int { return 100 }), nil, prometheus.NewRegistry())
	require.NoError(t, err)
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, func(o *Options) {
		o.Partitions, o.Admission = resolver, sched
	})
	for range 2 {
		req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer gold-key")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	h.gw.metrics.seeds.WithLabelValues("gold").Set(1) // as proxy does while a seed is in flight

	rep := h.statusReport(t, "")
	assert.Equal(t, "enforce", rep.Admission.Mode)
	require.Len(t, rep.Partitions, 2)
	gold, free := rep.Partitions[0], rep.Partitions[1]
	assert.Equal(t, "gold", gold.Name, "configuration order")
	assert.InDelta(t, 3.0, gold.Weight, 1e-9)
	assert.Positive(t, gold.ServedTokens)
	assert.Equal(t, uint64(2), gold.Succeeded)
	assert.Zero(t, gold.Inflight)
	assert.Zero(t, gold.Queued)
	assert.Equal(t, 1, gold.SeedsInflight)
	assert.Equal(t, "free", free.Name)
	assert.Zero(t, free.ServedTokens)
	assert.Zero(t, free.SeedsInflight)
}

func TestStatusPageRoutes(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)})
	cases := []struct {
		method, path string
		status       int
		contentType  string
	}{
		{http.MethodGet, "/", http.StatusOK, "text/html; charset=utf-8"},
		{http.MethodHead, "/", http.StatusOK, "text/html; charset=utf-8"},
		{http.MethodGet, "/assets/status.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{http.MethodGet, "/assets/status.css", http.StatusOK, "text/css; charset=utf-8"},
		{http.MethodGet, "/assets/missing.js", http.StatusNotFound, "application/json"},
		{http.MethodPost, "/", http.StatusMethodNotAllowed, "application/json"},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			req, err := http.NewRequest(c.method, h.srv.URL+c.path, nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, c.status, resp.StatusCode)
			assert.Equal(t, c.contentType, resp.Header.Get("Content-Type"))
			if c.status != http.StatusOK {
				decodeError(t, resp) // an OpenAI error object, like every other error
			}
		})
	}
}

// The feed is read while requests run and the history records: -race
// checks that none of it shares state unguarded.
func TestStatusUnderConcurrentRequests(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON), newFakeWorker(t, okStream)}, withCacheAware)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for j := range 10 {
				h.sendOK(t, prefixedChat("conversation "+strconv.Itoa(i)+" turn "+strconv.Itoa(j)))
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			h.gw.recordStatus()
			h.statusReport(t, "")
		}
	})
	wg.Wait()
	rep := h.statusReport(t, "")
	var total uint64
	for _, d := range rep.Routing.Decisions {
		total += d.Total
	}
	assert.Equal(t, uint64(40), total)
	for _, w := range rep.Workers {
		assert.Zero(t, w.Inflight, "every request released its worker")
	}
}

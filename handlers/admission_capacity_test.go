package handlers

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// A worker without telemetry and max_running 1: the fleet has exactly one
// slot. Enforce mode never lets two requests run on it at once: a routed
// request holds its slot before the proxy acquires the worker.
func TestStaleCapacityCountsRoutedRequests(t *testing.T) {
	const queuedN = 12
	var cur, peak atomic.Int32
	release := make(chan struct{}, 16)
	f := newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, b []byte) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		cur.Add(-1)
		okJSON(w, r, b)
	})
	var sched *admission.Scheduler
	h := newHarness(t, nil, func(o *Options) {
		fc := &FleetCapacity{Registry: o.Registry, Router: o.Router, MaxAge: 5 * time.Second, Now: time.Now}
		parts := []admission.Partition{{Name: "default", Weight: 1}}
		res, err := admission.NewResolver(parts, "default", "")
		require.NoError(t, err)
		sched, err = admission.NewScheduler(admission.Config{Mode: admission.ModeEnforce, Partitions: parts, DefaultPartition: "default"},
			fc, nil, prometheus.NewRegistry())
		require.NoError(t, err)
		o.Partitions, o.Admission = res, sched
	})
	_, err := h.reg.Add(workers.Spec{ID: "a", URL: f.URL, Models: []string{"m"}, Engine: workers.EngineVLLM, MaxRunning: 1})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return h.reg.Workers()[0].Healthy() }, 5*time.Second, 5*time.Millisecond)

	var wg sync.WaitGroup
	post := func() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(h.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	post() // takes the only slot
	require.Eventually(t, func() bool { return cur.Load() == 1 }, 5*time.Second, time.Millisecond)
	for range queuedN {
		post()
	}
	require.Eventually(t, func() bool { return sched.Snapshot().Partitions[0].Queued == queuedN }, 5*time.Second, time.Millisecond)
	release <- struct{}{} // the first finishes: one slot frees
	time.Sleep(300 * time.Millisecond)
	st := sched.Snapshot()
	t.Logf("running at worker: %d (peak %d), queued: %d, outstanding: %d", cur.Load(), peak.Load(), st.Partitions[0].Queued, st.Outstanding)
	for range queuedN + 2 {
		release <- struct{}{}
	}
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int32(1), "a 1-slot fleet ran %d requests at once", peak.Load())
}

// A half-open worker takes exactly one trial request, so it counts one slot
// of capacity, not its whole headroom (the scheduler would dispatch requests
// that routing cannot place there).
func TestHalfOpenWorkerCountsOneSlot(t *testing.T) {
	f := newFakeWorker(t, okJSON)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	reg := workers.NewRegistry(workers.Options{
		Client:         &http.Client{},
		HealthInterval: 10 * time.Millisecond, HealthTimeout: time.Second, HealthPath: "/health",
		UnhealthyThreshold: 1, HealthyThreshold: 1,
		BreakerThreshold: 1, BreakerOpenFor: time.Minute, Now: clock,
	})
	t.Cleanup(reg.Close)
	w, err := reg.Add(workers.Spec{ID: "a", URL: f.URL, Models: []string{"m"}, Engine: workers.EngineVLLM, MaxRunning: 8})
	require.NoError(t, err)
	require.Eventually(t, w.Healthy, 5*time.Second, 5*time.Millisecond)
	policy, _ := routingNewPolicyRR()
	fc := &FleetCapacity{Registry: reg, Router: policy, MaxAge: 5 * time.Second, Now: clock}
	require.Equal(t, 8, fc.Available())

	tk, ok := w.BeginAttempt(clock())
	require.True(t, ok)
	w.EndAttempt(tk, workers.HealthFailure, clock()) // opens the circuit
	require.Equal(t, 0, fc.Available(), "open circuit: no capacity")

	mu.Lock()
	now = now.Add(2 * time.Minute) // half-open: one trial allowed
	mu.Unlock()
	avail := fc.Available()
	granted := 0
	for range 8 {
		if _, ok := w.BeginAttempt(clock()); ok {
			granted++
		}
	}
	t.Logf("half-open: FleetCapacity.Available()=%d, breaker grants %d attempt(s)", avail, granted)
	require.LessOrEqual(t, avail, granted, "the scheduler may dispatch %d requests, but only %d can be sent to the worker", avail, granted)
}

func routingNewPolicyRR() (*routing.Router, error) {
	p, err := routing.NewPolicy("round_robin", routing.DefaultPolicyConfig())
	return routing.NewRouter(p, routing.Options{}), err
}

// A request the worker failed (500) served no tokens: its partition is not
// credited with its estimated cost.
func TestFailedRequestServesNoTokens(t *testing.T) {
	f := newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, b []byte) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":{"message":"boom"}}`))
	})
	var sched *admission.Scheduler
	h := newHarness(t, []*fakeWorker{f}, func(o *Options) {
		parts := []admission.Partition{{Name: "default", Weight: 1}}
		res, _ := admission.NewResolver(parts, "default", "")
		sched, _ = admission.NewScheduler(admission.Config{Mode: admission.ModeEnforce, Partitions: parts, DefaultPartition: "default"},
			admission.CapacityFunc(func() int { return 100 }), nil, prometheus.NewRegistry())
		o.Partitions, o.Admission = res, sched
	})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	require.GreaterOrEqual(t, resp.StatusCode, 500)
	require.Eventually(t, func() bool { return sched.Snapshot().Partitions[0].Failed == 1 }, time.Second, time.Millisecond)
	st := sched.Snapshot().Partitions[0]
	require.Zero(t, st.ServedTokens, "a failed request served %d tokens", st.ServedTokens)
}

package workers

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptedWorker answers /health and /v1/models as told.
type scriptedWorker struct {
	*httptest.Server
	healthy    atomic.Bool
	modelCalls atomic.Int32
	mu         sync.Mutex
	models     string
}

func newScriptedWorker(t *testing.T, models string) *scriptedWorker {
	s := &scriptedWorker{models: models}
	s.healthy.Store(true)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			if !s.healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		case "/v1/models":
			s.modelCalls.Add(1)
			s.mu.Lock()
			defer s.mu.Unlock()
			_, _ = io.WriteString(w, s.models)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *scriptedWorker) setModels(m string) {
	s.mu.Lock()
	s.models = m
	s.mu.Unlock()
}

func testRegistry(t *testing.T) *Registry {
	r := NewRegistry(Options{
		HealthInterval: 10 * time.Millisecond, HealthTimeout: time.Second, HealthPath: "/health",
		UnhealthyThreshold: 2, HealthyThreshold: 2, BreakerThreshold: 3, BreakerOpenFor: time.Second,
	})
	t.Cleanup(r.Close)
	return r
}

func TestWorkerBecomesRoutableAfterItsFirstHealthyCheck(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m1"},{"id":"m0"}]}`)
	sw.healthy.Store(false) // no check can pass yet: the assertions below cannot race the first one
	r := testRegistry(t)
	w, err := r.Add(Spec{ID: "a", URL: sw.URL, Engine: EngineVLLM})
	require.NoError(t, err)
	assert.False(t, w.Routable(time.Now()), "not routable before a check")
	time.Sleep(50 * time.Millisecond)
	assert.False(t, w.Routable(time.Now()), "nor while its checks fail")
	sw.healthy.Store(true)
	require.Eventually(t, func() bool { return w.Routable(time.Now()) }, 2*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"m0", "m1"}, w.Models(), "models learned from /v1/models, sorted")
	assert.Equal(t, ModelServed, r.KnowsModel("m1"))
	assert.Equal(t, ModelUnknown, r.KnowsModel("nope"))
	assert.Equal(t, []string{"m0", "m1"}, r.Models())
	assert.True(t, r.AnyServing())
}

func TestHealthTransitionsAndGeneration(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := testRegistry(t)
	w, err := r.Add(Spec{ID: "a", URL: sw.URL, Models: []string{"m"}, Engine: EngineVLLM})
	require.NoError(t, err)
	require.Eventually(t, w.Healthy, 2*time.Second, 5*time.Millisecond)
	gen := w.Identity().Generation

	sw.healthy.Store(false)
	require.Eventually(t, func() bool { return !w.Healthy() }, 2*time.Second, 5*time.Millisecond)
	assert.False(t, r.AnyServing())
	sw.healthy.Store(true)
	require.Eventually(t, w.Healthy, 2*time.Second, 5*time.Millisecond)
	assert.Equal(t, gen+1, w.Identity().Generation, "back from unhealthy: a new generation, its cache may be gone")
}

func TestLearnedModelsChangeBumpsRevision(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := testRegistry(t)
	w, err := r.Add(Spec{ID: "a", URL: sw.URL, Engine: EngineVLLM})
	require.NoError(t, err)
	require.Eventually(t, w.Healthy, 2*time.Second, 5*time.Millisecond)
	rev := w.Identity().Revision
	sw.setModels(`{"data":[{"id":"m"},{"id":"n"}]}`)
	require.Eventually(t, func() bool { return w.Serves("n") }, 2*time.Second, 5*time.Millisecond)
	assert.Greater(t, w.Identity().Revision, rev)
}

func TestWorkerListingNoModelsIsUnhealthy(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[]}`)
	r := testRegistry(t)
	w, err := r.Add(Spec{ID: "a", URL: sw.URL, Engine: EngineVLLM})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sw.modelCalls.Load() >= 3 }, 2*time.Second, 5*time.Millisecond,
		"several checks have run")
	assert.False(t, w.Healthy(), "a worker that serves nothing cannot take traffic")
	assert.Equal(t, ModelPending, r.KnowsModel("m"), "its models are not known yet")
}

func TestAddRemoveAndReAdd(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := testRegistry(t)
	w1, err := r.Add(Spec{ID: "a", URL: sw.URL, Models: []string{"m"}})
	require.NoError(t, err)
	_, err = r.Add(Spec{ID: "a", URL: sw.URL})
	require.ErrorIs(t, err, ErrDuplicate)
	assert.Same(t, w1, r.Get("a"))
	assert.True(t, r.Remove("a"))
	assert.False(t, r.Remove("a"))
	assert.Nil(t, r.Get("a"))
	assert.Empty(t, r.Workers())
	w2, err := r.Add(Spec{ID: "a", URL: sw.URL, Models: []string{"m"}})
	require.NoError(t, err)
	assert.Greater(t, w2.Identity().Generation, w1.Identity().Generation, "a re-added id is a new incarnation")
}

func TestAcquireReleasesOnce(t *testing.T) {
	w, err := newWorker(Spec{ID: "a", URL: "http://127.0.0.1:1"}, 1, nil)
	require.NoError(t, err)
	rel1 := w.Acquire()
	rel2 := w.Acquire()
	assert.Equal(t, 2, w.Inflight())
	rel1()
	rel1()
	assert.Equal(t, 1, w.Inflight())
	rel2()
	assert.Zero(t, w.Inflight())
}

func TestRestartDetectedFromCounters(t *testing.T) {
	w, err := newWorker(Spec{ID: "a", URL: "http://127.0.0.1:1"}, 1, nil)
	require.NoError(t, err)
	w.StoreSample(Sample{Complete: true, PrefixCacheQueries: 100, PrefixCacheHits: 50}, nil)
	w.StoreSample(Sample{Complete: true, PrefixCacheQueries: 120, PrefixCacheHits: 60}, nil)
	w.StoreSample(Sample{Complete: false, PrefixCacheQueries: 60, PrefixCacheHits: 30}, nil)
	assert.Equal(t, uint64(1), w.Identity().Generation, "a rank missing from one scrape is not a restart")
	w.StoreSample(Sample{Complete: true, PrefixCacheQueries: 3, PrefixCacheHits: 0}, nil)
	assert.Equal(t, uint64(2), w.Identity().Generation, "counters went backwards: the engine restarted")
}

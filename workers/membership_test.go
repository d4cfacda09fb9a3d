package workers

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// membershipRegistry is testRegistry with the drain hooks recorded.
type membershipRegistry struct {
	*Registry
	pending atomic.Int64
	mu      sync.Mutex
	removed []string
}

func newMembershipRegistry(t *testing.T) *membershipRegistry {
	m := &membershipRegistry{}
	m.Registry = NewRegistry(Options{
		HealthInterval: 10 * time.Millisecond, HealthTimeout: time.Second, HealthPath: "/health",
		UnhealthyThreshold: 2, HealthyThreshold: 1,
		Pending: func(string) int { return int(m.pending.Load()) },
		OnRemove: func(id string) {
			m.mu.Lock()
			m.removed = append(m.removed, id)
			m.mu.Unlock()
		},
	})
	t.Cleanup(m.Close)
	return m
}

func (m *membershipRegistry) removedIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.removed...)
}

func (m *membershipRegistry) addHealthy(t *testing.T, id, url string) *Worker {
	t.Helper()
	w, err := m.Add(Spec{ID: id, URL: url, Models: []string{"m"}, Engine: EngineVLLM})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.Routable(time.Now()) }, 2*time.Second, 5*time.Millisecond)
	return w
}

func drainingGauge(t *testing.T, r *Registry) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(r))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "kvgate_workers_draining" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("kvgate_workers_draining not exported")
	return 0
}

func TestDrainKeepsTheWorkerListedButUnroutable(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := newMembershipRegistry(t)
	w := r.addHealthy(t, "a", sw.URL)

	got, ok := r.Drain("a")
	require.True(t, ok)
	assert.Same(t, w, got)
	assert.True(t, w.Draining())
	assert.False(t, w.Removing(), "a drain alone does not remove")
	assert.False(t, w.Routable(time.Now()))
	assert.False(t, r.AnyServing(), "a draining worker is out of service")
	time.Sleep(5 * drainPoll)
	assert.Same(t, w, r.Get("a"), "still registered, however long")
	assert.Empty(t, r.removedIDs())
	assert.Equal(t, 1.0, drainingGauge(t, r.Registry))
	assert.True(t, w.Healthy(), "health checks go on while draining")
	assert.False(t, w.Routable(time.Now()), "and do not bring it back")

	_, ok = r.Drain("nope")
	assert.False(t, ok)
}

func TestRetireWaitsForInflightAndRoutedRequests(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := newMembershipRegistry(t)
	w := r.addHealthy(t, "a", sw.URL)
	release := w.Acquire()
	r.pending.Store(1)

	got, ok := r.Retire("a")
	require.True(t, ok)
	assert.Same(t, w, got)
	assert.True(t, w.Draining())
	assert.True(t, w.Removing())
	assert.False(t, w.Routable(time.Now()), "no new requests once retiring")
	_, ok = r.Retire("a")
	assert.True(t, ok, "retiring twice is retiring once")

	time.Sleep(5 * drainPoll)
	assert.Same(t, w, r.Get("a"), "a request in flight keeps it registered")
	release()
	time.Sleep(5 * drainPoll)
	assert.Same(t, w, r.Get("a"), "a request routed but not yet in flight keeps it registered")
	assert.Equal(t, 1.0, drainingGauge(t, r.Registry))

	r.pending.Store(0)
	require.Eventually(t, func() bool { return r.Get("a") == nil }, 2*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"a"}, r.removedIDs(), "removal fires OnRemove once")
	assert.Zero(t, drainingGauge(t, r.Registry))

	_, ok = r.Retire("a")
	assert.False(t, ok, "unknown id")
}

func TestRetireOfAnIdleWorkerRemovesIt(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := newMembershipRegistry(t)
	r.addHealthy(t, "a", sw.URL)
	_, ok := r.Retire("a")
	require.True(t, ok)
	require.Eventually(t, func() bool { return r.Get("a") == nil }, 2*time.Second, 5*time.Millisecond)
}

// A drain waiting on a request that never ends must not keep Close (the
// gateway's shutdown) waiting, nor leak its goroutine (goleak checks).
func TestCloseEndsPendingDrains(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := newMembershipRegistry(t)
	w := r.addHealthy(t, "a", sw.URL)
	defer w.Acquire()() // never released before Close
	v := r.addHealthy(t, "b", sw.URL)
	defer v.Acquire()()
	_, ok := r.Retire("a")
	require.True(t, ok)
	_, err := r.Replace(Spec{ID: "b", URL: sw.URL + "/", Models: []string{"m"}, Engine: EngineSGLang})
	require.NoError(t, err)

	closed := make(chan struct{})
	go func() {
		r.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited on a drain")
	}
	_, ok = r.Retire("b")
	assert.True(t, ok, "retiring after Close marks the worker, starts nothing")
}

func TestReplaceBindsANewGenerationAndDrainsTheOld(t *testing.T) {
	oldSrv := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	newSrv := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	newSrv.healthy.Store(false)
	r := newMembershipRegistry(t)
	old := r.addHealthy(t, "a", oldSrv.URL)
	release := old.Acquire()

	w, err := r.Replace(Spec{ID: "a", URL: newSrv.URL, Models: []string{"m"}, Engine: EngineVLLM})
	require.NoError(t, err)
	assert.Same(t, w, r.Get("a"))
	assert.Greater(t, w.Identity().Generation, old.Identity().Generation, "decisions bound to the old incarnation fail closed")
	assert.True(t, old.Draining())
	assert.True(t, old.Removing())
	assert.Equal(t, []*Worker{old}, r.Replaced(), "the old incarnation is listed while its request runs")
	assert.Equal(t, []string{"a"}, r.removedIDs(), "routing forgets the old incarnation")
	assert.Equal(t, 1.0, drainingGauge(t, r.Registry))

	time.Sleep(5 * drainPoll)
	assert.False(t, w.Routable(time.Now()), "the new incarnation waits for a healthy check")
	newSrv.healthy.Store(true)
	require.Eventually(t, func() bool { return w.Routable(time.Now()) }, 2*time.Second, 5*time.Millisecond)

	assert.Equal(t, []*Worker{old}, r.Replaced())
	release()
	require.Eventually(t, func() bool { return len(r.Replaced()) == 0 }, 2*time.Second, 5*time.Millisecond)
	assert.Zero(t, drainingGauge(t, r.Registry))

	fresh, err := r.Replace(Spec{ID: "b", URL: newSrv.URL})
	require.NoError(t, err, "replacing an unknown id adds it")
	assert.Same(t, fresh, r.Get("b"))
	_, err = r.Replace(Spec{ID: "b", URL: "http://[::1"})
	require.Error(t, err)
	assert.Same(t, fresh, r.Get("b"), "a bad spec leaves the worker alone")
}

func TestReplaceOfARetiringWorkerReadmitsIt(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := newMembershipRegistry(t)
	old := r.addHealthy(t, "a", sw.URL)
	release := old.Acquire()
	_, ok := r.Retire("a")
	require.True(t, ok)

	w, err := r.Replace(Spec{ID: "a", URL: sw.URL, Models: []string{"m"}, Engine: EngineVLLM})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.Routable(time.Now()) }, 2*time.Second, 5*time.Millisecond)
	release()
	time.Sleep(5 * drainPoll)
	assert.Same(t, w, r.Get("a"), "the old incarnation's retirement does not remove the new one")
	assert.False(t, w.Removing())
}

func TestRestoreTakesBackARetirement(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := newMembershipRegistry(t)
	w := r.addHealthy(t, "a", sw.URL)
	gen := w.Identity().Generation
	release := w.Acquire()
	_, ok := r.Retire("a")
	require.True(t, ok)
	require.False(t, w.Routable(time.Now()))

	got, ok := r.Restore("a")
	require.True(t, ok)
	assert.Same(t, w, got, "the same worker, not a new incarnation")
	assert.Equal(t, gen, w.Identity().Generation, "same generation: its cache and ownership stand")
	assert.False(t, w.Draining())
	assert.False(t, w.Removing())
	assert.True(t, w.Routable(time.Now()), "healthy all along, so routable at once")
	assert.Zero(t, drainingGauge(t, r.Registry))

	release()
	time.Sleep(5 * drainPoll)
	assert.Same(t, w, r.Get("a"), "the cancelled retirement removes nothing once idle")
	assert.Empty(t, r.removedIDs(), "routing keeps what it knows of it")

	_, ok = r.Restore("a")
	assert.False(t, ok, "not retiring")
	_, ok = r.Restore("nope")
	assert.False(t, ok, "unknown id")

	_, ok = r.Retire("a")
	require.True(t, ok)
	require.Eventually(t, func() bool { return r.Get("a") == nil }, 2*time.Second, 5*time.Millisecond,
		"a later retirement still removes it")
	_, ok = r.Restore("a")
	assert.False(t, ok, "too late once removed")
}

func TestRestoreNeverUndoesADrain(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := newMembershipRegistry(t)
	w := r.addHealthy(t, "a", sw.URL)
	defer w.Acquire()()
	_, ok := r.Drain("a")
	require.True(t, ok)
	_, ok = r.Retire("a")
	require.True(t, ok)
	_, ok = r.Restore("a")
	require.True(t, ok)
	assert.False(t, w.Removing(), "no longer leaving")
	assert.True(t, w.Draining(), "but the operator's drain stands")
	assert.False(t, w.Routable(time.Now()))

	v := r.addHealthy(t, "b", sw.URL)
	defer v.Acquire()()
	_, ok = r.Retire("b")
	require.True(t, ok)
	_, ok = r.Drain("b")
	require.True(t, ok, "drained while retiring")
	_, ok = r.Restore("b")
	require.True(t, ok)
	assert.True(t, v.Draining(), "a drain asked for during the retirement stands too")
}

func TestUpdateChangesModelsAndCapacityInPlace(t *testing.T) {
	sw := newScriptedWorker(t, `{"data":[{"id":"m"}]}`)
	r := newMembershipRegistry(t)
	w := r.addHealthy(t, "a", sw.URL)
	id := w.Identity()
	spec := Spec{ID: "a", URL: sw.URL, Models: []string{"m"}, Engine: EngineVLLM}
	assert.Equal(t, ChangeNone, w.ChangeTo(spec))

	spec.MaxRunning = 16
	assert.Equal(t, ChangeUpdate, w.ChangeTo(spec))
	got, ok := r.Update(spec)
	require.True(t, ok)
	assert.Same(t, w, got)
	assert.Equal(t, 16, w.MaxRunningHint())
	assert.Equal(t, id.Generation, w.Identity().Generation, "same process, same cache")
	assert.Equal(t, id.Revision+1, w.Identity().Revision)
	assert.Equal(t, ChangeNone, w.ChangeTo(spec))

	spec.Models = []string{"m", "n"}
	r.Update(spec)
	assert.True(t, w.Serves("n"))
	assert.Equal(t, id.Revision+2, w.Identity().Revision)
	r.Update(spec)
	assert.Equal(t, id.Revision+2, w.Identity().Revision, "no change, no new revision")

	spec.Models = nil // learned from the worker again
	assert.Equal(t, ChangeUpdate, w.ChangeTo(spec))
	r.Update(spec)
	require.Eventually(t, func() bool { return !w.Serves("n") }, 2*time.Second, 5*time.Millisecond,
		"the next health check lists the worker's own models")
	assert.Equal(t, ChangeNone, w.ChangeTo(spec))

	_, ok = r.Update(Spec{ID: "nope"})
	assert.False(t, ok)
}

func TestChangeTo(t *testing.T) {
	w, err := newWorker(Spec{ID: "a", URL: "http://127.0.0.1:1/", Models: []string{"m"}, Engine: EngineVLLM, MaxRunning: 8, DPRanks: 2}, 1, nil)
	require.NoError(t, err)
	base := Spec{ID: "a", URL: "http://127.0.0.1:1", Models: []string{"m"}, Engine: EngineVLLM, MaxRunning: 8, DPRanks: 2}
	tests := []struct {
		name string
		edit func(*Spec)
		want Change
	}{
		{"same", func(*Spec) {}, ChangeNone},
		{"trailing slash", func(s *Spec) { s.URL += "/" }, ChangeNone},
		{"url", func(s *Spec) { s.URL = "http://127.0.0.1:2" }, ChangeReplace},
		{"engine", func(s *Spec) { s.Engine = EngineSGLang }, ChangeReplace},
		{"dp ranks", func(s *Spec) { s.DPRanks = 4 }, ChangeReplace},
		{"models", func(s *Spec) { s.Models = []string{"n"} }, ChangeUpdate},
		{"models learned", func(s *Spec) { s.Models = nil }, ChangeUpdate},
		{"max running", func(s *Spec) { s.MaxRunning = 9 }, ChangeUpdate},
		{"api key", func(s *Spec) { s.APIKey = "k2" }, ChangeReplace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			tt.edit(&s)
			assert.Equal(t, tt.want, w.ChangeTo(s))
		})
	}
}

// Apply, the step config reload and discovery reconcile with, changes as
// little as it can: add, take back a retirement, update in place, or
// replace; it never touches another origin's worker.
func TestApplyChangesAsLittleAsItCan(t *testing.T) {
	r := NewRegistry(Options{HealthInterval: time.Hour})
	t.Cleanup(r.Close)
	s := Spec{ID: "a", URL: "http://127.0.0.1:9", Models: []string{"m"}, Engine: EngineVLLM, Origin: OriginConfig}

	applied, err := r.Apply(s)
	require.NoError(t, err)
	assert.Equal(t, AppliedAdded, applied)
	w := r.Get("a")
	gen := w.Identity().Generation

	applied, err = r.Apply(s)
	require.NoError(t, err)
	assert.Equal(t, AppliedNone, applied)

	release := w.Acquire() // keeps the retirement from finishing
	_, ok := r.Retire("a")
	require.True(t, ok)
	more := s
	more.MaxRunning = 16
	applied, err = r.Apply(more)
	require.NoError(t, err)
	assert.Equal(t, AppliedRestored, applied, "listed again before its drain ended")
	assert.Same(t, w, r.Get("a"))
	assert.False(t, w.Removing())
	assert.Equal(t, gen, w.Identity().Generation, "its cache is kept")
	assert.Equal(t, 16, w.MaxRunningHint(), "and the update applied")
	release()

	more.Models = []string{"n"}
	applied, err = r.Apply(more)
	require.NoError(t, err)
	assert.Equal(t, AppliedUpdated, applied)

	moved := more
	moved.URL = "http://127.0.0.1:10"
	applied, err = r.Apply(moved)
	require.NoError(t, err)
	assert.Equal(t, AppliedReplaced, applied)
	assert.Greater(t, r.Get("a").Identity().Generation, gen)

	other := moved
	other.Origin = OriginDiscovery
	_, err = r.Apply(other)
	assert.ErrorIs(t, err, ErrOtherOrigin)
}

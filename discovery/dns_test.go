package discovery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/workers"
)

// fakeResolver answers from maps the test edits.
type fakeResolver struct {
	mu       sync.Mutex
	ips      map[string][]string
	srvs     map[string][]*net.SRV
	err      error
	networks []string // of each LookupNetIP
}

func (f *fakeResolver) set(name string, ips ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ips[name] = ips
}

func (f *fakeResolver) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// LookupNetIP answers as net.Resolver does: network "ip4" keeps the IPv4
// addresses, "ip6" the IPv6 ones, "ip" both; none left is "no such host".
func (f *fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.networks = append(f.networks, network)
	if f.err != nil {
		return nil, f.err
	}
	var out []netip.Addr
	for _, s := range f.ips[host] {
		a := netip.MustParseAddr(s)
		if network == "ip" || network == "ip4" && a.Is4() || network == "ip6" && a.Is6() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

func (f *fakeResolver) LookupSRV(_ context.Context, _, _, name string) (string, []*net.SRV, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", nil, f.err
	}
	srvs, ok := f.srvs[name]
	if !ok {
		return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	return name, srvs, nil
}

// offlineRegistry is a real registry whose checks never leave the process:
// its workers stay unhealthy, which membership does not care about.
func offlineRegistry(t *testing.T) *workers.Registry {
	reg := workers.NewRegistry(workers.Options{
		Client: &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
			return nil, errors.New("offline")
		})},
		HealthInterval: time.Hour, HealthTimeout: time.Second, HealthPath: "/health",
		UnhealthyThreshold: 1, HealthyThreshold: 1,
	})
	t.Cleanup(reg.Close)
	return reg
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func ids(reg *workers.Registry) []string {
	var out []string
	for _, w := range reg.Workers() {
		out = append(out, w.ID())
	}
	return out
}

func newTestDNS(t *testing.T, opts Options, reg Registry) (*DNS, *prometheus.Registry) {
	t.Helper()
	m := prometheus.NewRegistry()
	opts.Metrics = m
	d, err := NewDNS(opts, reg)
	require.NoError(t, err)
	return d, m
}

func TestRecordsBecomeWorkersAndVanishedOnesLeave(t *testing.T) {
	res := &fakeResolver{ips: map[string][]string{}}
	res.set("vllm.test", "10.0.0.2", "10.0.0.1", "fd00::7", "10.0.0.1")
	reg := offlineRegistry(t)
	d, _ := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: time.Second, Resolver: res,
		Engine: workers.EngineVLLM, Models: []string{"llama"}, MaxRunning: 32, DPRanks: 2, RemoveAfter: 1}, reg)

	require.NoError(t, d.Sync(t.Context()))
	assert.Equal(t, []string{"10.0.0.1:8000", "10.0.0.2:8000", "[fd00::7]:8000"}, ids(reg), "ids from ip:port, duplicates merged")
	w := reg.Get("[fd00::7]:8000")
	require.NotNil(t, w)
	assert.Equal(t, "http://[fd00::7]:8000", w.URL())
	assert.Equal(t, workers.OriginDiscovery, w.Origin())
	assert.Equal(t, workers.EngineVLLM, w.Engine())
	assert.Equal(t, []string{"llama"}, w.Models())
	assert.Equal(t, 32, w.MaxRunningHint())
	assert.Equal(t, 2, w.DPRanks())
	for _, id := range ids(reg) {
		assert.True(t, config.IsDiscoveredID(id), "config recognizes %s as a discovered id", id)
	}
	gen := reg.Get("10.0.0.1:8000").Identity().Generation

	res.set("vllm.test", "10.0.0.1", "10.0.0.3")
	held := reg.Get("10.0.0.2:8000").Acquire()
	require.NoError(t, d.Sync(t.Context()))
	assert.Equal(t, gen, reg.Get("10.0.0.1:8000").Identity().Generation, "a worker still listed is left alone")
	require.NotNil(t, reg.Get("10.0.0.3:8000"))
	leaving := reg.Get("10.0.0.2:8000")
	require.NotNil(t, leaving, "a vanished worker with a request in flight is drained, not cut")
	assert.True(t, leaving.Removing())
	require.Eventually(t, func() bool { return reg.Get("[fd00::7]:8000") == nil }, 2*time.Second, 5*time.Millisecond,
		"an idle vanished worker leaves")
	held()
	require.Eventually(t, func() bool { return reg.Get("10.0.0.2:8000") == nil }, 2*time.Second, 5*time.Millisecond)
}

func TestFailedOrEmptyLookupsKeepTheWorkers(t *testing.T) {
	res := &fakeResolver{ips: map[string][]string{}}
	res.set("vllm.test", "10.0.0.1")
	reg := offlineRegistry(t)
	d, m := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: time.Second, Resolver: res}, reg)
	require.NoError(t, d.Sync(t.Context()))

	res.fail(&net.DNSError{Err: "server misbehaving", Name: "vllm.test", IsTemporary: true})
	require.Error(t, d.Sync(t.Context()))
	res.fail(nil)
	res.set("vllm.test")
	require.NoError(t, d.Sync(t.Context()), "no records is news, not an error")
	delete(res.ips, "vllm.test")
	require.NoError(t, d.Sync(t.Context()), "NXDOMAIN likewise")

	w := reg.Get("10.0.0.1:8000")
	require.NotNil(t, w)
	assert.False(t, w.Draining(), "the last good answer stands")
	assert.Equal(t, 1.0, testutil.ToFloat64(d.lookups.WithLabelValues("ok")))
	assert.Equal(t, 1.0, testutil.ToFloat64(d.lookups.WithLabelValues("error")))
	assert.Equal(t, 2.0, testutil.ToFloat64(d.lookups.WithLabelValues("empty")))
	n, err := testutil.GatherAndCount(m, "kvgate_discovery_lookups_total", "kvgate_discovery_workers")
	require.NoError(t, err)
	assert.Equal(t, 4, n, "three results and the gauge are exported")
	assert.Equal(t, 1.0, testutil.ToFloat64(d.found))
}

func TestDiscoveryNeverTouchesOtherWorkers(t *testing.T) {
	res := &fakeResolver{ips: map[string][]string{}}
	res.set("vllm.test", "10.0.0.1", "10.0.0.2")
	reg := offlineRegistry(t)
	static, err := reg.Add(workers.Spec{ID: "static", URL: "http://10.9.9.9:1", Origin: workers.OriginConfig})
	require.NoError(t, err)
	taken, err := reg.Add(workers.Spec{ID: "10.0.0.2:8000", URL: "http://10.9.9.9:2", Origin: workers.OriginAdmin})
	require.NoError(t, err)
	d, _ := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: time.Second, Resolver: res, RemoveAfter: 1}, reg)

	require.NoError(t, d.Sync(t.Context()))
	assert.Equal(t, []string{"10.0.0.1:8000", "10.0.0.2:8000", "static"}, ids(reg))
	assert.Same(t, taken, reg.Get("10.0.0.2:8000"), "an id held by another origin is skipped")

	res.set("vllm.test", "10.0.0.3")
	require.NoError(t, d.Sync(t.Context()))
	require.Eventually(t, func() bool { return reg.Get("10.0.0.1:8000") == nil }, 2*time.Second, 5*time.Millisecond)
	assert.Same(t, static, reg.Get("static"), "static workers are never removed")
	assert.Same(t, taken, reg.Get("10.0.0.2:8000"))
	assert.False(t, static.Draining())
	assert.False(t, taken.Draining())
}

// syncMissing runs n lookups that find only found.
func syncMissing(t *testing.T, d *DNS, res *fakeResolver, n int, found ...string) {
	t.Helper()
	res.set("vllm.test", found...)
	for range n {
		require.NoError(t, d.Sync(t.Context()))
	}
}

// A pod failing a readiness probe leaves a headless Service's answer for a
// lookup or two; its worker, often the busiest owner of hot prefixes, stays.
func TestABriefAbsenceKeepsTheWorker(t *testing.T) {
	res := &fakeResolver{ips: map[string][]string{}}
	reg := offlineRegistry(t)
	d, _ := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: time.Second, Resolver: res, RemoveAfter: 3}, reg)
	syncMissing(t, d, res, 1, "10.0.0.1", "10.0.0.2")
	w := reg.Get("10.0.0.1:8000")
	require.NotNil(t, w)
	gen := w.Identity().Generation

	for _, missing := range []int{1, 2, 2} {
		for range missing {
			syncMissing(t, d, res, 1, "10.0.0.2")
			assert.False(t, w.Draining(), "missing %d lookups of 3: not drained", missing)
		}
		syncMissing(t, d, res, 1, "10.0.0.1", "10.0.0.2")
		assert.Same(t, w, reg.Get("10.0.0.1:8000"), "back after %d lookups: the same worker", missing)
		assert.Equal(t, gen, w.Identity().Generation)
		assert.False(t, w.Draining())
		assert.False(t, w.Removing())
	}
	// 1, 2 and 2 lookups missing add up to more than 3: only a run counts.
}

func TestAnAddressMissingRemoveAfterLookupsLeaves(t *testing.T) {
	res := &fakeResolver{ips: map[string][]string{}}
	reg := offlineRegistry(t)
	d, _ := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: time.Second, Resolver: res, RemoveAfter: 3}, reg)
	syncMissing(t, d, res, 1, "10.0.0.1", "10.0.0.2")
	w := reg.Get("10.0.0.1:8000")
	require.NotNil(t, w)

	syncMissing(t, d, res, 2, "10.0.0.2")
	assert.False(t, w.Draining(), "two lookups of three")
	res.set("vllm.test")
	require.NoError(t, d.Sync(t.Context()))
	res.fail(errors.New("SERVFAIL"))
	require.Error(t, d.Sync(t.Context()))
	res.fail(nil)
	assert.False(t, w.Draining(), "an empty or failed lookup is no answer: it does not count")

	held := w.Acquire()
	syncMissing(t, d, res, 1, "10.0.0.2")
	assert.True(t, w.Draining(), "the third answer without it retires it")
	assert.True(t, w.Removing())
	assert.Same(t, w, reg.Get("10.0.0.1:8000"), "drained first: its request runs on")
	held()
	require.Eventually(t, func() bool { return reg.Get("10.0.0.1:8000") == nil }, 2*time.Second, 5*time.Millisecond,
		"then removed")
	assert.NotNil(t, reg.Get("10.0.0.2:8000"))
}

// A worker whose address comes back while it drains is restored: same
// worker, same generation, routable again; its drain is not undone when an
// operator asked for it.
func TestAWorkerBackWhileRetiringIsRestored(t *testing.T) {
	e1, e2 := startEngine(t, true), startEngine(t, true)
	id := func(e *engine) string { return "127.0.0.1:" + strconv.Itoa(int(e.port(t))) }
	srv := func(e *engine) *net.SRV { return &net.SRV{Target: "pod.vllm.test.", Port: e.port(t)} }
	res := &fakeResolver{ips: map[string][]string{"pod.vllm.test.": {"127.0.0.1"}}, srvs: map[string][]*net.SRV{}}
	setSRV := func(srvs ...*net.SRV) {
		res.mu.Lock()
		defer res.mu.Unlock()
		res.srvs["_http._tcp.vllm.test"] = srvs
	}
	setSRV(srv(e1), srv(e2))
	reg := liveRegistry(t)
	d, _ := newTestDNS(t, Options{Name: "_http._tcp.vllm.test", Interval: time.Second, Resolver: res,
		Models: []string{"m"}, RemoveAfter: 2}, reg)
	require.NoError(t, d.Sync(t.Context()))
	require.Eventually(t, func() bool { return routable(reg, id(e1)) && routable(reg, id(e2)) }, 5*time.Second, 5*time.Millisecond)
	w := reg.Get(id(e1))
	gen := w.Identity().Generation
	held := w.Acquire()

	setSRV(srv(e2))
	require.NoError(t, d.Sync(t.Context()))
	require.NoError(t, d.Sync(t.Context()))
	require.True(t, w.Removing(), "retiring, its request still running")
	assert.False(t, w.Routable(time.Now()))

	setSRV(srv(e1), srv(e2))
	require.NoError(t, d.Sync(t.Context()))
	assert.Same(t, w, reg.Get(id(e1)), "restored, not replaced")
	assert.Equal(t, gen, w.Identity().Generation, "its generation, and so its prefix ownership, stand")
	assert.False(t, w.Draining())
	assert.False(t, w.Removing())
	assert.True(t, w.Routable(time.Now()), "healthy all along: routable again")
	held()
	time.Sleep(100 * time.Millisecond)
	assert.Same(t, w, reg.Get(id(e1)), "the cancelled retirement removes nothing")

	// An operator's drain outlives a retirement and its restoration.
	drained, ok := reg.Drain(id(e2))
	require.True(t, ok)
	require.NoError(t, d.Sync(t.Context()))
	assert.True(t, drained.Draining(), "an operator's drain is not undone by discovery")
	defer drained.Acquire()()
	setSRV(srv(e1))
	require.NoError(t, d.Sync(t.Context()))
	require.NoError(t, d.Sync(t.Context()))
	require.True(t, drained.Removing())
	setSRV(srv(e1), srv(e2))
	require.NoError(t, d.Sync(t.Context()))
	assert.Same(t, drained, reg.Get(id(e2)))
	assert.False(t, drained.Removing(), "its retirement is taken back")
	assert.True(t, drained.Draining(), "its drain is not")
}

// A discovered worker retiring for another reason than discovery's own is
// not discovery's to restore: its address back makes a fresh incarnation.
// A retiring worker whose address comes back under another spec (the
// gateway restarted with another engine for discovery, say) is a new
// incarnation, not a restored one.
func TestAWorkerBackWithAnotherSpecIsReplaced(t *testing.T) {
	res := &fakeResolver{ips: map[string][]string{}}
	reg := offlineRegistry(t)
	d, _ := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: time.Second, Resolver: res}, reg)
	syncMissing(t, d, res, 1, "10.0.0.1")
	old := reg.Get("10.0.0.1:8000")
	defer old.Acquire()()
	_, ok := reg.Retire("10.0.0.1:8000")
	require.True(t, ok)

	sglang, _ := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: time.Second, Resolver: res, Engine: workers.EngineSGLang}, reg)
	require.NoError(t, sglang.Sync(t.Context()))
	back := reg.Get("10.0.0.1:8000")
	require.NotNil(t, back)
	assert.NotSame(t, old, back)
	assert.False(t, back.Draining())
	assert.Equal(t, workers.EngineSGLang, back.Engine())
	assert.Greater(t, back.Identity().Generation, old.Identity().Generation, "a new incarnation")
}

func TestIPFamilyPicksTheRecords(t *testing.T) {
	tests := []struct {
		family  string
		network string
		want    []string
	}{
		{"", "ip", []string{"10.0.0.1:8000", "[fd00::1]:8000"}},
		{"any", "ip", []string{"10.0.0.1:8000", "[fd00::1]:8000"}},
		{"ipv4", "ip4", []string{"10.0.0.1:8000"}},
		{"ipv6", "ip6", []string{"[fd00::1]:8000"}},
	}
	for _, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			res := &fakeResolver{ips: map[string][]string{}, srvs: map[string][]*net.SRV{
				"_http._tcp.vllm.test": {{Target: "pod-a.vllm.test.", Port: 8000}},
			}}
			res.set("vllm.test", "10.0.0.1", "fd00::1") // a dual-stack pod
			res.set("pod-a.vllm.test.", "10.0.0.1", "fd00::1")
			reg := offlineRegistry(t)
			d, _ := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: time.Second, Resolver: res, IPFamily: tt.family}, reg)
			require.NoError(t, d.Sync(t.Context()))
			assert.Equal(t, tt.want, ids(reg), "A/AAAA")

			srvReg := offlineRegistry(t)
			d, _ = newTestDNS(t, Options{Name: "_http._tcp.vllm.test", Interval: time.Second, Resolver: res, IPFamily: tt.family}, srvReg)
			require.NoError(t, d.Sync(t.Context()))
			assert.Equal(t, tt.want, ids(srvReg), "SRV targets")
			assert.Equal(t, []string{tt.network, tt.network}, res.networks, "what the resolver was asked for")
		})
	}
}

func TestSRVRecordsCarryThePorts(t *testing.T) {
	res := &fakeResolver{ips: map[string][]string{}, srvs: map[string][]*net.SRV{
		"_http._tcp.vllm.test": {{Target: "pod-a.vllm.test.", Port: 8001}, {Target: "pod-b.vllm.test.", Port: 8002}},
	}}
	res.set("pod-a.vllm.test.", "10.0.0.1")
	res.set("pod-b.vllm.test.", "10.0.0.1", "10.0.0.2")
	reg := offlineRegistry(t)
	d, _ := newTestDNS(t, Options{Name: "_http._tcp.vllm.test", Interval: time.Second, Resolver: res, Scheme: "https"}, reg)
	require.NoError(t, d.Sync(t.Context()))
	assert.Equal(t, []string{"10.0.0.1:8001", "10.0.0.1:8002", "10.0.0.2:8002"}, ids(reg))
	assert.Equal(t, "https://10.0.0.1:8001", reg.Get("10.0.0.1:8001").URL())

	delete(res.ips, "pod-b.vllm.test.")
	require.Error(t, d.Sync(t.Context()), "a target that does not resolve fails the lookup")
	assert.Len(t, reg.Workers(), 3, "and keeps every worker")
}

func TestRunLooksUpEveryIntervalUntilCancelled(t *testing.T) {
	res := &fakeResolver{ips: map[string][]string{}}
	res.set("vllm.test", "10.0.0.1")
	reg := offlineRegistry(t)
	d, _ := newTestDNS(t, Options{Name: "vllm.test", Port: 8000, Interval: 10 * time.Millisecond, Resolver: res}, reg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		d.Run(ctx)
		close(done)
	}()
	require.Eventually(t, func() bool { return reg.Get("10.0.0.1:8000") != nil }, 2*time.Second, 5*time.Millisecond)
	res.set("vllm.test", "10.0.0.1", "10.0.0.2")
	require.Eventually(t, func() bool { return reg.Get("10.0.0.2:8000") != nil }, 2*time.Second, 5*time.Millisecond)
	cancel()
	<-done
}

func TestNewDNSRejectsBadOptions(t *testing.T) {
	reg := offlineRegistry(t)
	for _, o := range []Options{
		{Port: 80, Interval: time.Second},
		{Name: "vllm.test", Interval: time.Second},
		{Name: "vllm.test", Port: 80},
		{Name: "vllm.test", Port: 80, Interval: time.Second, IPFamily: "ip4"},
	} {
		_, err := NewDNS(o, reg)
		assert.Error(t, err, "%+v", o)
	}
	d, err := NewDNS(Options{Name: "_http._tcp.vllm.test", Interval: time.Second}, reg)
	assert.NoError(t, err, "SRV needs no port")
	assert.Equal(t, 1, d.opts.RemoveAfter, "no remove_after: at the first answer without the address")
}

func TestIDsAreStable(t *testing.T) {
	assert.Equal(t, "10.0.0.7:8000", ID(netip.MustParseAddrPort("10.0.0.7:8000")))
	assert.Equal(t, "[fd00::7]:8000", ID(netip.MustParseAddrPort("[fd00::7]:8000")))
}

// No address is an empty answer whether DNS says so or the hosts file does
// (which answers a family it lacks with an AddrError); anything else is a
// failed lookup.
func TestNotFound(t *testing.T) {
	assert.True(t, notFound(&net.DNSError{Err: "no such host", IsNotFound: true}))
	assert.True(t, notFound(fmt.Errorf("wrapped: %w", &net.AddrError{Err: "no suitable address found", Addr: "localhost"})))
	assert.False(t, notFound(&net.DNSError{Err: "server misbehaving", IsTemporary: true}))
	assert.False(t, notFound(errors.New("timeout")))
}

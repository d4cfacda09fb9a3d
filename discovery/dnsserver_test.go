package discovery

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/kvgate/kvgate/workers"
)

// dnsServer is an authoritative DNS server on 127.0.0.1 (UDP) answering A,
// AAAA and SRV questions from records the test edits; other names get
// NXDOMAIN, and fail makes every answer SERVFAIL.
type dnsServer struct {
	conn net.PacketConn
	done chan struct{}

	mu      sync.Mutex
	a       map[string][]netip.Addr
	srv     map[string][]net.SRV
	fail    bool
	queries atomic.Int64
	asked   map[dnsmessage.Type]int // questions by record type
}

func startDNSServer(t *testing.T) *dnsServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &dnsServer{conn: conn, done: make(chan struct{}), a: map[string][]netip.Addr{}, srv: map[string][]net.SRV{},
		asked: map[dnsmessage.Type]int{}}
	go s.serve()
	t.Cleanup(func() {
		conn.Close()
		<-s.done
	})
	return s
}

// resolver sends every query of a pure-Go resolver to this server.
func (s *dnsServer) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", s.conn.LocalAddr().String())
	}}
}

func (s *dnsServer) setA(name string, addrs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.a[name] = nil
	for _, a := range addrs {
		s.a[name] = append(s.a[name], netip.MustParseAddr(a))
	}
}

func (s *dnsServer) setSRV(name string, srvs ...net.SRV) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv[name] = srvs
}

func (s *dnsServer) questions(t dnsmessage.Type) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[t]
}

func (s *dnsServer) setFail(fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

func (s *dnsServer) serve() {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		s.queries.Add(1)
		if resp, err := s.answer(buf[:n]); err == nil {
			_, _ = s.conn.WriteTo(resp, from)
		}
	}
}

func (s *dnsServer) answer(msg []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	name := strings.ToLower(q.Name.String())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked[q.Type]++
	addrs, knownA := s.a[name]
	srvs, knownSRV := s.srv[name]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	switch {
	case s.fail:
		rh.RCode = dnsmessage.RCodeServerFailure
	case !knownA && !knownSRV:
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
	for _, a := range addrs {
		switch {
		case rh.RCode != dnsmessage.RCodeSuccess:
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	if q.Type == dnsmessage.TypeSRV && rh.RCode == dnsmessage.RCodeSuccess {
		for _, srv := range srvs {
			target, err := dnsmessage.NewName(srv.Target)
			if err != nil {
				return nil, err
			}
			if err := b.SRVResource(rr, dnsmessage.SRVResource{Priority: srv.Priority, Weight: srv.Weight, Port: srv.Port, Target: target}); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}

// engine is a worker on 127.0.0.1 that answers health checks as told.
type engine struct {
	*httptest.Server
	healthy atomic.Bool
}

func startEngine(t *testing.T, healthy bool) *engine {
	e := &engine{}
	e.healthy.Store(healthy)
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			if !e.healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *engine) port(t *testing.T) uint16 {
	_, p, err := net.SplitHostPort(e.Listener.Addr().String())
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return uint16(n)
}

func liveRegistry(t *testing.T) *workers.Registry {
	reg := workers.NewRegistry(workers.Options{
		HealthInterval: 10 * time.Millisecond, HealthTimeout: time.Second, HealthPath: "/health",
		UnhealthyThreshold: 1, HealthyThreshold: 1,
	})
	t.Cleanup(reg.Close)
	return reg
}

func routable(reg *workers.Registry, id string) bool {
	w := reg.Get(id)
	return w != nil && w.Routable(time.Now())
}

// The headless-Service case end to end through a real DNS exchange: SRV
// records name the pods and their ports (every test server is on
// 127.0.0.1, so only ports tell them apart); workers found become routable
// after their first healthy check, and those whose records go are drained.
func TestDNSServerRecordsDriveMembership(t *testing.T) {
	dns := startDNSServer(t)
	e1, e2, e3 := startEngine(t, true), startEngine(t, true), startEngine(t, false)
	const name = "_http._tcp.vllm.kvgate.test."
	dns.setA("pod.vllm.kvgate.test.", "127.0.0.1")
	srv := func(e *engine) net.SRV { return net.SRV{Target: "pod.vllm.kvgate.test.", Port: e.port(t), Weight: 1} }
	dns.setSRV(name, srv(e1), srv(e2))
	id := func(e *engine) string { return "127.0.0.1:" + strconv.Itoa(int(e.port(t))) }

	reg := liveRegistry(t)
	d, _ := newTestDNS(t, Options{Name: name, Interval: 20 * time.Millisecond, Resolver: dns.resolver(), Models: []string{"m"}}, reg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		d.Run(ctx)
		close(done)
	}()
	defer func() {
		cancel()
		<-done
	}()

	require.Eventually(t, func() bool { return routable(reg, id(e1)) && routable(reg, id(e2)) }, 5*time.Second, 5*time.Millisecond)
	held := reg.Get(id(e1)).Acquire()

	dns.setSRV(name, srv(e2), srv(e3))
	require.Eventually(t, func() bool { return reg.Get(id(e3)) != nil }, 5*time.Second, 5*time.Millisecond)
	w1 := reg.Get(id(e1))
	require.NotNil(t, w1, "drained, not cut: its request is still running")
	assert.True(t, w1.Removing())
	assert.False(t, w1.Routable(time.Now()))
	assert.True(t, routable(reg, id(e2)))

	time.Sleep(100 * time.Millisecond)
	assert.False(t, routable(reg, id(e3)), "found, but not routable before a healthy check")
	e3.healthy.Store(true)
	require.Eventually(t, func() bool { return routable(reg, id(e3)) }, 5*time.Second, 5*time.Millisecond)

	held()
	require.Eventually(t, func() bool { return reg.Get(id(e1)) == nil }, 5*time.Second, 5*time.Millisecond)

	dns.setFail(true)
	before := dns.queries.Load()
	require.Eventually(t, func() bool { return dns.queries.Load() > before+2 }, 5*time.Second, 5*time.Millisecond)
	assert.True(t, routable(reg, id(e2)) && routable(reg, id(e3)), "SERVFAIL keeps the workers found before")
}

// A and AAAA records with the configured port, through a real DNS exchange.
func TestDNSServerAddressRecords(t *testing.T) {
	dns := startDNSServer(t)
	e := startEngine(t, true)
	dns.setA("vllm.kvgate.test.", "127.0.0.1")
	reg := liveRegistry(t)
	d, _ := newTestDNS(t, Options{Name: "vllm.kvgate.test.", Port: int(e.port(t)), Interval: time.Second,
		Resolver: dns.resolver(), Engine: workers.EngineVLLM}, reg)

	require.NoError(t, d.Sync(t.Context()))
	id := "127.0.0.1:" + strconv.Itoa(int(e.port(t)))
	require.Equal(t, []string{id}, ids(reg))
	assert.Equal(t, e.URL, reg.Get(id).URL())
	require.Eventually(t, func() bool { return routable(reg, id) }, 5*time.Second, 5*time.Millisecond)

	dns.setFail(true)
	err := d.Sync(t.Context())
	require.Error(t, err)
	var dnsErr *net.DNSError
	assert.True(t, errors.As(err, &dnsErr), "a resolver error: %v", err)
	assert.Equal(t, []string{id}, ids(reg))
}

// ip_family through a real DNS exchange: a dual-stack name, asked for A
// records only, gives one worker, and no AAAA question is sent. (The
// registry is offline: nothing is sent to ::1.)
func TestDNSServerIPFamily(t *testing.T) {
	for _, tt := range []struct {
		family string
		want   []string
		aaaa   bool
	}{
		{"any", []string{"127.0.0.1:8000", "[::1]:8000"}, true},
		{"ipv4", []string{"127.0.0.1:8000"}, false},
		{"ipv6", []string{"[::1]:8000"}, true},
	} {
		t.Run(tt.family, func(t *testing.T) {
			dns := startDNSServer(t)
			dns.setA("vllm.kvgate.test.", "127.0.0.1", "::1")
			reg := offlineRegistry(t)
			d, _ := newTestDNS(t, Options{Name: "vllm.kvgate.test.", Port: 8000, Interval: time.Second,
				Resolver: dns.resolver(), IPFamily: tt.family}, reg)
			require.NoError(t, d.Sync(t.Context()))
			assert.Equal(t, tt.want, ids(reg))
			assert.Equal(t, tt.aaaa, dns.questions(dnsmessage.TypeAAAA) > 0, "AAAA asked")
			assert.Equal(t, tt.family != "ipv6", dns.questions(dnsmessage.TypeA) > 0, "A asked")
		})
	}
}

// An SRV target without an address of the family asked for is skipped, not
// a failed lookup: during a move to dual stack, pods made before it have
// IPv4 only. A target with no address at all still fails the lookup.
func TestDNSServerSRVTargetsOfOneFamily(t *testing.T) {
	dns := startDNSServer(t)
	dns.setA("v4only.kvgate.test.", "127.0.0.1")
	dns.setA("v6only.kvgate.test.", "::1")
	name := "_http._tcp.vllm.kvgate.test."
	dns.setSRV(name, net.SRV{Target: "v4only.kvgate.test.", Port: 8001}, net.SRV{Target: "v6only.kvgate.test.", Port: 8002})
	for family, want := range map[string][]string{
		"any":  {"127.0.0.1:8001", "[::1]:8002"},
		"ipv4": {"127.0.0.1:8001"},
		"ipv6": {"[::1]:8002"},
	} {
		t.Run(family, func(t *testing.T) {
			reg := offlineRegistry(t)
			d, _ := newTestDNS(t, Options{Name: name, Interval: time.Second, Resolver: dns.resolver(), IPFamily: family}, reg)
			require.NoError(t, d.Sync(t.Context()))
			assert.Equal(t, want, ids(reg))
		})
	}
	t.Run("a target with no address fails the lookup", func(t *testing.T) {
		dns.setSRV(name, net.SRV{Target: "v4only.kvgate.test.", Port: 8001}, net.SRV{Target: "gone.kvgate.test.", Port: 8003})
		reg := offlineRegistry(t)
		d, _ := newTestDNS(t, Options{Name: name, Interval: time.Second, Resolver: dns.resolver(), IPFamily: "ipv4"}, reg)
		assert.ErrorContains(t, d.Sync(t.Context()), "gone.kvgate.test")
		assert.Empty(t, ids(reg))
	})
}

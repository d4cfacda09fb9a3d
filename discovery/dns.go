package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvgate/kvgate/workers"
)

// Resolver looks names up; *net.Resolver is one. LookupNetIP's network is
// "ip" (A and AAAA), "ip4" (A) or "ip6" (AAAA).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
	LookupSRV(ctx context.Context, service, proto, name string) (cname string, addrs []*net.SRV, err error)
}

var _ Resolver = (*net.Resolver)(nil)

// Registry is what discovery changes: *workers.Registry.
type Registry interface {
	Workers() []*workers.Worker
	Apply(workers.Spec) (workers.Applied, error)
	Retire(id string) (*workers.Worker, bool)
}

var _ Registry = (*workers.Registry)(nil)

// Options configure DNS discovery (config discovery.dns).
type Options struct {
	// Name is looked up for A and AAAA records, each an address of a worker
	// on Port; a name starting with "_" is looked up for SRV records, whose
	// targets are looked up in turn and whose ports are used.
	Name     string
	Port     int
	Interval time.Duration
	// IPFamily picks the address records: "any" or "" (A and AAAA), "ipv4"
	// (A only) or "ipv6" (AAAA only). In a dual-stack cluster a pod has
	// both, and "any" would make it two workers: its capacity counted
	// twice, its prefixes' affinity split between them.
	IPFamily string
	// RemoveAfter is how many successful lookups in a row an address must
	// be missing from before its worker is retired; below 1 counts as 1 (at
	// once). A pod failing one readiness probe leaves a headless Service's
	// answer for a moment, and it is most often the busiest one, owner of
	// the hottest prefixes: retiring it would throw that ownership away.
	RemoveAfter int
	// Scheme of the workers' URLs: "http" (default) or "https".
	Scheme string
	// Engine, Models, MaxRunning, DPRanks and APIKey apply to every worker
	// found.
	Engine     workers.Engine
	Models     []string
	MaxRunning int
	DPRanks    int
	APIKey     string

	// Resolver answers the lookups; nil: net.DefaultResolver.
	Resolver Resolver
	Logger   *slog.Logger
	// Metrics registers kvgate_discovery_*; nil: not registered.
	Metrics prometheus.Registerer
}

// DNS keeps the registry's discovered workers equal to a name's records.
type DNS struct {
	opts    Options
	network string // LookupNetIP's network for opts.IPFamily
	reg     Registry
	lookups *prometheus.CounterVec
	found   prometheus.Gauge
	skipped map[string]bool // ids held by workers of another origin, warned about once
	// missing counts, per discovered worker not yet retiring, the
	// successful lookups in a row its address was missing from.
	missing map[string]int
}

// Lookup results, the values of kvgate_discovery_lookups_total{result}.
const (
	resultOK    = "ok"
	resultEmpty = "empty"
	resultError = "error"
)

// NewDNS returns a discoverer feeding reg; Run starts it.
func NewDNS(opts Options, reg Registry) (*DNS, error) {
	if opts.Name == "" {
		return nil, errors.New("discovery: no name to look up")
	}
	if !srvName(opts.Name) && (opts.Port < 1 || opts.Port > 65535) {
		return nil, fmt.Errorf("discovery: port %d out of range", opts.Port)
	}
	if opts.Interval <= 0 {
		return nil, errors.New("discovery: interval must be positive")
	}
	network, ok := networks[opts.IPFamily]
	if !ok {
		return nil, fmt.Errorf("discovery: ip family %q is not any, ipv4 or ipv6", opts.IPFamily)
	}
	opts.RemoveAfter = max(opts.RemoveAfter, 1)
	if opts.Scheme == "" {
		opts.Scheme = "http"
	}
	if opts.Resolver == nil {
		opts.Resolver = net.DefaultResolver
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &DNS{
		opts:    opts,
		network: network,
		reg:     reg,
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_discovery_lookups_total",
			Help: "DNS discovery lookups, by result: ok, empty (no record: the workers found before are kept) or error (kept too).",
		}, []string{"result"}),
		found: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvgate_discovery_workers",
			Help: "Workers the last successful DNS discovery lookup found.",
		}),
		skipped: map[string]bool{},
		missing: map[string]int{},
	}
	for _, r := range []string{resultOK, resultEmpty, resultError} {
		d.lookups.WithLabelValues(r)
	}
	if opts.Metrics != nil {
		if err := opts.Metrics.Register(d.lookups); err != nil {
			return nil, err
		}
		if err := opts.Metrics.Register(d.found); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// networks maps Options.IPFamily to the network of Resolver.LookupNetIP.
var networks = map[string]string{"": "ip", "any": "ip", "ipv4": "ip4", "ipv6": "ip6"}

// Run looks the name up at once and then every interval until ctx ends.
func (d *DNS) Run(ctx context.Context) {
	d.opts.Logger.Info("discovery: looking up workers", "name", d.opts.Name, "interval", d.opts.Interval,
		"ip_family", cmp.Or(d.opts.IPFamily, "any"), "remove_after", d.opts.RemoveAfter)
	t := time.NewTicker(d.opts.Interval)
	defer t.Stop()
	for {
		_ = d.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sync looks the name up once and reconciles: new addresses are added,
// those missing from RemoveAfter answers in a row drained and removed, and
// those back before their drain ended restored. A failed or empty lookup
// changes nothing and counts for nothing; the error is returned (nil for an
// empty answer).
func (d *DNS) Sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout(d.opts.Interval))
	defer cancel()
	addrs, err := d.lookup(ctx)
	switch {
	case err != nil && notFound(err), err == nil && len(addrs) == 0:
		d.lookups.WithLabelValues(resultEmpty).Inc()
		d.opts.Logger.Warn("discovery: no worker records; keeping the workers found before", "name", d.opts.Name)
		return nil
	case err != nil:
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return err // shutting down: not the lookup's failure
		}
		d.lookups.WithLabelValues(resultError).Inc()
		d.opts.Logger.Warn("discovery: lookup failed; keeping the workers found before", "name", d.opts.Name, "error", err)
		return err
	}
	d.lookups.WithLabelValues(resultOK).Inc()
	d.found.Set(float64(len(addrs)))
	d.reconcile(addrs)
	return nil
}

// notFound reports whether err says the name has no address (of the family
// asked for): from DNS, NXDOMAIN or no record; from the hosts file, an
// AddrError ("no suitable address").
func notFound(err error) bool {
	var dnsErr *net.DNSError
	var addrErr *net.AddrError
	return errors.As(err, &dnsErr) && dnsErr.IsNotFound || errors.As(err, &addrErr)
}

// lookupTimeout bounds one lookup: an interval, within [1s, 10s].
func lookupTimeout(interval time.Duration) time.Duration {
	return min(max(interval, time.Second), 10*time.Second)
}

func srvName(name string) bool { return strings.HasPrefix(name, "_") }

// lookup returns the workers' addresses, sorted and without duplicates. An
// SRV target that fails to resolve fails the whole lookup: a partial answer
// would drain healthy workers.
func (d *DNS) lookup(ctx context.Context) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	if srvName(d.opts.Name) {
		_, srvs, err := d.opts.Resolver.LookupSRV(ctx, "", "", d.opts.Name)
		if err != nil {
			return nil, err
		}
		for _, srv := range srvs {
			ips, err := d.opts.Resolver.LookupNetIP(ctx, d.network, srv.Target)
			if err != nil && d.network != "ip" && notFound(err) {
				// A target without an address of the family asked for (an
				// IPv4-only pod under ip_family ipv6, say) is skipped; one
				// without any address is a broken answer.
				if _, anyErr := d.opts.Resolver.LookupNetIP(ctx, "ip", srv.Target); anyErr == nil {
					continue
				}
			}
			if err != nil {
				// %v: a target missing is a broken answer, not an empty one.
				return nil, fmt.Errorf("SRV target %s: %v", srv.Target, err)
			}
			out = appendAddrs(out, ips, srv.Port)
		}
	} else {
		ips, err := d.opts.Resolver.LookupNetIP(ctx, d.network, d.opts.Name)
		if err != nil {
			return nil, err
		}
		out = appendAddrs(out, ips, uint16(d.opts.Port))
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

func appendAddrs(out []netip.AddrPort, ips []netip.Addr, port uint16) []netip.AddrPort {
	for _, ip := range ips {
		if ip.IsValid() && port != 0 {
			// Unmap: net.Resolver may answer an A record as ::ffff:a.b.c.d.
			out = append(out, netip.AddrPortFrom(ip.Unmap().WithZone(""), port))
		}
	}
	return out
}

// ID is the stable id of the worker at addr: "10.0.0.7:8000", or
// "[fd00::7]:8000" for IPv6 (config.IsDiscoveredID recognizes the form).
func ID(addr netip.AddrPort) string { return addr.String() }

func (d *DNS) spec(addr netip.AddrPort) workers.Spec {
	return workers.Spec{
		ID:         ID(addr),
		URL:        d.opts.Scheme + "://" + net.JoinHostPort(addr.Addr().String(), strconv.Itoa(int(addr.Port()))),
		Models:     d.opts.Models,
		Engine:     d.opts.Engine,
		MaxRunning: d.opts.MaxRunning,
		DPRanks:    d.opts.DPRanks,
		APIKey:     d.opts.APIKey,
		Origin:     workers.OriginDiscovery,
	}
}

// reconcile makes the discovered workers equal to addrs, with hysteresis:
// a worker leaves after RemoveAfter answers in a row without its address,
// and one back while it drains is restored rather than re-added.
func (d *DNS) reconcile(addrs []netip.AddrPort) {
	current := map[string]*workers.Worker{}
	for _, w := range d.reg.Workers() {
		current[w.ID()] = w
	}
	want := make(map[string]bool, len(addrs))
	var added, restored, readmitted, retired []string
	for _, addr := range addrs {
		s := d.spec(addr)
		want[s.ID] = true
		if w := current[s.ID]; w != nil && w.Origin() == workers.OriginDiscovery && !w.Removing() {
			continue // there, and discovery's spec never changes while it runs
		}
		// New, or back before its drain ended: the same pod back from a
		// readiness blip keeps its generation and prefix ownership. (Another
		// pod that took over the address shows as a restarted engine: its
		// cache counters go backwards, and that bumps the generation.)
		applied, err := d.reg.Apply(s)
		switch {
		case errors.Is(err, workers.ErrOtherOrigin):
			if !d.skipped[s.ID] {
				d.skipped[s.ID] = true
				d.opts.Logger.Warn("discovery: address skipped: a worker of another origin has its id",
					"worker", s.ID, "origin", current[s.ID].Origin())
			}
		case err != nil:
			d.opts.Logger.Warn("discovery: could not add worker", "worker", s.ID, "error", err)
		case applied == workers.AppliedAdded:
			added = append(added, s.ID)
		case applied == workers.AppliedRestored:
			restored = append(restored, s.ID)
		case applied == workers.AppliedReplaced:
			readmitted = append(readmitted, s.ID)
		}
	}
	for id := range d.skipped {
		if !want[id] || current[id] == nil || current[id].Origin() == workers.OriginDiscovery {
			delete(d.skipped, id)
		}
	}
	for id := range d.missing {
		if w := current[id]; want[id] || w == nil || w.Origin() != workers.OriginDiscovery || w.Removing() {
			delete(d.missing, id)
		}
	}
	ids := make([]string, 0, len(current))
	for id := range current {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, cmp.Compare)
	var missing []string
	for _, id := range ids {
		w := current[id]
		if w.Origin() != workers.OriginDiscovery || want[id] || w.Removing() {
			continue
		}
		if d.missing[id]++; d.missing[id] < d.opts.RemoveAfter {
			missing = append(missing, id)
			continue
		}
		delete(d.missing, id)
		if _, ok := d.reg.Retire(id); ok {
			retired = append(retired, id)
		}
	}
	if len(added)+len(restored)+len(readmitted)+len(retired) > 0 {
		d.opts.Logger.Info("discovery: workers changed", "name", d.opts.Name,
			"added", added, "restored", restored, "readmitted", readmitted, "draining", retired, "found", len(addrs))
	}
	if len(missing) > 0 {
		d.opts.Logger.Info("discovery: workers missing from the answer, kept for now", "name", d.opts.Name,
			"workers", missing, "remove_after", d.opts.RemoveAfter)
	}
}

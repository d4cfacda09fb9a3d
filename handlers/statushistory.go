package handlers

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// statusInterval is how often the status history samples the fleet.
const statusInterval = time.Second

// statusHistoryLen is how many samples the history keeps: five minutes for
// the page's load chart, well past the minute the routing counts look back.
const statusHistoryLen = 300

// defaultStatusMaxAge is the telemetry age past which the status page calls
// a sample stale when Options.TelemetryMaxAge is unset (routing's default).
const defaultStatusMaxAge = 5 * time.Second

// statusFeed is what /api/status keeps between requests: the request-path
// series it reads, and a ring of one sample a second. The request path
// itself pays nothing for it: the routing counts come from the Prometheus
// series the proxy already updates, read here once a second and per status
// request, never per routed request.
type statusFeed struct {
	started time.Time
	maxAge  time.Duration
	series  prometheus.Gatherer // decisions, prefix match ratio, seeds in flight

	mu   sync.Mutex
	ring [statusHistoryLen]*statusSample
	next int // ring index of the next sample
	n    int // samples held
}

// statusSample is one second of history. It is never changed once recorded,
// so readers keep it after releasing the lock.
type statusSample struct {
	T        int64          `json:"t"`        // Unix milliseconds
	Queue    map[string]int `json:"queue"`    // running + waiting, from fresh telemetry only
	Inflight map[string]int `json:"inflight"` // this gateway's requests in flight

	at     time.Time
	totals routingTotals
}

// routingTotals are the routing series at one instant, summed over models.
type routingTotals struct {
	decisions  map[string]float64 // kvgate_routing_decisions_total by decision label
	matchSum   float64            // kvgate_prefix_match_ratio: sum of observations
	matchCount float64            // and their count
	seeds      map[string]float64 // kvgate_seeds_inflight by partition (a gauge)
}

func newStatusFeed(m *metrics, started time.Time, maxAge time.Duration) *statusFeed {
	if maxAge <= 0 {
		maxAge = defaultStatusMaxAge
	}
	// A collector may sit in several registries: this one exists only so the
	// status feed can read the three series without gathering the rest.
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.decisions, m.match, m.seeds)
	return &statusFeed{started: started, maxAge: maxAge, series: reg}
}

// RecordStatusHistory samples the fleet for the status page once a second
// until ctx ends: per-worker load for its chart, and the routing counters
// from which /api/status tells the last minute apart from all time. Without
// it /api/status still answers, with an empty history and last-minute counts
// equal to the totals.
func (g *Gateway) RecordStatusHistory(ctx context.Context) {
	t := time.NewTicker(statusInterval)
	defer t.Stop()
	for {
		g.recordStatus()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// recordStatus takes one history sample.
func (g *Gateway) recordStatus() {
	now := g.opts.Now()
	all := g.opts.Registry.Workers()
	s := &statusSample{
		T: now.UnixMilli(), at: now,
		Queue:    make(map[string]int, len(all)),
		Inflight: make(map[string]int, len(all)),
		totals:   g.status.totals(),
	}
	for _, w := range all {
		s.Inflight[w.ID()] = w.Inflight()
		if load := workerLoad(w); load.Fresh(now, g.status.maxAge) {
			s.Queue[w.ID()] = load.Running + load.Waiting
		}
	}
	g.status.add(s)
}

func (f *statusFeed) add(s *statusSample) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ring[f.next] = s
	f.next = (f.next + 1) % len(f.ring)
	f.n = min(f.n+1, len(f.ring))
}

// read returns the samples newer than since (Unix milliseconds), oldest
// first, and base: the newest sample taken at or before cut (nil if none).
func (f *statusFeed) read(since int64, cut time.Time) (samples []*statusSample, base *statusSample) {
	f.mu.Lock()
	defer f.mu.Unlock()
	samples = make([]*statusSample, 0, f.n)
	for i := range f.n {
		s := f.ring[(f.next-f.n+i+len(f.ring))%len(f.ring)]
		if !s.at.After(cut) {
			base = s
		}
		if s.T > since {
			samples = append(samples, s)
		}
	}
	return samples, base
}

// totals reads the routing series now.
func (f *statusFeed) totals() routingTotals {
	t := routingTotals{decisions: map[string]float64{}, seeds: map[string]float64{}}
	families, err := f.series.Gather()
	if err != nil {
		return t // the feed's own collectors, consistent by construction
	}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "kvgate_routing_decisions_total":
				t.decisions[labelValue(m, "decision")] += m.GetCounter().GetValue()
			case "kvgate_prefix_match_ratio":
				t.matchSum += m.GetHistogram().GetSampleSum()
				t.matchCount += float64(m.GetHistogram().GetSampleCount())
			case "kvgate_seeds_inflight":
				t.seeds[labelValue(m, "partition")] += m.GetGauge().GetValue()
			}
		}
	}
	return t
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

package handlers

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/web"
	"github.com/kvgate/kvgate/workers"
)

// statusReport is GET /api/status: the fleet, routing and admission now,
// and the recent history the status page charts. docs/status-page.md says
// what every field means; a number that is unknown is null, never 0.
type statusReport struct {
	GeneratedAt   time.Time         `json:"generated_at"`
	UptimeSeconds float64           `json:"uptime_seconds"`
	Workers       []workerStatus    `json:"workers"`
	Routing       routingStatus     `json:"routing"`
	Admission     admissionStatus   `json:"admission"`
	Partitions    []partitionStatus `json:"partitions"`
	History       historyStatus     `json:"history"`
}

type workerStatus struct {
	ID        string           `json:"id"`
	URL       string           `json:"url"`
	Engine    string           `json:"engine"`
	Models    []string         `json:"models"`
	Health    string           `json:"health"` // healthy, unhealthy or draining
	Routable  bool             `json:"routable"`
	Circuit   string           `json:"circuit"` // closed, open or half_open
	Telemetry *telemetryStatus `json:"telemetry"`
	// Pressure is routing's: max(KV usage, (running + waiting + reserved
	// since the sample) / max_running); null without fresh telemetry.
	Pressure     *float64 `json:"pressure"`
	Inflight     int      `json:"inflight"`
	PrefixBlocks *int     `json:"prefix_blocks"` // null: the policy keeps no index
}

type telemetryStatus struct {
	Running    int      `json:"running"`
	Waiting    int      `json:"waiting"`
	KVUsage    *float64 `json:"kv_usage"`
	MaxRunning int      `json:"max_running"` // 0: not reported
	AgeSeconds float64  `json:"age_seconds"`
	Fresh      bool     `json:"fresh"`
	Complete   bool     `json:"complete"`
	Source     string   `json:"source"`
}

type routingStatus struct {
	Policy         string           `json:"policy"`
	Seeding        bool             `json:"seeding"`
	IndexBlocks    *int             `json:"index_blocks"`
	Decisions      []decisionStatus `json:"decisions"` // by label
	PrefixHitRatio hitRatioStatus   `json:"prefix_hit_ratio"`
}

type decisionStatus struct {
	Label      string `json:"label"`
	LastMinute uint64 `json:"last_minute"`
	Total      uint64 `json:"total"`
}

// hitRatioStatus is the mean share of a routed request's prefix blocks found
// in the index (kvgate_prefix_match_ratio); null when no such request.
type hitRatioStatus struct {
	LastMinute *float64 `json:"last_minute"`
	Total      *float64 `json:"total"`
}

type admissionStatus struct {
	Mode        string `json:"mode"`
	Outstanding int    `json:"outstanding"`
}

type partitionStatus struct {
	Name          string  `json:"name"`
	Weight        float64 `json:"weight"`
	Queued        int     `json:"queued"`
	Inflight      int     `json:"inflight"`
	ServedTokens  int64   `json:"served_tokens"`
	SeedsInflight int     `json:"seeds_inflight"`
	Succeeded     uint64  `json:"succeeded"`
	Failed        uint64  `json:"failed"`
	Cancelled     uint64  `json:"cancelled"`
}

type historyStatus struct {
	IntervalSeconds float64         `json:"interval_seconds"`
	Samples         []*statusSample `json:"samples"`
}

// statusRoutes mounts the status page (package web) and its feed.
func (g *Gateway) statusRoutes(r chi.Router) {
	page := web.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeError(w, errRouteNotFound(r)) }))
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		r.Method(method, "/", page)
		r.Method(method, "/assets/*", page)
	}
	r.Get("/api/status", g.apiStatus)
}

// apiStatus serves GET /api/status[?since=unix_ms]: since leaves out the
// history samples the page already has.
func (g *Gateway) apiStatus(w http.ResponseWriter, r *http.Request) {
	var since int64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, errBadRequest("since", "since must be a time in Unix milliseconds, got "+strconv.Quote(v)+"."))
			return
		}
		since = n
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, g.statusReport(g.opts.Now(), since))
}

// statusReport assembles the report. Each part reads its source once, under
// that source's own short lock or none; nothing is held across parts.
func (g *Gateway) statusReport(now time.Time, since int64) *statusReport {
	f := g.status
	totals := f.totals()
	samples, base := f.read(since, now.Add(-time.Minute))
	rep := &statusReport{
		GeneratedAt:   now,
		UptimeSeconds: now.Sub(f.started).Seconds(),
		Workers:       []workerStatus{},
		Routing:       g.routingStatus(totals, base),
		Admission:     admissionStatus{Mode: "off"},
		Partitions:    []partitionStatus{},
		History:       historyStatus{IntervalSeconds: statusInterval.Seconds(), Samples: samples},
	}
	var index *routing.Index
	if ix, ok := routerPolicy(g.opts.Router).(routing.Indexed); ok {
		index = ix.Index()
	}
	for _, w := range g.opts.Registry.Workers() {
		rep.Workers = append(rep.Workers, g.workerStatus(w, now, index))
	}
	if s := g.opts.Admission; s != nil {
		snap := s.Snapshot()
		rep.Admission = admissionStatus{Mode: snap.Mode.String(), Outstanding: snap.Outstanding}
		for _, p := range snap.Partitions {
			rep.Partitions = append(rep.Partitions, partitionStatus{
				Name: p.Name, Weight: p.Weight, Queued: p.Queued, Inflight: p.Inflight, ServedTokens: p.ServedTokens,
				SeedsInflight: int(totals.seeds[p.Name]),
				Succeeded:     p.Succeeded, Failed: p.Failed, Cancelled: p.Cancelled,
			})
		}
	}
	return rep
}

func (g *Gateway) workerStatus(w *workers.Worker, now time.Time, index *routing.Index) workerStatus {
	ws := workerStatus{
		ID: w.ID(), URL: w.URL(), Engine: string(w.Engine()), Models: w.Models(),
		Health: "healthy", Routable: w.Routable(now), Circuit: w.CircuitState(now).String(), Inflight: w.Inflight(),
	}
	if ws.Models == nil {
		ws.Models = []string{} // not learned yet
	}
	switch {
	case w.Draining():
		ws.Health = "draining"
	case !w.Healthy():
		ws.Health = "unhealthy"
	}
	load := workerLoad(w)
	fresh := load.Fresh(now, g.status.maxAge)
	reserved := 0
	if s, ok := w.Sample(); ok {
		t := &telemetryStatus{
			Running: s.Running, Waiting: s.Waiting, MaxRunning: s.MaxRunning,
			AgeSeconds: max(0, now.Sub(s.At).Seconds()), Fresh: fresh, Complete: s.Complete, Source: s.Source,
		}
		if s.KVUsage >= 0 {
			t.KVUsage = &s.KVUsage
		}
		ws.Telemetry = t
		reserved = g.opts.Router.ReservedSince(w.ID(), s.At)
	}
	c := routing.Candidate{Endpoint: routing.Endpoint{ID: w.ID(), Load: load}, Fresh: fresh, ReservedReqs: reserved}
	if p, ok := c.Pressure(); ok {
		ws.Pressure = &p
	}
	if index != nil {
		n := index.WorkerBlocks(w.ID())
		ws.PrefixBlocks = &n
	}
	return ws
}

// routingStatus reports the decisions by label, each since start and over
// the last minute: the totals now less those of the history sample taken a
// minute ago (none yet: since start).
func (g *Gateway) routingStatus(now routingTotals, base *statusSample) routingStatus {
	rs := routingStatus{Decisions: []decisionStatus{}}
	if p := routerPolicy(g.opts.Router); p != nil {
		rs.Policy = p.Name()
		if ca, ok := p.(*routing.CacheAware); ok {
			rs.Seeding = ca.Seeding()
		}
		if ix, ok := p.(routing.Indexed); ok {
			n := ix.Index().Len()
			rs.IndexBlocks = &n
		}
	}
	var then routingTotals
	if base != nil {
		then = base.totals
	}
	for label, total := range now.decisions {
		rs.Decisions = append(rs.Decisions, decisionStatus{
			Label: label, Total: uint64(total), LastMinute: uint64(max(0, total-then.decisions[label])),
		})
	}
	slices.SortFunc(rs.Decisions, func(a, b decisionStatus) int { return strings.Compare(a.Label, b.Label) })
	rs.PrefixHitRatio.Total = ratio(now.matchSum, now.matchCount)
	rs.PrefixHitRatio.LastMinute = ratio(now.matchSum-then.matchSum, now.matchCount-then.matchCount)
	return rs
}

func ratio(sum, count float64) *float64 {
	if count <= 0 {
		return nil
	}
	r := sum / count
	return &r
}

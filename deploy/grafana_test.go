package deploy

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/handlers"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/sim/simserver"
	"github.com/kvgate/kvgate/workers"
)

const dashboardFile = "grafana/kvgate.json"

// datasourceRef is how every panel and query names its data source: the
// dashboard's datasource variable, never a uid of one Grafana install.
const datasourceRef = "${datasource}"

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"` // a string, or {"query": ...}
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) (dashboard, any) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	require.True(t, json.Valid(b), "%s is valid JSON", dashboardFile)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	var raw any
	require.NoError(t, json.Unmarshal(b, &raw))
	return d, raw
}

// panels lists every panel, those inside collapsed rows too.
func (d dashboard) panels() []panel {
	var all []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return all
}

func TestDashboardIsWellFormed(t *testing.T) {
	d, _ := loadDashboard(t)
	assert.Equal(t, "kvgate", d.UID)
	ids := map[int]string{}
	for _, p := range d.panels() {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		assert.NotEmpty(t, p.Title, "panel %d", p.ID)
		assert.LessOrEqual(t, p.GridPos.X+p.GridPos.W, 24, "%q fits the 24-column grid", p.Title)
		if p.Type == "row" {
			continue
		}
		assert.Positive(t, p.GridPos.H, p.Title)
		require.NotEmpty(t, p.Targets, "%q queries something", p.Title)
		for _, tg := range p.Targets {
			assert.NotEmpty(t, tg.Expr, "%q target %s", p.Title, tg.RefID)
		}
	}
}

// Imported into any Grafana, the dashboard asks which Prometheus to use.
func TestDashboardUsesTheDatasourceVariable(t *testing.T) {
	d, raw := loadDashboard(t)
	var found bool
	for _, v := range d.Templating.List {
		if v.Name == "datasource" {
			found = true
			assert.Equal(t, "datasource", v.Type)
			assert.Equal(t, "prometheus", v.Query)
		}
	}
	require.True(t, found, "a template variable named datasource")

	refs := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if k == "datasource" {
					refs++
					switch ds := e.(type) {
					case string:
						assert.Equal(t, datasourceRef, ds, path)
					case map[string]any:
						assert.Equal(t, datasourceRef, ds["uid"], "%s: no hard-coded datasource uid", path)
					default:
						t.Errorf("%s: datasource %v", path, e)
					}
					continue
				}
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	walk("", raw)
	assert.Positive(t, refs)
	assert.NotContains(t, raw, "__inputs", "no import-time datasource inputs either")
}

// Every metric a panel or variable queries is one the gateway registers
// (or, for the engine panels, one a vLLM worker exports): renaming a metric
// without the dashboard fails here.
func TestDashboardQueriesOnlyExportedMetrics(t *testing.T) {
	d, _ := loadDashboard(t)
	known := gatewayMetrics(t)
	maps.Copy(known, engineMetrics(t))

	var queries []string
	for _, p := range d.panels() {
		for _, tg := range p.Targets {
			queries = append(queries, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		require.NotEmpty(t, q, "variable %s has a query", v.Name)
		queries = append(queries, labelValuesMetric.ReplaceAllString(q, "$1"))
	}

	used := map[string]bool{}
	for _, q := range queries {
		names, err := metricNames(q)
		require.NoError(t, err, q)
		require.NotEmpty(t, names, "%s queries no metric", q)
		for _, n := range names {
			used[n] = true
			assert.True(t, isKnown(known, n), "%s is not a metric the gateway exports\n  in %s", n, q)
		}
	}
	for _, n := range []string{"kvgate_requests_total", "kvgate_routing_decisions_total", "kvgate_worker_circuit_state", "kvgate_admission_queue_depth"} {
		assert.True(t, used[n], "the dashboard shows %s", n)
	}
}

// isKnown accepts a family's name and, for a histogram, its series.
func isKnown(known map[string]bool, name string) bool {
	if known[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && known[base] {
			return true
		}
	}
	return false
}

// gatewayMetrics names every metric family the gateway registers, wired as
// cmd/gateway's newApp wires it: the request path's, the workers', the
// admission scheduler's, DNS discovery's, Go's and the process's. Names come from the
// collectors' descriptions rather than a scrape, so that labelled families
// with no series yet (no upstream error so far, no seed) count too.
func gatewayMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := &describing{Registerer: prometheus.NewRegistry(), names: map[string]bool{}}

	pool := workers.NewRegistry(workers.Options{})
	t.Cleanup(pool.Close)
	policy, err := routing.NewPolicy("cache_aware", routing.DefaultPolicyConfig())
	require.NoError(t, err)
	router := routing.NewRouter(policy, routing.Options{})
	parts := []admission.Partition{{Name: "default", Weight: 1}}
	scheduler, err := admission.NewScheduler(admission.Config{
		Mode: admission.ModeShadow, Partitions: parts, DefaultPartition: "default",
	}, admission.CapacityFunc(func() int { return 0 }), nil, reg)
	require.NoError(t, err)
	resolver, err := admission.NewResolver(parts, "default", "")
	require.NoError(t, err)
	handlers.New(handlers.Options{Registry: pool, Router: router, Metrics: reg, Partitions: resolver, Admission: scheduler})
	_, err = discovery.NewDNS(discovery.Options{Name: "vllm-workers", Port: 8000, Interval: time.Second, Metrics: reg}, pool)
	require.NoError(t, err)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), pool)

	require.NoError(t, reg.err)
	for _, want := range []string{"kvgate_requests_total", "kvgate_worker_inflight", "kvgate_admission_queue_depth", "kvgate_index_blocks", "go_goroutines"} {
		require.True(t, reg.names[want], "the wiring registers %s", want)
	}
	return reg.names
}

// describing registers collectors and records the names they describe.
type describing struct {
	prometheus.Registerer
	names map[string]bool
	err   error
}

var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for desc := range ch {
		m := descName.FindStringSubmatch(desc.String())
		if m == nil {
			d.err = &descError{desc.String()}
			continue
		}
		d.names[m[1]] = true
	}
	return d.Registerer.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

type descError struct{ desc string }

func (e *descError) Error() string { return "no metric name in " + e.desc }

// engineMetrics names the families of the simulated engine's /metrics,
// which mirrors vLLM's (the gateway's telemetry reads the same names).
func engineMetrics(t *testing.T) map[string]bool {
	t.Helper()
	cfg := simserver.DefaultConfig()
	cfg.TimeScale = 0
	s, err := simserver.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	require.NoError(t, err)
	names := map[string]bool{}
	for name := range families {
		if strings.HasPrefix(name, "vllm:") {
			names[name] = true
		}
	}
	require.True(t, names["vllm:num_requests_running"], "the simulated engine exports vLLM's metrics")
	return names
}

// labelValuesMetric turns a variable's label_values(metric{...}, label)
// into its selector, a query metricNames reads.
var labelValuesMetric = regexp.MustCompile(`^label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)$`)

var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlIdent    = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:.$])([A-Za-z_:][A-Za-z0-9_:]*)`)
)

// promqlFunctions are the functions and aggregations the dashboard may
// call; another name before "(" is a typo.
var promqlFunctions = []string{
	"abs", "avg", "avg_over_time", "bottomk", "clamp_max", "clamp_min", "count", "deriv", "delta",
	"group", "histogram_quantile", "idelta", "increase", "irate", "label_replace", "max",
	"max_over_time", "min", "min_over_time", "quantile", "rate", "scalar", "stddev", "sum",
	"sum_over_time", "time", "topk", "vector",
}

var promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}

// metricNames lists the metric names a PromQL expression selects: what
// is left once strings, label matchers, ranges and grouping clauses are
// gone, and is neither a function call nor a keyword.
func metricNames(expr string) ([]string, error) {
	s := promqlString.ReplaceAllString(expr, `""`)
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRange.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	var names []string
	for _, m := range promqlIdent.FindAllStringSubmatchIndex(s, -1) {
		ident := s[m[2]:m[3]]
		if strings.HasPrefix(strings.TrimSpace(s[m[3]:]), "(") {
			if !slices.Contains(promqlFunctions, ident) {
				return nil, &unknownFunction{ident}
			}
			continue
		}
		if slices.Contains(promqlKeywords, ident) {
			continue
		}
		if !slices.Contains(names, ident) {
			names = append(names, ident)
		}
	}
	return names, nil
}

type unknownFunction struct{ name string }

func (e *unknownFunction) Error() string { return "unknown PromQL function " + e.name }

func TestMetricNamesReadsPromQL(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
		err  bool
	}{
		{expr: `kvgate_index_blocks`, want: []string{"kvgate_index_blocks"}},
		{expr: `sum by (status) (rate(kvgate_requests_total{job=~"$job", status!~"2.."}[$__rate_interval]))`, want: []string{"kvgate_requests_total"}},
		{expr: `histogram_quantile(0.95, sum by (le) (rate(kvgate_ttft_seconds_bucket{model="a{b}"}[5m])))`, want: []string{"kvgate_ttft_seconds_bucket"}},
		{expr: `sum(rate(a_sum[1m])) / sum(rate(a_count[1m])) or vector(0)`, want: []string{"a_sum", "a_count"}},
		{expr: `max by (instance) (vllm:kv_cache_usage_perc) * 1e2`, want: []string{"vllm:kv_cache_usage_perc"}},
		{expr: `x / on (worker) group_left y`, want: []string{"x", "y"}},
		{expr: `sum(rtae(kvgate_retries_total[1m]))`, err: true},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := metricNames(tc.expr)
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

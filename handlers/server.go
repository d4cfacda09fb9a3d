package handlers

import (
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	json "github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/openapi"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// Options wire a Gateway.
type Options struct {
	Registry  *workers.Registry
	Router    *routing.Router
	Transport http.RoundTripper

	MaxBodyBytes int64
	// MaxBufferedBodyBytes bounds the request bodies held at once, read,
	// queued or in flight (0: no bound).
	MaxBufferedBodyBytes int64
	// BodyReadTimeout bounds reading a request body (0: none).
	BodyReadTimeout time.Duration
	// IdleTimeout ends an attempt whose worker sends nothing for this long
	// (0: none).
	IdleTimeout time.Duration
	// ClientWriteTimeout bounds each write of an answer to the client: a
	// client that stops reading is gone after it (0: none).
	ClientWriteTimeout time.Duration
	MaxAttempts        int
	// BlockBytes is the routing text per prefix block; 0 turns prefix
	// hashing off (policies then route without affinity).
	BlockBytes  int
	BackoffBase time.Duration
	BackoffMax  time.Duration

	Logger      *slog.Logger
	LogRequests bool
	// RequestLog, when set, receives the request lines directly, in slog's
	// JSON layout (requestlog.go), instead of going through Logger's
	// handler: set it to the writer of a JSON Logger. Logger still decides
	// whether a line's level is enabled.
	RequestLog io.Writer
	// Metrics registers the gateway's series; Gatherer serves /metrics.
	Metrics  prometheus.Registerer
	Gatherer prometheus.Gatherer
	Now      func() time.Time
	// Ready, when set, must also hold for /readyz to answer 200 (shutdown
	// turns it false before the listener closes).
	Ready func() bool

	// Partitions resolves each request's partition (tenant) from its API
	// key or the trusted header; nil: every request is in "default".
	Partitions *admission.Resolver
	// Admission gates requests when the fleet is full; nil: no gate.
	Admission *admission.Scheduler

	// TelemetryMaxAge is the age past which the status page calls a
	// telemetry sample stale (telemetry.max_age; 0: routing's default).
	TelemetryMaxAge time.Duration
}

// Gateway serves kvgate's HTTP API.
type Gateway struct {
	opts    Options
	pool    registryPool
	metrics *metrics
	seeding bool // the routing policy may seed: redeem admission proofs for it
	mux     chi.Router
	hashers sync.Pool // *routing.BlockHasher of opts.BlockBytes
	status  *statusFeed

	// partitions is opts.Partitions, replaced whole by a config reload.
	partitions atomic.Pointer[admission.Resolver]
	// bodyBytes counts the request bodies held now, against
	// opts.MaxBufferedBodyBytes.
	bodyBytes atomic.Int64
}

// New returns the gateway's HTTP handler.
func New(opts Options) *Gateway {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	if opts.MaxAttempts < 1 {
		opts.MaxAttempts = 1
	}
	g := &Gateway{
		opts:    opts,
		pool:    registryPool{reg: opts.Registry, now: opts.Now},
		metrics: newMetrics(opts.Metrics),
	}
	g.hashers.New = func() any { return routing.NewBlockHasher(opts.BlockBytes) }
	g.partitions.Store(opts.Partitions)
	if ca, ok := routerPolicy(opts.Router).(*routing.CacheAware); ok {
		g.seeding = ca.Seeding()
	}
	if ix, ok := routerPolicy(opts.Router).(routing.Indexed); ok {
		index := ix.Index()
		opts.Metrics.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "kvgate_index_blocks",
			Help: "Prefix blocks in the routing policy's ownership index.",
		}, func() float64 { return float64(index.Len()) }))
	}
	g.status = newStatusFeed(g.metrics, opts.Now(), opts.TelemetryMaxAge)
	g.mux = g.routes()
	return g
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

func (g *Gateway) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(g.recoverer)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) { writeError(w, errRouteNotFound(r)) })
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) { writeError(w, errMethodNotAllowed(r)) })

	r.Post("/v1/chat/completions", g.completion(endpointChat))
	r.Post("/v1/completions", g.completion(endpointCompletions))
	r.Get("/v1/models", g.models)
	r.Get("/health", g.health)
	r.Get("/readyz", g.ready)
	if g.opts.Gatherer != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(g.opts.Gatherer, promhttp.HandlerOpts{}))
	}
	r.Get("/openapi.yaml", serveOpenAPI)
	g.statusRoutes(r)
	return r
}

// SetPartitions replaces the partition resolver (a config reload): requests
// that start after it resolve their API key with the new one.
func (g *Gateway) SetPartitions(r *admission.Resolver) { g.partitions.Store(r) }

// Mount adds another handler under pattern (status page, admin API).
func (g *Gateway) Mount(pattern string, h http.Handler) { g.mux.Mount(pattern, h) }

// Routes lists what the gateway serves (chi.Walk walks it), for the test
// that holds the OpenAPI document to it.
func (g *Gateway) Routes() chi.Routes { return g.mux }

type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (g *Gateway) models(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list", Data: []modelObject{}}
	for _, m := range g.opts.Registry.Models() {
		list.Data = append(list.Data, modelObject{ID: m, Object: "model", OwnedBy: "kvgate"})
	}
	writeJSON(w, http.StatusOK, list)
}

func (g *Gateway) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (g *Gateway) ready(w http.ResponseWriter, _ *http.Request) {
	if g.opts.Ready != nil && !g.opts.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting_down"})
		return
	}
	if !g.opts.Registry.AnyServing() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "no_routable_worker"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// serveOpenAPI serves the OpenAPI document of this API.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openapi.Spec)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, errInternal())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func routerPolicy(r *routing.Router) routing.Policy {
	if r == nil {
		return nil
	}
	return r.Policy()
}

package simserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zeebo/xxh3"

	"github.com/kvgate/kvgate/sim"
)

// Server is one simulated engine worker: a sim.Engine driven in real time
// (or at once, with TimeScale 0) behind an HTTP handler.
type Server struct {
	cfg     Config
	start   time.Time
	handler http.Handler
	// quotedModels maps each served model id to its JSON string form, so
	// stream chunks are written without an encoder.
	quotedModels map[string][]byte
	instanceTag  uint32

	mu      sync.Mutex // guards engine, tickets, nextID, events
	engine  *sim.Engine
	tickets map[uint64]*ticket
	nextID  uint64
	events  []sim.Event

	wake      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	faults   atomic.Pointer[Faults]
	override atomic.Pointer[LoadOverride]
	rngMu    sync.Mutex
	rng      *rand.Rand

	submitted, completed, cancelled, faulted atomic.Int64

	httpMu  sync.Mutex
	servers []*http.Server
}

// New builds a server and, unless TimeScale is 0, starts the goroutine that
// drives its engine in real time. Close stops it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	engine, err := sim.New(cfg.Engine)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:          cfg,
		start:        time.Now(),
		quotedModels: make(map[string][]byte, len(cfg.Models)),
		engine:       engine,
		tickets:      make(map[uint64]*ticket),
		wake:         make(chan struct{}, 1),
		done:         make(chan struct{}),
		rng:          rand.New(rand.NewPCG(cfg.Seed, 0x6b76676174652d73)),
	}
	// Ids only need to differ between instances, not be secret.
	s.instanceTag = uint32(xxh3.HashString(s.start.String()))
	for _, m := range cfg.Models {
		q, err := json.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("model id %q: %w", m, err)
		}
		s.quotedModels[m] = q
	}
	faults := cfg.Faults
	s.faults.Store(&faults)

	registry := prometheus.NewRegistry()
	registry.MustRegister(&engineCollector{s: s})
	s.handler = s.routes(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))

	if !s.instant() {
		s.wg.Add(1)
		go s.drive()
	}
	return s, nil
}

func (s *Server) routes(metrics http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Post("/v1/chat/completions", s.serveCompletion(chatEndpoint))
	r.Post("/v1/completions", s.serveCompletion(completionsEndpoint))
	r.Get("/v1/models", s.serveModels)
	r.Get("/health", s.serveHealth)
	r.Method(http.MethodGet, "/metrics", metrics)
	r.Get("/get_load", s.serveGetLoad)
	r.Get("/v1/loads", s.serveLoads)
	r.Get("/sim/stats", s.serveStats)
	r.Get("/sim/faults", s.serveFaults)
	r.Post("/sim/faults", s.servePatchFaults)
	r.Get("/sim/load", s.serveLoadOverride)
	r.Post("/sim/load", s.serveSetLoadOverride)
	r.Delete("/sim/load", s.serveClearLoadOverride)
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, apiError{status: http.StatusNotFound, typ: "not_found_error", msg: "no such route"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, apiError{status: http.StatusMethodNotAllowed, typ: "invalid_request_error", msg: "method not allowed"})
	})
	return r
}

// Handler serves every endpoint of the worker.
func (s *Server) Handler() http.Handler { return s.handler }

// Config returns the configuration in force, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Faults returns the faults in force.
func (s *Server) Faults() Faults { return *s.faults.Load() }

// SetFaults replaces the faults in force.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.faults.Store(&f)
	return nil
}

// Stats counts what happened to completion requests.
type Stats struct {
	// Submitted requests entered the engine.
	Submitted int64 `json:"submitted"`
	// Completed requests got their whole response.
	Completed int64 `json:"completed"`
	// Cancelled requests lost their client before the end (hung ones
	// included); an engine request is withdrawn from the engine.
	Cancelled int64 `json:"cancelled"`
	// Faulted requests were answered by an injected fault.
	Faulted int64 `json:"faulted"`
	// Running and Waiting are the engine's own figures, never overridden.
	Running int `json:"running"`
	Waiting int `json:"waiting"`
}

// Stats reports the request counters and the engine's occupancy.
func (s *Server) Stats() Stats {
	snap := s.Snapshot()
	return Stats{
		Submitted: s.submitted.Load(),
		Completed: s.completed.Load(),
		Cancelled: s.cancelled.Load(),
		Faulted:   s.faulted.Load(),
		Running:   snap.Running,
		Waiting:   snap.Waiting,
	}
}

// Snapshot reports the engine's own telemetry (no override applied).
func (s *Server) Snapshot() sim.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.instant() {
		s.advanceLocked(s.simNowLocked())
	}
	return s.engine.Snapshot()
}

// Start listens on addr (use "127.0.0.1:0" for an ephemeral port) and serves
// in the background. It returns the bound address, "host:port".
func (s *Server) Start(addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("enginesim listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.httpMu.Lock()
	s.servers = append(s.servers, srv)
	s.httpMu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("enginesim serve", "addr", l.Addr().String(), "err", err)
		}
	}()
	return l.Addr().String(), nil
}

// Shutdown stops the listeners started by Start and waits for requests in
// flight to end, until ctx is done; then it closes what is left like Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.httpMu.Lock()
	servers := s.servers
	s.httpMu.Unlock()
	var errs []error
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, s.Close())...)
}

// Close stops the listeners, releases every waiting handler (their requests
// count as cancelled) and stops the driving goroutine. It is safe to call
// more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	s.httpMu.Lock()
	servers := s.servers
	s.servers = nil
	s.httpMu.Unlock()
	var errs []error
	for _, srv := range servers {
		if err := srv.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.wg.Wait()
	return errors.Join(errs...)
}

// draw returns the next number of the fault RNG, in [0, 1).
func (s *Server) draw() float64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/handlers"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// app is one wired gateway: registry, router, handlers, server.
type app struct {
	capacity handlers.FleetCapacity
	cfg      config.Config
	log      *slog.Logger
	registry *workers.Registry
	router   *routing.Router
	gateway  *handlers.Gateway
	ready    atomic.Bool

	// Dynamic membership (membership.go, reload.go).
	scheduler  *admission.Scheduler
	metrics    prometheus.Registerer
	discovery  *discovery.DNS
	reloads    <-chan reloadRequest
	loadConfig func() (config.Config, error)
}

// newApp wires the gateway; log writes to logOut (nil: the request lines go
// through log's handler).
func newApp(cfg config.Config, log *slog.Logger, logOut io.Writer) (*app, error) {
	policy, err := routing.NewPolicy(cfg.Routing.Policy, policyConfig(cfg))
	if err != nil {
		return nil, err
	}
	seed := uint64(cfg.Routing.Seed)
	if seed == 0 {
		seed = rand.Uint64()
	}
	transport := workers.NewTransport(workers.TransportOptions{
		DialTimeout:           cfg.Upstream.DialTimeout,
		ResponseHeaderTimeout: cfg.Upstream.ResponseHeaderTimeout,
		IdleConnsPerWorker:    cfg.Upstream.IdleConnsPerWorker,
		IdleConnTimeout:       cfg.Upstream.IdleConnTimeout,
	})
	a := &app{cfg: cfg, log: log}
	a.router = routing.NewRouter(policy, routing.Options{
		MaxAge:            cfg.Telemetry.MaxAge,
		OutputEstimateCap: cfg.Routing.OutputEstimateCap,
		Rand:              rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	})
	promReg := prometheus.NewRegistry()
	resolver, scheduler, err := a.newAdmission(promReg)
	if err != nil {
		return nil, err
	}
	a.scheduler, a.metrics = scheduler, promReg
	a.registry = workers.NewRegistry(workers.Options{
		Client:             &http.Client{Transport: transport},
		HealthInterval:     cfg.Health.Interval,
		HealthTimeout:      cfg.Health.Timeout,
		HealthPath:         cfg.Health.Path,
		UnhealthyThreshold: cfg.Health.UnhealthyThreshold,
		HealthyThreshold:   cfg.Health.HealthyThreshold,
		TelemetryInterval:  cfg.Telemetry.Interval,
		TelemetryTimeout:   cfg.Telemetry.Timeout,
		BreakerThreshold:   cfg.Breaker.FailureThreshold,
		BreakerOpenFor:     cfg.Breaker.OpenFor,
		Logger:             log,
		OnRemove:           a.router.RemoveWorker,
		OnSample:           kicker(scheduler),
		Pending:            a.pending,
	})
	a.capacity.Registry = a.registry
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), a.registry)
	a.gateway = handlers.New(handlers.Options{
		Registry:             a.registry,
		Router:               a.router,
		Transport:            transport,
		MaxBodyBytes:         cfg.Limits.MaxBodyBytes,
		BodyReadTimeout:      cfg.Limits.BodyReadTimeout,
		ClientWriteTimeout:   cfg.Limits.ClientWriteTimeout,
		MaxBufferedBodyBytes: cfg.Limits.MaxBufferedBodyBytes,
		IdleTimeout:          cfg.Upstream.IdleTimeout,
		BlockBytes:           cfg.Routing.BlockBytes,
		MaxAttempts:          cfg.Retry.MaxAttempts,
		BackoffBase:          cfg.Retry.BackoffBase,
		BackoffMax:           cfg.Retry.BackoffMax,
		Logger:               log,
		LogRequests:          cfg.Log.Requests,
		RequestLog:           jsonLogWriter(cfg.Log, logOut),
		Metrics:              promReg,
		Gatherer:             promReg,
		Ready:                a.ready.Load,
		Partitions:           resolver,
		Admission:            scheduler,
		TelemetryMaxAge:      cfg.Telemetry.MaxAge,
	})
	a.mountAdmin()
	for _, w := range cfg.Workers {
		if _, err := a.registry.Add(configSpec(w)); err != nil {
			a.registry.Close()
			return nil, err
		}
	}
	if err := a.newDiscovery(); err != nil {
		a.registry.Close()
		return nil, err
	}
	return a, nil
}

// serve listens on cfg.Listen and serves until ctx ends, then shuts down
// gracefully: readiness turns false at once; for shutdown_delay the gateway
// goes on serving, so load balancers see /readyz fail and stop sending before
// connections are refused; then the listener closes, and in-flight requests
// (streams too) get up to shutdown_grace to finish.
func (a *app) serve(ctx context.Context, started func(addr string)) error {
	defer a.registry.Close()
	defer a.runMembership(ctx)() // stopped before the registry closes
	// The status page's history samples the fleet while the gateway serves.
	historyCtx, stopHistory := context.WithCancel(ctx)
	historyDone := make(chan struct{})
	go func() { defer close(historyDone); a.gateway.RecordStatusHistory(historyCtx) }()
	defer func() { stopHistory(); <-historyDone }()
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           a.gateway,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	a.ready.Store(true)
	a.log.Info("kvgate listening", "addr", ln.Addr().String(), "policy", a.cfg.Routing.Policy, "workers", len(a.cfg.Workers))
	if started != nil {
		started(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.ready.Store(false)
	a.log.Info("shutting down", "delay", a.cfg.ShutdownDelay, "grace", a.cfg.ShutdownGrace)
	if a.cfg.ShutdownDelay > 0 {
		// Responses now carry Connection: close, so keep-alive clients
		// reconnect, and find the replicas still ready.
		srv.SetKeepAlivesEnabled(false)
		delay := time.NewTimer(a.cfg.ShutdownDelay)
		select {
		case err := <-errc:
			delay.Stop()
			return err
		case <-delay.C:
		}
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownGrace)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		a.log.Warn("shutdown grace expired; closing remaining connections")
		_ = srv.Close()
	}
	if serveErr := <-errc; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// jsonLogWriter is the writer request lines may skip slog for: the log's
// output when the log is JSON (handlers.Options.RequestLog).
func jsonLogWriter(c config.Log, w io.Writer) io.Writer {
	if w == nil || c.Format == "text" {
		return nil
	}
	return w
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// policyConfig maps the config onto the policies' knobs.
func policyConfig(c config.Config) routing.PolicyConfig {
	r, sd := c.Routing, c.Admission.Seeding
	return routing.PolicyConfig{
		PressureHighWater:        r.PressureHighWater,
		PressureSlack:            r.PressureSlack,
		MaxCachedOwnersPerPrefix: r.MaxCachedOwnersPerPrefix,
		SpillCooldown:            r.SpillCooldown,
		HashedColdPlacement:      r.ColdPlacement == "hashed",
		IndexMaxBlocks:           r.Index.MaxBlocks,
		IndexTTL:                 r.Index.TTL,
		CacheThreshold:           r.SGLang.CacheThreshold,
		BalanceAbs:               r.SGLang.BalanceAbs,
		BalanceRel:               r.SGLang.BalanceRel,
		PrefixHashBlocks:         r.PrefixHash.Blocks,
		LoadFactor:               r.PrefixHash.LoadFactor,
		Seeding: routing.SeedingConfig{
			Enabled:           sd.Enabled,
			Partitions:        sd.Partitions,
			PartitionSeedCap:  sd.PartitionSeedCap,
			SuccessCooldown:   sd.SuccessCooldown,
			FailureQuarantine: sd.FailureQuarantine,
			MaxAge:            c.Telemetry.SeedMaxAge,
		},
	}
}

// newAdmission builds the partition resolver and, unless admission is off,
// the fair-share scheduler over the fleet's capacity.
func (a *app) newAdmission(reg prometheus.Registerer) (*admission.Resolver, *admission.Scheduler, error) {
	ac := a.cfg.Admission
	parts := admissionPartitions(ac)
	resolver, err := admission.NewResolver(parts, ac.DefaultPartition, ac.PartitionHeader)
	if err != nil {
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	mode, err := admission.ParseMode(ac.Mode)
	if err != nil || mode == admission.ModeOff {
		return resolver, nil, err
	}
	a.capacity = handlers.FleetCapacity{Router: a.router, MaxAge: a.cfg.Telemetry.MaxAge, Now: time.Now}
	scheduler, err := admission.NewScheduler(schedulerConfig(ac, mode, parts), &a.capacity, nil, reg)
	if err != nil {
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	return resolver, scheduler, nil
}

// kicker wakes the scheduler when telemetry may have freed capacity.
func kicker(s *admission.Scheduler) func() {
	if s == nil {
		return nil
	}
	return s.Kick
}

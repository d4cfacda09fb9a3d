package main

import (
	"context"
	"sync"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/discovery"
	"github.com/kvgate/kvgate/handlers"
	"github.com/kvgate/kvgate/workers"
)

// Dynamic membership (docs/operations-membership.md): the admin API, DNS
// discovery and config reload each change the registry, and each only the
// workers of its own origin.

// configSpec is the worker a workers[] entry describes.
func configSpec(w config.Worker) workers.Spec {
	return workers.Spec{
		ID: w.ID, URL: w.URL, Models: w.Models, Engine: workers.Engine(w.Engine),
		MaxRunning: w.MaxRunning, DPRanks: w.DPRanks, Origin: workers.OriginConfig, APIKey: w.APIKey,
	}
}

// mountAdmin serves the admin API under /admin.
func (a *app) mountAdmin() {
	a.gateway.Mount("/admin", handlers.NewAdmin(handlers.AdminOptions{
		Registry:    a.registry,
		Token:       a.cfg.Auth.AdminToken,
		Listen:      a.cfg.Listen,
		CheckWorker: checkWorkerEntry,
		Logger:      a.log,
	}))
}

// checkWorkerEntry gives a worker added through the admin API the defaults
// and the validation of a workers[] entry of the config file.
func checkWorkerEntry(e *handlers.WorkerEntry) []handlers.FieldProblem {
	w := config.Worker{ID: e.ID, URL: e.URL, Models: e.Models, Engine: e.Engine,
		MaxRunning: e.MaxRunning, DPRanks: e.DPRanks, APIKey: e.APIKey}.WithDefaults()
	e.Engine, e.DPRanks = w.Engine, w.DPRanks
	var out []handlers.FieldProblem
	for _, p := range config.ValidateWorker(w) {
		out = append(out, handlers.FieldProblem{Path: p.Path, Reason: p.Reason})
	}
	return out
}

// newDiscovery builds DNS discovery when discovery.dns.name is set.
func (a *app) newDiscovery() error {
	d := a.cfg.Discovery.DNS
	if d.Name == "" {
		return nil
	}
	dns, err := discovery.NewDNS(discovery.Options{
		Name: d.Name, Port: d.Port, Interval: d.Interval, Scheme: d.Scheme,
		Engine: workers.Engine(d.Engine), Models: d.Models, MaxRunning: d.MaxRunning, DPRanks: d.DPRanks, APIKey: d.APIKey,
		IPFamily: d.IPFamily, RemoveAfter: d.RemoveAfter,
		Logger: a.log, Metrics: a.metrics,
	}, a.registry)
	if err != nil {
		return err
	}
	a.discovery = dns
	return nil
}

// runMembership runs DNS discovery and the reload loop while the gateway
// serves; the returned function stops both and waits for them.
func (a *app) runMembership(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if a.discovery != nil {
		wg.Go(func() { a.discovery.Run(ctx) })
	}
	if a.reloads != nil {
		wg.Go(func() { a.reloadLoop(ctx) })
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// pending counts the requests routed to a worker and not finished: a drain
// before removal waits for them as well as for those in flight.
func (a *app) pending(id string) int {
	n, _ := a.router.Reserved(id)
	return n
}

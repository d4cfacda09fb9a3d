package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/kvgate/kvgate/routing"
)

// policyFactory builds a fresh policy for one run.
type policyFactory func() (routing.Policy, error)

// namedPolicy is a policy name and how to build it.
type namedPolicy struct {
	name string
	make policyFactory
}

// policiesByName builds each named policy through routing.NewPolicy with
// cfg (the gateway's defaults unless flags changed them).
func policiesByName(names []string, cfg routing.PolicyConfig) []namedPolicy {
	out := make([]namedPolicy, len(names))
	for i, name := range names {
		out[i] = namedPolicy{name, func() (routing.Policy, error) {
			return routing.NewPolicy(name, cfg)
		}}
	}
	return out
}

// simulate replays wl once per policy, each on its own fleet, and returns
// the results in the order of policies. Policies run in parallel, up to one
// per CPU; each run is sequential and seeded, so the results do not depend
// on the schedule.
func simulate(ctx context.Context, wl *Workload, cfg fleetConfig, policies []namedPolicy) ([]policyResult, error) {
	results := make([]policyResult, len(policies))
	errs := make([]error, len(policies))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, max(1, min(runtime.GOMAXPROCS(0), len(policies))))
	var wg sync.WaitGroup
	for i, p := range policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			results[i], errs[i] = simulateOne(ctx, wl, cfg, p)
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	// Report the first real failure rather than the cancellations it caused.
	if i := slices.IndexFunc(errs, func(err error) bool { return err != nil && err != context.Canceled }); i >= 0 {
		return nil, errs[i]
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return results, nil
}

func simulateOne(ctx context.Context, wl *Workload, cfg fleetConfig, p namedPolicy) (policyResult, error) {
	policy, err := p.make()
	if err != nil {
		return policyResult{}, fmt.Errorf("policy %s: %w", p.name, err)
	}
	var more []routing.Policy
	for range max(cfg.Replicas, 1) - 1 {
		p2, err := p.make()
		if err != nil {
			return policyResult{}, fmt.Errorf("policy %s: %w", p.name, err)
		}
		more = append(more, p2)
	}
	f, err := newFleet(cfg, wl, policy, more...)
	if err != nil {
		return policyResult{}, err
	}
	if err := f.run(ctx); err != nil {
		return policyResult{}, fmt.Errorf("policy %s: %w", p.name, err)
	}
	return f.result(p.name), nil
}

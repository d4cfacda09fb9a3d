package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fleetsim:", err)
		stop()
		os.Exit(2)
	}
}

// run is the whole program minus process concerns: parse args, build the
// workload, replay it once per policy, print the table to stdout and write
// --json and --plot.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseFlags(args, stdout)
	if errors.Is(err, pflag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	wl, err := o.load()
	if err != nil {
		return err
	}
	policies, skipped, err := o.resolvePolicies()
	if err != nil {
		return err
	}
	if o.replicas > 1 && wl.Admission.Mode != admission.ModeOff {
		return fmt.Errorf("--replicas %d needs --admission off: admission here is one gateway's (the workload's is %s)", o.replicas, wl.Admission.Mode)
	}
	cfg := fleetConfig{
		Replicas:          o.replicas,
		Workers:           o.workers,
		Engine:            o.engine,
		TelemetryInterval: o.telemetryInterval,
		TelemetryMaxAge:   o.telemetryMaxAge,
		Seed:              o.seed,
		Admission:         wl.Admission,
	}
	results, err := simulate(ctx, wl, cfg, policiesByName(policies, o.policy))
	if err != nil {
		return err
	}
	rep := &report{
		Workload:           wl.Name,
		Workers:            o.workers,
		Replicas:           o.replicas,
		Requests:           len(wl.Requests),
		DurationS:          round((wl.Requests[len(wl.Requests)-1].At - wl.Requests[0].At).Seconds()),
		Seed:               o.seed,
		TimeScale:          o.timeScale,
		TelemetryIntervalS: round(o.telemetryInterval.Seconds()),
		Engine:             newEngineReport(o.engine),
		Admission:          newAdmissionReport(wl.Admission),
		Results:            results,
	}
	if err := writeTable(stdout, rep); err != nil {
		return err
	}
	for _, s := range skipped {
		fmt.Fprintf(stdout, "skipped %s\n", s)
	}
	if o.jsonPath != "" {
		if err := writeJSONFile(o.jsonPath, rep); err != nil {
			return err
		}
	}
	if o.plotPath != "" {
		if err := writePlot(o.plotPath, rep); err != nil {
			return err
		}
	}
	return nil
}

// load reads the trace or generates the workload, then compresses time.
func (o *options) load() (*Workload, error) {
	var wl *Workload
	var err error
	if o.trace != "" {
		wl, err = readTraceFile(o.trace, o.traceLimit, o.model, o.engine.BlockTokens)
	} else {
		wl, err = generate(generateParams{
			name:        o.workload,
			model:       o.model,
			blockTokens: o.engine.BlockTokens,
			requests:    o.requests,
			rate:        o.rate,
			duration:    o.duration,
			seed:        o.seed,
		})
	}
	if err != nil {
		return nil, err
	}
	wl.scaleTime(o.timeScale)
	if err := o.tenants(wl); err != nil {
		return nil, err
	}
	return wl, nil
}

// tenants gives wl its partitions and the admission gate it runs behind:
// the workload's own, with --partitions' weights and the admission flags
// given over them; for a trace or a tenant-less workload, --partitions split
// by --partition-by, or one partition "default".
func (o *options) tenants(wl *Workload) error {
	parts, err := parsePartitions(o.partitions)
	if err != nil {
		return err
	}
	switch {
	case wl.Partitions != nil && parts != nil:
		err = overrideWeights(wl, parts)
	case wl.Partitions == nil:
		if parts == nil {
			parts = defaultPartitions()
		}
		err = assignPartitions(wl, parts, o.partitionBy, o.seed)
	}
	if err != nil {
		return err
	}
	if wl.MaxCachedOwners > 0 && !o.set["max-cached-owners"] {
		o.policy.MaxCachedOwnersPerPrefix = wl.MaxCachedOwners
	}
	if o.set["admission"] {
		wl.Admission.Mode, _ = admission.ParseMode(o.mode) // validated
	}
	if o.set["max-queue"] {
		wl.Admission.MaxQueue = o.admission.MaxQueue
	}
	if o.set["queue-timeout"] {
		wl.Admission.QueueTimeout = o.admission.QueueTimeout
	}
	return nil
}

// resolvePolicies checks every policy through routing.NewPolicy. A policy
// named in --policies must exist; of the default list (every policy routing
// names, and cache_aware with seeding), those routing cannot build are
// skipped and reported.
func (o *options) resolvePolicies() (names, skipped []string, err error) {
	requested := o.policies
	explicit := len(requested) > 0
	if !explicit {
		requested = append(slices.Clone(routing.PolicyNames), routing.SeedingVariant)
	}
	for _, name := range requested {
		if _, perr := routing.NewPolicy(name, routing.DefaultPolicyConfig()); perr != nil {
			if explicit {
				return nil, nil, fmt.Errorf("--policies: %w", perr)
			}
			skipped = append(skipped, fmt.Sprintf("%s: %v", name, perr))
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("no routing policy to run")
	}
	return names, skipped, nil
}

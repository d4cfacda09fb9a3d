package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/sim"
)

// options is everything a run is configured with.
type options struct {
	trace      string
	traceLimit int
	workload   string
	requests   int
	rate       float64
	duration   time.Duration
	seed       uint64
	timeScale  float64
	model      string

	workers           int
	replicas          int
	coldPlacement     string
	policies          []string
	telemetryInterval time.Duration
	telemetryMaxAge   time.Duration

	// admission is the fair-share gate; a generated workload with tenants
	// of its own brings its defaults, flags override them.
	admission   admissionConfig
	mode        string
	partitions  []string // --partitions name:weight,…
	partitionBy string

	engine sim.Config
	// policy holds the routing policies' knobs, defaulting to the gateway's.
	policy routing.PolicyConfig

	jsonPath string
	plotPath string

	set map[string]bool // flags given on the command line
}

// Defaults not owned by sim: engine defaults come from sim.DefaultConfig.
const (
	defaultRequests = 4000
	defaultWorkers  = 8
	// Generated workloads use the engine's own block size (vLLM's 16
	// tokens); a trace's hash_ids name 512-token blocks.
	defaultGeneratedBlockTokens = sim.DefaultBlockTokens
)

func defaultOptions() options {
	return options{
		seed:              1,
		timeScale:         1,
		model:             "sim",
		workers:           defaultWorkers,
		replicas:          1,
		coldPlacement:     "p2c",
		telemetryInterval: time.Second,
		telemetryMaxAge:   5 * time.Second,
		engine:            sim.DefaultConfig(),
		policy:            routing.DefaultPolicyConfig(),
		mode:              admission.ModeOff.String(),
		partitionBy:       partitionByPrefix,
	}
}

func newFlagSet(o *options, out io.Writer) *pflag.FlagSet {
	d := defaultOptions()
	fs := pflag.NewFlagSet("fleetsim", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprintf(out, `fleetsim replays a workload against a simulated fleet once per routing policy,
in virtual time, and compares the policies (table on stdout, --json for a file).

  fleetsim --trace ../shared/traces/mooncake_synthetic_trace.jsonl --workers 8
  fleetsim --workload hot-prefix --policies cache_aware,sglang_cache_aware --json out.json --plot ttft.svg

Give exactly one of --trace or --workload (%s).

Flags:
`, workloadNames())
		fs.PrintDefaults()
	}
	fs.StringVar(&o.trace, "trace", d.trace, "replay a Mooncake JSONL trace (timestamp ms, input_length, output_length, hash_ids of 512-token blocks)")
	fs.IntVar(&o.traceLimit, "trace-limit", d.traceLimit, "replay only the first N trace records (0: all)")
	fs.StringVar(&o.workload, "workload", d.workload, "generate a workload: "+workloadNames())
	fs.IntVar(&o.requests, "requests", d.requests, "generated workloads: number of requests (0: the workload's default, "+workloadRequests()+")")
	fs.Float64Var(&o.rate, "rate", d.rate, "generated workloads: requests a second (0: the workload's default, "+workloadRates()+")")
	fs.DurationVar(&o.duration, "duration", d.duration, "generated workloads: stop arrivals after this much virtual time (0: no limit)")
	fs.Uint64Var(&o.seed, "seed", d.seed, "seed of the generated workload and of the policies' random choices")
	fs.Float64Var(&o.timeScale, "time-scale", d.timeScale, "divide arrival times by this factor (2: twice as fast)")
	fs.StringVar(&o.model, "model", d.model, "model name; it seeds the prefix hash chain")
	fs.IntVar(&o.workers, "workers", d.workers, "workers in the fleet")
	fs.IntVar(&o.replicas, "replicas", d.replicas, "gateway replicas, each with its own prefix index and reservations, behind a balancer that sends each request to one at random (needs --admission off)")
	fs.StringSliceVar(&o.policies, "policies", nil, "comma-separated routing policies (default: all of "+strings.Join(routing.PolicyNames, ",")+")")
	fs.DurationVar(&o.telemetryInterval, "telemetry-interval", d.telemetryInterval, "how often the router's view of worker load is refreshed")
	fs.DurationVar(&o.telemetryMaxAge, "telemetry-max-age", d.telemetryMaxAge, "telemetry older than this is stale to the router")
	fs.Float64Var(&o.policy.PressureHighWater, "pressure-high-water", d.policy.PressureHighWater, "cache_aware: routing.pressure_high_water")
	fs.Float64Var(&o.policy.PressureSlack, "pressure-slack", d.policy.PressureSlack, "cache_aware: routing.pressure_slack")
	fs.IntVar(&o.policy.MaxCachedOwnersPerPrefix, "max-cached-owners", d.policy.MaxCachedOwnersPerPrefix, "cache_aware: routing.max_cached_owners_per_prefix")
	fs.DurationVar(&o.policy.SpillCooldown, "spill-cooldown", d.policy.SpillCooldown, "cache_aware: routing.spill_cooldown")
	fs.StringVar(&o.coldPlacement, "cold-placement", d.coldPlacement, "cache_aware: routing.cold_placement, p2c or hashed")
	fs.StringVar(&o.mode, "admission", d.mode, "admission.mode: off, shadow or enforce (workloads with tenants of their own default to theirs: "+workloadModes()+")")
	fs.IntVar(&o.admission.MaxQueue, "max-queue", d.admission.MaxQueue, "admission.queue.max_per_partition: more waiting are rejected (429); 0: unbounded")
	fs.DurationVar(&o.admission.QueueTimeout, "queue-timeout", d.admission.QueueTimeout, "admission.queue.timeout: longer waits are rejected (503); 0: none")
	fs.StringSliceVar(&o.partitions, "partitions", nil, "tenants as name:weight,… in admission's order; a workload with tenants of its own takes only new weights (default: one partition \"default\")")
	fs.StringVar(&o.partitionBy, "partition-by", d.partitionBy, "how --partitions splits a trace or a tenant-less workload: prefix (by first prompt block) or request")
	fs.IntVar(&o.engine.MaxRunning, "max-running", d.engine.MaxRunning, "engine batch slots per worker")
	fs.IntVar(&o.engine.KVCapacityTokens, "kv-capacity-tokens", d.engine.KVCapacityTokens, "engine KV cache size per worker, in tokens")
	fs.IntVar(&o.engine.BlockTokens, "block-tokens", 0, fmt.Sprintf("engine KV block size in tokens (0: %d for a trace, %d for generated workloads; a trace takes any divisor of 512)", traceBlockTokens, defaultGeneratedBlockTokens))
	fs.Float64Var(&o.engine.PrefillTokensPerSec, "prefill-tokens-per-sec", d.engine.PrefillTokensPerSec, "engine prefill speed on uncached prompt tokens")
	fs.IntVar(&o.engine.PrefillChunkTokens, "prefill-chunk-tokens", d.engine.PrefillChunkTokens, "engine chunked prefill budget a step (0: whole prompts)")
	fs.DurationVar(&o.engine.DecodeStepBase, "decode-step-base", d.engine.DecodeStepBase, "engine decode step time, fixed part")
	fs.DurationVar(&o.engine.DecodeStepPerRequest, "decode-step-per-request", d.engine.DecodeStepPerRequest, "engine decode step time, per running request")
	fs.StringVar(&o.jsonPath, "json", d.jsonPath, "also write the report as JSON to this file")
	fs.StringVar(&o.plotPath, "plot", d.plotPath, "also draw the TTFT CDF of every policy as SVG to this file")
	return fs
}

// parseFlags parses and checks args; pflag.ErrHelp after printing the usage
// for -h/--help.
func parseFlags(args []string, out io.Writer) (options, error) {
	o := defaultOptions()
	fs := newFlagSet(&o, out)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { o.set[f.Name] = true })
	if o.engine.BlockTokens == 0 {
		o.engine.BlockTokens = defaultGeneratedBlockTokens
		if o.trace != "" {
			o.engine.BlockTokens = traceBlockTokens
		}
	}
	return o, o.validate(fs)
}

func (o *options) validate(fs *pflag.FlagSet) error {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if (o.trace == "") == (o.workload == "") {
		bad("give exactly one of --trace or --workload")
	}
	if o.trace != "" {
		for _, name := range []string{"requests", "rate", "duration"} {
			if fs.Changed(name) {
				bad("--%s shapes generated workloads; with --trace use --trace-limit and --time-scale", name)
			}
		}
		if traceBlockTokens%o.engine.BlockTokens != 0 {
			bad("--block-tokens %d must divide the trace's %d-token blocks", o.engine.BlockTokens, traceBlockTokens)
		}
	} else if fs.Changed("trace-limit") {
		bad("--trace-limit applies only with --trace")
	}
	if o.requests < 0 {
		bad("--requests must not be negative")
	}
	if _, err := admission.ParseMode(o.mode); err != nil {
		bad("--admission: %v", err)
	}
	if o.admission.MaxQueue < 0 || o.admission.QueueTimeout < 0 {
		bad("--max-queue and --queue-timeout must not be negative")
	}
	if !slices.Contains(partitionRules, o.partitionBy) {
		bad("--partition-by %q: want %s", o.partitionBy, strings.Join(partitionRules, " or "))
	}
	if _, err := parsePartitions(o.partitions); err != nil {
		bad("%v", err)
	}
	if o.rate < 0 || o.duration < 0 || o.traceLimit < 0 {
		bad("--rate, --duration and --trace-limit must not be negative")
	}
	if !(o.timeScale > 0) {
		bad("--time-scale must be positive")
	}
	if o.workers < 1 {
		bad("--workers must be at least 1")
	}
	if o.replicas < 1 {
		bad("--replicas must be at least 1")
	}
	switch o.coldPlacement {
	case "p2c", "hashed":
		o.policy.HashedColdPlacement = o.coldPlacement == "hashed"
	default:
		bad("--cold-placement must be p2c or hashed")
	}
	if o.telemetryInterval <= 0 || o.telemetryMaxAge <= 0 {
		bad("--telemetry-interval and --telemetry-max-age must be positive")
	}
	for i, p := range o.policies {
		if slices.Contains(o.policies[:i], p) {
			bad("--policies names %s twice", p)
		}
	}
	if err := o.engine.Validate(); err != nil {
		bad("%v", err)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

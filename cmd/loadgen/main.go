package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvgate/kvgate/mooncake"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		stop()
		os.Exit(2)
	}
}

// options is everything a run is configured with.
type options struct {
	url         string
	endpoint    string
	model       string
	apiKey      string
	rate        float64
	concurrency int
	maxInflight int
	duration    time.Duration
	requests    int
	seed        uint64
	stream      bool
	ignoreEOS   bool
	maxTokens   int
	timeout     time.Duration
	jsonPath    string

	promptTokens       int
	sharedPrefixTokens int
	prefixes           int

	trace      string
	traceLimit int
	timeScale  float64
}

// defaultOptions holds every default, once.
func defaultOptions() options {
	return options{
		url:          "http://127.0.0.1:8080/v1",
		endpoint:     endpointChat,
		model:        "sim",
		maxInflight:  1024,
		seed:         1,
		maxTokens:    32,
		timeout:      2 * time.Minute,
		promptTokens: 128,
		prefixes:     1,
		timeScale:    1,
	}
}

func newFlagSet(o *options, stderr io.Writer) *pflag.FlagSet {
	d := defaultOptions()
	fs := pflag.NewFlagSet("loadgen", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.SortFlags = false
	fs.Usage = func() {
		fmt.Fprint(stderr, `loadgen sends load to an OpenAI-compatible endpoint and reports throughput,
TTFT and end-to-end latency (table on stdout, --json for a file).

  loadgen --url http://127.0.0.1:8080/v1 --rate 200 --duration 60s --stream
  loadgen --concurrency 32 --requests 5000 --prompt-tokens 1024 --shared-prefix-tokens 768 --prefixes 8
  loadgen --trace mooncake_trace.jsonl --time-scale 10 --stream --json out.json

Give exactly one of --rate (open loop) or --concurrency (closed loop), or
neither with --trace to follow its timestamps. The run stops at --duration or
--requests, whichever comes first.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.url, "url", d.url, "OpenAI base URL; requests go to <url>/chat/completions or <url>/completions")
	fs.StringVar(&o.endpoint, "endpoint", d.endpoint, "API to call: chat or completions")
	fs.StringVar(&o.model, "model", d.model, "model name sent in every request")
	fs.StringVar(&o.apiKey, "api-key", d.apiKey, "sent as Authorization: Bearer <key> when set")
	fs.Float64Var(&o.rate, "rate", d.rate, "open-loop Poisson arrivals a second (exclusive with --concurrency)")
	fs.IntVar(&o.concurrency, "concurrency", d.concurrency, "closed-loop workers, each with one request outstanding (exclusive with --rate)")
	fs.IntVar(&o.maxInflight, "max-inflight", d.maxInflight, "open loop: outstanding requests cap; arrivals over it count as error kind dropped")
	fs.DurationVar(&o.duration, "duration", d.duration, "stop making arrivals after this long (0: no limit)")
	fs.IntVar(&o.requests, "requests", d.requests, "stop after this many arrivals (0: no limit)")
	fs.Uint64Var(&o.seed, "seed", d.seed, "seed of arrival gaps and prompts; equal seeds replay equal runs")
	fs.BoolVar(&o.stream, "stream", d.stream, "stream responses (SSE) and measure TTFT at the first content chunk; without it TTFT = E2E")
	fs.BoolVar(&o.ignoreEOS, "ignore-eos", d.ignoreEOS, `send "ignore_eos": true (vLLM, SGLang) so every request generates --max-tokens`)
	fs.IntVar(&o.maxTokens, "max-tokens", d.maxTokens, "max_tokens of every request (trace: of records without output_length)")
	fs.DurationVar(&o.timeout, "timeout", d.timeout, "per-request timeout, counted as error kind timeout (0: none)")
	fs.StringVar(&o.jsonPath, "json", d.jsonPath, "also write the summary as JSON (times in seconds) to this file")
	fs.IntVar(&o.promptTokens, "prompt-tokens", d.promptTokens, "built-in prompts: approximate length in tokens (~4 chars a token)")
	fs.IntVar(&o.sharedPrefixTokens, "shared-prefix-tokens", d.sharedPrefixTokens, "built-in prompts: leading tokens taken from a shared prefix")
	fs.IntVar(&o.prefixes, "prefixes", d.prefixes, "built-in prompts: number of distinct shared prefixes (system prompts)")
	fs.StringVar(&o.trace, "trace", d.trace, "replay prompts (and, without --rate/--concurrency, arrival times) of a Mooncake JSONL trace")
	fs.IntVar(&o.traceLimit, "trace-limit", d.traceLimit, "replay only the first N trace records (0: all)")
	fs.Float64Var(&o.timeScale, "time-scale", d.timeScale, "divide trace timestamps by this factor (2: twice as fast)")
	return fs
}

// parseFlags parses and checks args. It returns pflag.ErrHelp after printing
// the usage for -h/--help.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := newFlagSet(&o, stderr)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return o, o.validate(fs)
}

func (o *options) validate(fs *pflag.FlagSet) error {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if o.rate < 0 {
		bad("--rate must not be negative")
	}
	if o.concurrency < 0 {
		bad("--concurrency must not be negative")
	}
	if o.rate > 0 && o.concurrency > 0 {
		bad("--rate and --concurrency are exclusive: choose open or closed loop")
	}
	if o.trace == "" && o.rate == 0 && o.concurrency == 0 {
		bad("give --rate (open loop) or --concurrency (closed loop), or --trace to follow its timestamps")
	}
	if o.trace == "" && o.duration <= 0 && o.requests <= 0 {
		bad("give --duration, --requests or both, so the run ends")
	}
	if o.duration < 0 || o.requests < 0 || o.traceLimit < 0 || o.timeout < 0 {
		bad("--duration, --requests, --trace-limit and --timeout must not be negative")
	}
	if o.maxInflight < 1 {
		bad("--max-inflight must be at least 1")
	}
	if o.maxTokens < 1 {
		bad("--max-tokens must be at least 1")
	}
	if o.timeScale <= 0 {
		bad("--time-scale must be positive")
	}
	if o.endpoint != endpointChat && o.endpoint != endpointCompletions {
		bad("--endpoint must be %s or %s, got %q", endpointChat, endpointCompletions, o.endpoint)
	}
	if o.trace != "" {
		for _, name := range []string{"prompt-tokens", "shared-prefix-tokens", "prefixes"} {
			if fs.Changed(name) {
				bad("--%s shapes built-in prompts and does not apply with --trace", name)
			}
		}
		if fs.Changed("time-scale") && (o.rate > 0 || o.concurrency > 0) {
			bad("--time-scale applies to trace timestamps, which --rate/--concurrency replace")
		}
	} else {
		for _, name := range []string{"trace-limit", "time-scale"} {
			if fs.Changed(name) {
				bad("--%s applies only with --trace", name)
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// run is the whole program minus process concerns (signals, exit status):
// parse args, send the load, print the table to stdout, write --json. The
// progress line goes to stderr when stderr is a terminal. Canceling ctx ends
// the run early; requests in flight are counted as canceled and the report
// is still written.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}

	w, sched, err := o.workload()
	if err != nil {
		return err
	}
	limit := o.requests
	if n := w.size(); n >= 0 && (limit <= 0 || n < limit) {
		limit = n
	}
	connections := o.maxInflight
	if o.concurrency > 0 {
		connections = o.concurrency
	}
	rn, err := newRunner(runnerConfig{
		baseURL:     o.url,
		endpoint:    o.endpoint,
		apiKey:      o.apiKey,
		stream:      o.stream,
		timeout:     o.timeout,
		connections: connections,
	})
	if err != nil {
		return err
	}
	defer rn.close()
	enc, err := newBodyEncoder(o.endpoint, o.model, o.stream, o.ignoreEOS)
	if err != nil {
		return err
	}

	rec := newRecorder(limit)
	pool := &bodyPool{}
	send := func(i int) {
		body := pool.get()
		body.buf = enc.appendBody(body.buf, w, i)
		rec.markSent()
		rec.record(rn.do(ctx, body))
	}

	arrivals := ctx
	if o.duration > 0 {
		var cancel context.CancelFunc
		arrivals, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	start := time.Now()
	stopProgress := func() {}
	if isTerminal(stderr) {
		stopProgress = startProgress(stderr, rec, start, progressInterval)
	}
	if o.concurrency > 0 {
		runClosedLoop(arrivals, o.concurrency, limit, send)
	} else {
		runOpenLoop(arrivals, start, sched, limit, o.maxInflight, func() { rec.fail(kindDropped) }, send)
	}
	elapsed := time.Since(start)
	stopProgress()

	s := rec.summarize(elapsed)
	fmt.Fprintf(stdout, "loadgen: POST %s  %s  stream=%t  seed=%d\n", rn.url, o.modeString(), o.stream, o.seed)
	if err := writeTable(stdout, s); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if o.jsonPath != "" {
		return writeJSONFile(o.jsonPath, s)
	}
	return nil
}

// workload builds the prompts and, for open-loop runs, the arrival schedule
// (nil for closed loop).
func (o *options) workload() (workload, schedule, error) {
	var (
		w    workload
		recs []mooncake.Record
		err  error
	)
	if o.trace == "" {
		w, err = newSyntheticPrompts(o.seed, o.promptTokens, o.sharedPrefixTokens, o.prefixes, o.maxTokens)
	} else if recs, err = mooncake.ReadFile(o.trace, o.traceLimit); err == nil {
		w = &tracePrompts{recs: recs, defaultTokens: o.maxTokens}
	}
	switch {
	case err != nil:
		return nil, nil, err
	case o.concurrency > 0:
		return w, nil, nil
	case o.rate > 0:
		return w, newPoissonSchedule(o.seed, o.rate), nil
	default:
		return w, &fixedSchedule{offsets: mooncake.Offsets(recs, o.timeScale)}, nil
	}
}

func (o *options) modeString() string {
	switch {
	case o.concurrency > 0:
		return fmt.Sprintf("closed-loop concurrency=%d", o.concurrency)
	case o.rate > 0:
		return fmt.Sprintf("open-loop poisson rate=%g/s max-inflight=%d", o.rate, o.maxInflight)
	default:
		return fmt.Sprintf("open-loop trace time-scale=%g max-inflight=%d", o.timeScale, o.maxInflight)
	}
}

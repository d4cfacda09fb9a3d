// Command enginesim is a simulated LLM engine worker: the sim engine model
// served over the OpenAI HTTP API, with vLLM's /metrics, SGLang's /get_load
// and /v1/loads, and fault knobs, for testing kvgate without GPUs.
//
//	enginesim --listen 127.0.0.1:9001 --model llama --time-scale 0.1
//	enginesim --error-rate 0.05 --slow-first-token 2s
//
// It serves until SIGINT or SIGTERM, then drains requests in flight for up
// to --shutdown-grace before closing.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvgate/kvgate/sim/simserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "enginesim:", err)
		stop()
		os.Exit(2)
	}
}

// run is the whole program, testable: parse args, serve until ctx ends, shut
// down gracefully. started, when non-nil, receives the bound address.
func run(ctx context.Context, args []string, logOut io.Writer, started chan<- string) error {
	opts, err := parseFlags(args, logOut)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(logOut, nil))
	opts.server.Logger = logger

	srv, err := simserver.New(opts.server)
	if err != nil {
		return err
	}
	addr, err := srv.Start(opts.listen)
	if err != nil {
		srv.Close()
		return err
	}
	cfg := srv.Config()
	logger.Info("enginesim serving",
		"addr", addr,
		"models", cfg.Models,
		"max_running", cfg.Engine.MaxRunning,
		"kv_capacity_tokens", cfg.Engine.KVCapacityTokens,
		"block_tokens", cfg.Engine.BlockTokens,
		"time_scale", cfg.TimeScale)
	if started != nil {
		started <- addr
	}

	<-ctx.Done()
	logger.Info("enginesim shutting down", "grace", opts.shutdownGrace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), opts.shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// options is what the flags configure.
type options struct {
	listen        string
	shutdownGrace time.Duration
	server        simserver.Config
}

// parseFlags maps the command line onto a server config. Every default comes
// from simserver.DefaultConfig (and through it sim.DefaultConfig).
func parseFlags(args []string, out io.Writer) (options, error) {
	d := simserver.DefaultConfig()
	fs := pflag.NewFlagSet("enginesim", pflag.ContinueOnError)
	fs.SetOutput(out)
	fs.SortFlags = false

	o := options{server: d}
	s := &o.server
	fs.StringVar(&o.listen, "listen", "127.0.0.1:9001", "address to serve on")
	fs.StringSliceVar(&s.Models, "model", d.Models, "served model id (repeatable, or a comma list); the first labels the metrics")
	fs.IntVar(&s.Engine.MaxRunning, "max-running", d.Engine.MaxRunning, "batch slots (max running requests)")
	fs.IntVar(&s.Engine.KVCapacityTokens, "kv-capacity-tokens", d.Engine.KVCapacityTokens, "KV cache size in tokens")
	fs.IntVar(&s.Engine.BlockTokens, "block-tokens", d.Engine.BlockTokens, "KV block size in tokens")
	fs.Float64Var(&s.Engine.PrefillTokensPerSec, "prefill-tokens-per-sec", d.Engine.PrefillTokensPerSec, "prefill speed on uncached prompt tokens")
	fs.DurationVar(&s.Engine.DecodeStepBase, "decode-step-base", d.Engine.DecodeStepBase, "decode step time, fixed part")
	fs.DurationVar(&s.Engine.DecodeStepPerRequest, "decode-step-per-request", d.Engine.DecodeStepPerRequest, "decode step time added per request in the batch")
	fs.IntVar(&s.Engine.PrefillChunkTokens, "prefill-chunk-tokens", d.Engine.PrefillChunkTokens, "prompt tokens prefilled per step (chunked prefill); 0 prefills each prompt whole")
	fs.Uint64Var(&s.Seed, "seed", d.Seed, "seed of the output words of requests without a seed, and of injected errors")
	fs.Float64Var(&s.TimeScale, "time-scale", d.TimeScale, "wall time per simulated time; 0 answers at once")
	fs.Int64Var(&s.MaxBodyBytes, "max-body-bytes", d.MaxBodyBytes, "largest request body accepted")
	fs.Float64Var(&s.Faults.ErrorRate, "error-rate", 0, "fault: fraction of requests answered 500")
	fs.IntVar(&s.Faults.ForceStatus, "force-status", 0, "fault: answer every request with this HTTP status (0 off)")
	fs.DurationVar(&s.Faults.SlowFirstToken, "slow-first-token", 0, "fault: hold the first token until this long after arrival")
	fs.IntVar(&s.Faults.DieAfterTokens, "die-after-tokens", 0, "fault: drop the connection after this many tokens (0 off)")
	fs.BoolVar(&s.Faults.Hang, "hang", false, "fault: never answer completion requests")
	fs.BoolVar(&s.Faults.FailHealth, "fail-health", false, "fault: /health answers 503")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", 10*time.Second, "how long a shutdown waits for requests in flight")

	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if err := s.Validate(); err != nil {
		return options{}, err
	}
	return o, nil
}

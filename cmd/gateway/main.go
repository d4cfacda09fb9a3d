// Command gateway runs kvgate: an OpenAI-compatible gateway that routes each
// request to the engine worker best placed to serve it.
//
//	gateway --config kvgate.yaml
//	gateway --demo                 # four simulated workers in-process
//	gateway --print-config         # the effective config as YAML
//
// SIGHUP reads the config again and applies its workers and partitions
// (docs/operations-membership.md); SIGTERM and SIGINT shut down gracefully.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/kvgate/kvgate/config"
)

// defaultGCPercent is the GC target when GOGC is unset. The gateway's live
// heap is a few megabytes and nearly everything it allocates dies within one
// request, so letting the heap grow to 5x live before collecting trades tens
// of megabytes for a measurably cheaper request path (README, Benchmarks).
// GOGC and GOMEMLIMIT still take precedence.
const defaultGCPercent = 400

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runGateway(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, nil, reloadOnSIGHUP(ctx)); err != nil {
		if !errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "kvgate:", err)
		}
		if config.IsValidation(err) || errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// run is the whole program, testable: it parses args, loads the config and
// serves until ctx ends; logs go to stderr. When started is non-nil it receives the bound
// address once the gateway accepts connections.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer, started chan<- string) error {
	return runGateway(ctx, args, environ, stdout, stderr, started, nil)
}

// runGateway is run that also reads the config again, and applies what it
// can, on each request from reloads (SIGHUP in main; nil: never).
func runGateway(ctx context.Context, args, environ []string, stdout, stderr io.Writer, started chan<- string,
	reloads <-chan reloadRequest) error {
	fs := pflag.NewFlagSet("gateway", pflag.ContinueOnError)
	fs.SetOutput(stdout)
	config.AddFlags(fs)
	printConfig := fs.Bool("print-config", false, "print the effective config as YAML and exit")
	reference := fs.Bool("config-reference", false, "print the configuration reference table (Markdown) and exit")
	demo := fs.Bool("demo", false, "start simulated workers in-process and route to them")
	demoWorkers := fs.Int("demo-workers", 4, "number of simulated workers with --demo")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, fs.Args())
	}
	if *reference {
		_, err := io.WriteString(stdout, config.Reference())
		return err
	}
	cfg, err := config.Load(fs, environ)
	if err != nil {
		return err
	}
	var fleet *demoFleet
	if *demo && !*printConfig {
		fleet, err = startDemoFleet(*demoWorkers)
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer fleet.Close()
		cfg.Workers = append(cfg.Workers, fleet.workers...)
	}
	if *printConfig {
		out, err := cfg.YAML()
		if err != nil {
			return err
		}
		_, err = stdout.Write(out)
		return err
	}
	if len(cfg.Workers) == 0 && cfg.Discovery.DNS.Name == "" {
		return fmt.Errorf("%w: no workers configured: list them under workers: in --config, set discovery.dns.name, or try --demo", errUsage)
	}
	logOut := newBufferedLog(stderr)
	defer logOut.Close()
	a, err := newApp(cfg, newLogger(cfg.Log, logOut), logOut)
	if err != nil {
		return err
	}
	a.reloads = reloads
	a.loadConfig = func() (config.Config, error) {
		c, err := config.Load(fs, environ)
		if err == nil && fleet != nil {
			c.Workers = append(c.Workers, fleet.workers...)
		}
		return c, err
	}
	return a.serve(ctx, func(addr string) {
		if fleet != nil {
			fleet.printWelcome(stdout, addr)
		}
		if started != nil {
			started <- addr
		}
	})
}

package simserver

import (
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/kvgate/kvgate/sim"
)

// Config sets up one simulated worker.
type Config struct {
	// Models are the model ids served; a request naming another gets 404.
	// The first one labels the metrics (vLLM labels them with its first
	// served model name) and answers requests that name no model.
	Models []string
	// Engine is the simulated engine. Zero fields take sim.DefaultConfig's
	// values, except PrefillChunkTokens whose zero means no chunking.
	Engine sim.Config
	// Seed picks the output words of requests that carry no seed.
	Seed uint64
	// TimeScale is wall time per simulated time: 1 is real speed, 0.1 ten
	// times faster, 0 answers at once (every step takes no time: for
	// measuring a gateway's own overhead).
	TimeScale float64
	// Faults are injected from the start; /sim/faults changes them later.
	Faults Faults
	// MaxBodyBytes caps a request body (413 beyond). 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives the server's few log lines. nil discards them.
	Logger *slog.Logger
}

// Defaults of the server itself; the engine's are sim.DefaultConfig.
const (
	DefaultModel        = "sim"
	DefaultTimeScale    = 1.0
	DefaultMaxBodyBytes = 64 << 20
	// DefaultMaxTokens is the output length of a request without max_tokens.
	DefaultMaxTokens = 16
	// BytesPerToken is how many bytes of prompt text make one token.
	BytesPerToken = 4
)

// DefaultConfig is a real-time worker serving the model "sim".
func DefaultConfig() Config {
	return Config{
		Models:       []string{DefaultModel},
		Engine:       sim.DefaultConfig(),
		TimeScale:    DefaultTimeScale,
		MaxBodyBytes: DefaultMaxBodyBytes,
	}
}

// withDefaults fills zero fields, so that a Config literal naming only what
// it cares about still works.
func (c Config) withDefaults() Config {
	d := sim.DefaultConfig()
	e := &c.Engine
	if e.MaxRunning == 0 {
		e.MaxRunning = d.MaxRunning
	}
	if e.KVCapacityTokens == 0 {
		e.KVCapacityTokens = d.KVCapacityTokens
	}
	if e.BlockTokens == 0 {
		e.BlockTokens = d.BlockTokens
	}
	if e.PrefillTokensPerSec == 0 {
		e.PrefillTokensPerSec = d.PrefillTokensPerSec
	}
	if e.DecodeStepBase == 0 {
		e.DecodeStepBase = d.DecodeStepBase
	}
	if e.DecodeStepPerRequest == 0 {
		e.DecodeStepPerRequest = d.DecodeStepPerRequest
	}
	if len(c.Models) == 0 {
		c.Models = []string{DefaultModel}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every field New would refuse, after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	seen := make(map[string]bool, len(c.Models))
	for _, m := range c.Models {
		if m == "" {
			errs = append(errs, errors.New("models: an empty model id"))
		}
		if seen[m] {
			errs = append(errs, fmt.Errorf("models: %q twice", m))
		}
		seen[m] = true
	}
	if c.TimeScale < 0 || math.IsNaN(c.TimeScale) || math.IsInf(c.TimeScale, 0) {
		errs = append(errs, fmt.Errorf("time scale %v: must be a finite number ≥ 0", c.TimeScale))
	}
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("max body bytes %d: must not be negative", c.MaxBodyBytes))
	}
	if err := c.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Faults.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("simserver config: %w", err)
	}
	return nil
}

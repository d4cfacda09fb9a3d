package sim

import (
	"errors"
	"fmt"
	"time"
)

// Config sets an engine's capacity and speed. The defaults (DefaultConfig) are
// the one documented place for them; enginesim's flags and fleetsim start from
// there.
type Config struct {
	// MaxRunning is the number of batch slots (vLLM max_num_seqs, SGLang
	// max_running_requests).
	MaxRunning int
	// KVCapacityTokens is the KV cache size in tokens; it is rounded down to
	// whole blocks.
	KVCapacityTokens int
	// BlockTokens is the size of a KV block in tokens. Request.BlockHashes
	// name blocks of this size.
	BlockTokens int
	// PrefillTokensPerSec is the prefill speed on uncached prompt tokens.
	PrefillTokensPerSec float64
	// DecodeStepBase and DecodeStepPerRequest give the decode part of a step:
	// base + per request × requests in the batch.
	DecodeStepBase       time.Duration
	DecodeStepPerRequest time.Duration
	// PrefillChunkTokens caps the prompt tokens prefilled in one step
	// (chunked prefill, vLLM max_num_batched_tokens); a long prompt then
	// spreads over several steps instead of stalling every decode behind it.
	// 0 prefills each admitted prompt whole in its admission step.
	PrefillChunkTokens int
}

// Defaults, documented once here.
const (
	DefaultMaxRunning           = 64
	DefaultKVCapacityTokens     = 262144
	DefaultBlockTokens          = 16
	DefaultPrefillTokensPerSec  = 20000
	DefaultDecodeStepBase       = 8 * time.Millisecond
	DefaultDecodeStepPerRequest = 150 * time.Microsecond
	DefaultPrefillChunkTokens   = 0
)

// DefaultConfig returns an engine the size of one mid-range GPU worker.
func DefaultConfig() Config {
	return Config{
		MaxRunning:           DefaultMaxRunning,
		KVCapacityTokens:     DefaultKVCapacityTokens,
		BlockTokens:          DefaultBlockTokens,
		PrefillTokensPerSec:  DefaultPrefillTokensPerSec,
		DecodeStepBase:       DefaultDecodeStepBase,
		DecodeStepPerRequest: DefaultDecodeStepPerRequest,
		PrefillChunkTokens:   DefaultPrefillChunkTokens,
	}
}

// CapacityBlocks is the KV cache size in whole blocks.
func (c Config) CapacityBlocks() int {
	if c.BlockTokens <= 0 {
		return 0
	}
	return c.KVCapacityTokens / c.BlockTokens
}

// Validate reports every field that would make the model meaningless.
func (c Config) Validate() error {
	var errs []error
	if c.MaxRunning < 1 {
		errs = append(errs, fmt.Errorf("max running %d: must be at least 1", c.MaxRunning))
	}
	if c.BlockTokens < 1 {
		errs = append(errs, fmt.Errorf("block tokens %d: must be at least 1", c.BlockTokens))
	}
	if c.BlockTokens >= 1 && c.KVCapacityTokens < c.BlockTokens {
		errs = append(errs, fmt.Errorf("kv capacity %d tokens: must hold at least one block of %d", c.KVCapacityTokens, c.BlockTokens))
	}
	if !(c.PrefillTokensPerSec > 0) {
		errs = append(errs, fmt.Errorf("prefill speed %v tokens/s: must be positive", c.PrefillTokensPerSec))
	}
	if c.DecodeStepBase < 0 {
		errs = append(errs, fmt.Errorf("decode step base %v: must not be negative", c.DecodeStepBase))
	}
	if c.DecodeStepPerRequest < 0 {
		errs = append(errs, fmt.Errorf("decode step per request %v: must not be negative", c.DecodeStepPerRequest))
	}
	if c.PrefillChunkTokens < 0 {
		errs = append(errs, fmt.Errorf("prefill chunk %d tokens: must not be negative", c.PrefillChunkTokens))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sim config: %w", err)
	}
	return nil
}

// prefillTime is how long prefilling n uncached tokens takes.
func (c Config) prefillTime(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(float64(n) * float64(time.Second) / c.PrefillTokensPerSec)
}

// decodeTime is the decode part of a step with batch requests running.
func (c Config) decodeTime(batch int) time.Duration {
	return c.DecodeStepBase + time.Duration(batch)*c.DecodeStepPerRequest
}

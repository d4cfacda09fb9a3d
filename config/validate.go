package config

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
)

// FieldError is one problem with one key.
type FieldError struct {
	Path   string
	Reason string
}

func (e FieldError) Error() string { return e.Path + ": " + e.Reason }

// ValidationError carries every problem found, each with its key path.
type ValidationError struct {
	Problems []FieldError
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = "  " + p.Error()
	}
	return fmt.Sprintf("invalid configuration (%d problems):\n%s", len(e.Problems), strings.Join(lines, "\n"))
}

// Policies are the routing policy names this build knows; a test in
// cmd/gateway keeps the list equal to the routing package's.
var Policies = []string{"cache_aware", "round_robin", "random", "least_load", "sglang_cache_aware", "prefix_hash"}

// Engines are the telemetry formats a worker may speak.
var Engines = []string{"vllm", "sglang", "auto"}

type problems []FieldError

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, FieldError{Path: path, Reason: fmt.Sprintf(format, args...)})
}

func (p *problems) positive(path string, d time.Duration) {
	if d <= 0 {
		p.add(path, "must be a positive duration, got %s", d)
	}
}

// minPollInterval keeps a typo from turning a poll loop into a busy loop
// against every worker.
const minPollInterval = 10 * time.Millisecond

func (p *problems) interval(path string, d time.Duration) {
	if d < minPollInterval {
		p.add(path, "must be at least %s, got %s", minPollInterval, d)
	}
}

func (p *problems) atLeast(path string, v, min int) {
	if v < min {
		p.add(path, "must be at least %d, got %d", min, v)
	}
}

// Validate reports every problem of c at once, or nil.
func (c *Config) Validate() error {
	var p problems
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		p.add("listen", "must be host:port: %v", err)
	}
	if c.ShutdownGrace < 0 {
		p.add("shutdown_grace", "must not be negative, got %s", c.ShutdownGrace)
	}
	if c.ShutdownDelay < 0 {
		p.add("shutdown_delay", "must not be negative, got %s", c.ShutdownDelay)
	}
	c.validateWorkers(&p)
	c.validateMembership(&p)
	if !slices.Contains(Policies, c.Routing.Policy) {
		p.add("routing.policy", "unknown policy %q (want one of %s)", c.Routing.Policy, strings.Join(Policies, ", "))
	}
	if cp := c.Routing.ColdPlacement; cp != "p2c" && cp != "hashed" {
		p.add("routing.cold_placement", "must be p2c or hashed, got %q", cp)
	}
	p.atLeast("routing.output_estimate_cap", c.Routing.OutputEstimateCap, 1)
	if c.Routing.BlockBytes < 16 || c.Routing.BlockBytes > 1<<16 {
		p.add("routing.block_bytes", "must be 16..65536, got %d", c.Routing.BlockBytes)
	}
	if c.Routing.PressureHighWater <= 0 || c.Routing.PressureHighWater > 4 {
		p.add("routing.pressure_high_water", "must be in (0, 4], got %v", c.Routing.PressureHighWater)
	}
	if c.Routing.PressureSlack < 0 || c.Routing.PressureSlack > 1 {
		p.add("routing.pressure_slack", "must be in [0, 1], got %v", c.Routing.PressureSlack)
	}
	p.atLeast("routing.max_cached_owners_per_prefix", c.Routing.MaxCachedOwnersPerPrefix, 0)
	if c.Routing.MaxCachedOwnersPerPrefix > 6 {
		p.add("routing.max_cached_owners_per_prefix", "must be at most 6 (owners kept per block), got %d", c.Routing.MaxCachedOwnersPerPrefix)
	}
	p.positive("routing.spill_cooldown", c.Routing.SpillCooldown)
	if c.Routing.SpillCooldown > time.Hour {
		p.add("routing.spill_cooldown", "must be at most 1h, got %s", c.Routing.SpillCooldown)
	}
	p.atLeast("routing.index.max_blocks", c.Routing.Index.MaxBlocks, 1024)
	if c.Routing.Index.MaxBlocks > 1<<30 {
		p.add("routing.index.max_blocks", "must be at most 2^30, got %d", c.Routing.Index.MaxBlocks)
	}
	p.positive("routing.index.ttl", c.Routing.Index.TTL)
	if c.Routing.Index.TTL > 30*24*time.Hour {
		p.add("routing.index.ttl", "must be at most 720h, got %s", c.Routing.Index.TTL)
	}
	if c.Routing.SGLang.CacheThreshold < 0 || c.Routing.SGLang.CacheThreshold > 1 {
		p.add("routing.sglang.cache_threshold", "must be in [0, 1], got %v", c.Routing.SGLang.CacheThreshold)
	}
	p.atLeast("routing.sglang.balance_abs", c.Routing.SGLang.BalanceAbs, 0)
	if c.Routing.SGLang.BalanceRel < 1 {
		p.add("routing.sglang.balance_rel", "must be at least 1, got %v", c.Routing.SGLang.BalanceRel)
	}
	p.atLeast("routing.prefix_hash.blocks", c.Routing.PrefixHash.Blocks, 1)
	if c.Routing.PrefixHash.LoadFactor < 1 {
		p.add("routing.prefix_hash.load_factor", "must be at least 1, got %v", c.Routing.PrefixHash.LoadFactor)
	}
	c.validateAdmission(&p)
	p.interval("telemetry.interval", c.Telemetry.Interval)
	p.positive("telemetry.max_age", c.Telemetry.MaxAge)
	p.positive("telemetry.timeout", c.Telemetry.Timeout)
	p.positive("telemetry.seed_max_age", c.Telemetry.SeedMaxAge)
	if c.Telemetry.Timeout > c.Telemetry.Interval {
		p.add("telemetry.timeout", "must not exceed telemetry.interval (%s), got %s", c.Telemetry.Interval, c.Telemetry.Timeout)
	}
	if c.Telemetry.MaxAge > 0 && c.Telemetry.MaxAge < c.Telemetry.Interval {
		p.add("telemetry.max_age", "must be at least telemetry.interval (%s), or every sample is stale, got %s", c.Telemetry.Interval, c.Telemetry.MaxAge)
	}
	p.interval("health.interval", c.Health.Interval)
	p.positive("health.timeout", c.Health.Timeout)
	if !strings.HasPrefix(c.Health.Path, "/") {
		p.add("health.path", "must start with /, got %q", c.Health.Path)
	}
	p.atLeast("health.unhealthy_threshold", c.Health.UnhealthyThreshold, 1)
	p.atLeast("health.healthy_threshold", c.Health.HealthyThreshold, 1)
	p.atLeast("breaker.failure_threshold", c.Breaker.FailureThreshold, 0)
	if c.Breaker.FailureThreshold > 0 {
		p.positive("breaker.open_for", c.Breaker.OpenFor)
	}
	p.atLeast("retry.max_attempts", c.Retry.MaxAttempts, 1)
	if c.Retry.BackoffBase < 0 {
		p.add("retry.backoff_base", "must not be negative, got %s", c.Retry.BackoffBase)
	}
	if c.Retry.BackoffMax < c.Retry.BackoffBase {
		p.add("retry.backoff_max", "must be at least retry.backoff_base (%s), got %s", c.Retry.BackoffBase, c.Retry.BackoffMax)
	}
	p.positive("upstream.dial_timeout", c.Upstream.DialTimeout)
	p.positive("upstream.response_header_timeout", c.Upstream.ResponseHeaderTimeout)
	p.atLeast("upstream.idle_conns_per_worker", c.Upstream.IdleConnsPerWorker, 1)
	p.positive("upstream.idle_conn_timeout", c.Upstream.IdleConnTimeout)
	if c.Upstream.IdleTimeout < 0 {
		p.add("upstream.idle_timeout", "must not be negative (0 disables it), got %s", c.Upstream.IdleTimeout)
	}
	if b := c.Limits.MaxBufferedBodyBytes; b < 0 || (b > 0 && b < c.Limits.MaxBodyBytes) {
		p.add("limits.max_buffered_body_bytes", "must be 0 (no bound) or at least limits.max_body_bytes (%d), got %d", c.Limits.MaxBodyBytes, b)
	}
	if c.Limits.ClientWriteTimeout < 0 {
		p.add("limits.client_write_timeout", "must not be negative (0 disables it), got %s", c.Limits.ClientWriteTimeout)
	}
	if c.Limits.BodyReadTimeout < 0 {
		p.add("limits.body_read_timeout", "must not be negative (0 disables it), got %s", c.Limits.BodyReadTimeout)
	}
	if c.Limits.MaxBodyBytes < 1024 {
		p.add("limits.max_body_bytes", "must be at least 1024, got %d", c.Limits.MaxBodyBytes)
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		p.add("log.level", "unknown level %q (want debug, info, warn or error)", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "text" {
		p.add("log.format", "unknown format %q (want json or text)", c.Log.Format)
	}
	if len(p) == 0 {
		return nil
	}
	sort.SliceStable(p, func(i, j int) bool { return p[i].Path < p[j].Path })
	return &ValidationError{Problems: p}
}

func (c *Config) validateWorkers(p *problems) {
	seen := map[string]int{}
	for i, w := range c.Workers {
		at := fmt.Sprintf("workers[%d]", i)
		p.addAll(ValidateWorker(w), at)
		if w.ID != "" {
			if first, dup := seen[w.ID]; dup {
				p.add(at+".id", "duplicate id %q (also workers[%d])", w.ID, first)
			} else {
				seen[w.ID] = i
			}
		}
	}
}

func (p *problems) addAll(errs []FieldError, prefix string) {
	for _, e := range errs {
		p.add(prefix+"."+e.Path, "%s", e.Reason)
	}
}

// ValidateWorker checks one worker entry; paths are relative to the entry
// ("url", "engine"). The admin API and discovery use it for workers that do
// not come from the file.
func ValidateWorker(w Worker) []FieldError {
	var p problems
	if w.ID == "" {
		p.add("id", "is required")
	} else if strings.ContainsAny(w.ID, " \t\n/") {
		p.add("id", "must not contain spaces or slashes, got %q", w.ID)
	}
	if w.URL == "" {
		p.add("url", "is required")
	} else if u, err := url.Parse(w.URL); err != nil {
		p.add("url", "is not a URL: %v", err)
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("url", "must be an http:// or https:// URL with a host, got %q", w.URL)
	}
	for j, m := range w.Models {
		if strings.TrimSpace(m) == "" {
			p.add(fmt.Sprintf("models[%d]", j), "must not be empty")
		}
	}
	if !slices.Contains(Engines, w.Engine) {
		p.add("engine", "unknown engine %q (want vllm, sglang or auto)", w.Engine)
	}
	p.atLeast("max_running", w.MaxRunning, 0)
	p.atLeast("dp_ranks", w.DPRanks, 1)
	if strings.ContainsFunc(w.APIKey, unicode.IsSpace) {
		p.add("api_key", "must not contain whitespace")
	}
	return p
}

func (c *Config) validateAdmission(p *problems) {
	a := &c.Admission
	if !slices.Contains([]string{"off", "shadow", "enforce"}, a.Mode) {
		p.add("admission.mode", "unknown mode %q (want off, shadow or enforce)", a.Mode)
	}
	if a.DefaultPartition == "" {
		p.add("admission.default_partition", "is required")
	}
	names := map[string]int{}
	keys := map[string]string{}
	for i, pc := range a.Partitions {
		at := fmt.Sprintf("admission.partitions[%d]", i)
		if pc.Name == "" {
			p.add(at+".name", "is required")
		} else if first, dup := names[pc.Name]; dup {
			p.add(at+".name", "duplicate partition %q (also admission.partitions[%d])", pc.Name, first)
		} else {
			names[pc.Name] = i
		}
		if !(pc.Weight > 0) || pc.Weight > 1e6 {
			p.add(at+".weight", "must be in (0, 1e6], got %v", pc.Weight)
		}
		for j, k := range pc.APIKeys {
			kat := fmt.Sprintf("%s.api_keys[%d]", at, j)
			switch {
			case strings.TrimSpace(k) != k || k == "" || strings.ContainsAny(k, " \t"):
				p.add(kat, "must be a non-empty key without whitespace") // never print the key
			case keys[k] != "":
				p.add(kat, "the same key is also %s", keys[k])
			default:
				keys[k] = kat
			}
		}
	}
	if len(a.Partitions) > 0 {
		if _, ok := names[a.DefaultPartition]; !ok {
			p.add("admission.default_partition", "names no partition in admission.partitions: %q", a.DefaultPartition)
		}
	}
	p.atLeast("admission.seeding.partition_seed_cap", a.Seeding.PartitionSeedCap, 1)
	p.positive("admission.seeding.success_cooldown", a.Seeding.SuccessCooldown)
	p.positive("admission.seeding.failure_quarantine", a.Seeding.FailureQuarantine)
	for i, name := range a.Seeding.Partitions {
		if _, ok := names[name]; !ok && !(len(a.Partitions) == 0 && name == a.DefaultPartition) {
			p.add(fmt.Sprintf("admission.seeding.partitions[%d]", i), "names no configured partition: %q", name)
		}
	}
	if a.Seeding.Enabled && a.Mode == "off" {
		p.add("admission.seeding.enabled", "needs admission.mode shadow or enforce: a seed must claim an admission proof")
	}
	p.atLeast("admission.queue.max_per_partition", a.Queue.MaxPerPartition, 1)
	p.positive("admission.queue.timeout", a.Queue.Timeout)
}

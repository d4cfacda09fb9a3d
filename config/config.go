package config

import "time"

// Config is the gateway's whole configuration. Each leaf carries its key
// (koanf tag) and a one-line description (doc tag) used by --print-config,
// the flag set and the README reference table.
type Config struct {
	Listen        string        `koanf:"listen" doc:"Address the gateway listens on (host:port)."`
	ShutdownGrace time.Duration `koanf:"shutdown_grace" doc:"How long in-flight requests may run after SIGTERM before the process exits."`
	ShutdownDelay time.Duration `koanf:"shutdown_delay" doc:"After SIGTERM, how long the gateway keeps serving with /readyz at 503 before its listener closes, so load balancers stop sending first (5s under Kubernetes)."`
	Workers       []Worker      `koanf:"workers" doc:"Engine workers behind the gateway."`
	Discovery     Discovery     `koanf:"discovery"`
	Auth          Auth          `koanf:"auth"`
	Routing       Routing       `koanf:"routing"`
	Admission     Admission     `koanf:"admission"`
	Telemetry     Telemetry     `koanf:"telemetry"`
	Health        Health        `koanf:"health"`
	Breaker       Breaker       `koanf:"breaker"`
	Retry         Retry         `koanf:"retry"`
	Upstream      Upstream      `koanf:"upstream"`
	Limits        Limits        `koanf:"limits"`
	Log           Log           `koanf:"log"`
}

// Worker is one engine endpoint from the config file.
type Worker struct {
	ID         string   `koanf:"id" doc:"Unique, stable worker id (used in metrics and decisions)."`
	URL        string   `koanf:"url" doc:"Base URL of the worker's OpenAI-compatible HTTP server."`
	Models     []string `koanf:"models" doc:"Models the worker serves; empty = learned from its /v1/models."`
	Engine     string   `koanf:"engine" doc:"Telemetry format to read: vllm, sglang or auto."`
	MaxRunning int      `koanf:"max_running" doc:"Batch capacity hint used when telemetry reports none (vLLM never does)."`
	APIKey     string   `koanf:"api_key" doc:"Key the worker requires (vLLM or SGLang --api-key), sent as Authorization: Bearer on every request to it; never logged." secret:"true"`
	DPRanks    int      `koanf:"dp_ranks" doc:"Data-parallel ranks the worker reports; telemetry is complete only when all report."`
}

// Discovery finds workers at run time, beside the static workers list
// (docs/operations-membership.md).
type Discovery struct {
	DNS DNSDiscovery `koanf:"dns"`
}

// DNSDiscovery turns the address records of one DNS name (a Kubernetes
// headless Service) into workers, looked up again every interval.
type DNSDiscovery struct {
	Name        string        `koanf:"name" doc:"DNS name whose A/AAAA records are workers (a Kubernetes headless Service); a name starting with _ is looked up as SRV, ports from the records; empty = off."`
	Port        int           `koanf:"port" doc:"Port of the workers found by A/AAAA records (not used with SRV)."`
	Interval    time.Duration `koanf:"interval" doc:"How often the name is looked up again; a failed or empty lookup keeps the workers found before."`
	Scheme      string        `koanf:"scheme" doc:"URL scheme of discovered workers: http or https."`
	Engine      string        `koanf:"engine" doc:"Telemetry format of discovered workers: vllm, sglang or auto."`
	Models      []string      `koanf:"models" doc:"Models discovered workers serve; empty = learned from each one's /v1/models."`
	MaxRunning  int           `koanf:"max_running" doc:"Batch capacity hint of each discovered worker (as workers[].max_running)."`
	DPRanks     int           `koanf:"dp_ranks" doc:"Data-parallel ranks each discovered worker reports."`
	APIKey      string        `koanf:"api_key" doc:"Key discovered workers require (as workers[].api_key)." secret:"true"`
	RemoveAfter int           `koanf:"remove_after" doc:"Consecutive successful lookups an address must be missing from before its worker is retired (drained, then removed); 1 = at once. Rides out readiness blips without losing the worker's cache affinity."`
	IPFamily    string        `koanf:"ip_family" doc:"Address records to use: any (A and AAAA), ipv4 (A) or ipv6 (AAAA). Set ipv4 or ipv6 on dual-stack clusters, where any makes each pod two workers."`
}

// Auth holds the credentials of the gateway's own operator API.
type Auth struct {
	AdminToken string `koanf:"admin_token" doc:"Bearer token of the admin API (/admin/...); empty = the admin API answers only on a loopback listen address. Prefer KVGATE_AUTH__ADMIN_TOKEN to a flag." secret:"true"`
}

// Routing selects the policy that picks a worker for each request.
type Routing struct {
	Policy                   string        `koanf:"policy" doc:"Routing policy: cache_aware, round_robin, random, least_load, sglang_cache_aware or prefix_hash."`
	Seed                     int64         `koanf:"seed" doc:"Seed of the policies' random source; 0 = seeded from the clock at start."`
	OutputEstimateCap        int           `koanf:"output_estimate_cap" doc:"Cap on the output tokens a request reserves (min(max_tokens, cap))."`
	BlockBytes               int           `koanf:"block_bytes" doc:"Bytes of routing text per prefix block (docs/routing.md says why 256)."`
	PressureHighWater        float64       `koanf:"pressure_high_water" doc:"cache_aware: an owner at or above this pressure is pressured."`
	PressureSlack            float64       `koanf:"pressure_slack" doc:"cache_aware: suitable owners are within this much pressure of the least-pressured owner."`
	MaxCachedOwnersPerPrefix int           `koanf:"max_cached_owners_per_prefix" doc:"cache_aware: replication ceiling of a prefix (not a target); 0 disables pressure spills."`
	SpillCooldown            time.Duration `koanf:"spill_cooldown" doc:"cache_aware: how long a spill destination is provisional and further spills of the prefix coalesce on it."`
	ColdPlacement            string        `koanf:"cold_placement" doc:"cache_aware: where a prefix with no known owner goes: p2c (two random candidates, the less loaded) or hashed (the two a hash of the prompt ranks first, the less loaded: every gateway replica weighs the same two, so replicas place a prompt alike; for several replicas)."`
	Index                    RoutingIndex  `koanf:"index"`
	SGLang                   SGLangPolicy  `koanf:"sglang"`
	PrefixHash               PrefixHash    `koanf:"prefix_hash"`
}

// RoutingIndex bounds the prefix ownership index.
type RoutingIndex struct {
	MaxBlocks int           `koanf:"max_blocks" doc:"Prefix blocks the ownership index holds (LRU beyond); about 150 bytes each."`
	TTL       time.Duration `koanf:"ttl" doc:"Approximate ownership lapses after this long unused."`
}

// SGLangPolicy holds the sglang_cache_aware baseline's knobs.
type SGLangPolicy struct {
	CacheThreshold float64 `koanf:"cache_threshold" doc:"sglang_cache_aware: route by cache when the best match rate exceeds this."`
	BalanceAbs     int     `koanf:"balance_abs" doc:"sglang_cache_aware: imbalanced when max - min in-flight exceeds this ..."`
	BalanceRel     float64 `koanf:"balance_rel" doc:"sglang_cache_aware: ... and max exceeds min times this."`
}

// PrefixHash holds the prefix_hash baseline's knobs.
type PrefixHash struct {
	Blocks     int     `koanf:"blocks" doc:"prefix_hash: leading blocks that pick the ring position."`
	LoadFactor float64 `koanf:"load_factor" doc:"prefix_hash: bounded load, no worker above ceil(mean in-flight x factor)."`
}

// Admission shares the fleet between partitions (tenants) when it is full.
type Admission struct {
	Mode             string            `koanf:"mode" doc:"off (no gate), shadow (decide and count, never wait) or enforce."`
	DefaultPartition string            `koanf:"default_partition" doc:"Partition of every request when no partition has API keys (with keys, a request without a known one gets 401)."`
	PartitionHeader  string            `koanf:"partition_header" doc:"Trusted header naming the partition, for deployments behind an authenticating proxy; empty = off."`
	Partitions       []PartitionConfig `koanf:"partitions" doc:"Tenants and their shares; empty = one default partition."`
	Queue            AdmissionQueue    `koanf:"queue"`
	Seeding          Seeding           `koanf:"seeding"`
}

// Seeding is distribution headroom seeding: when every owner of a prefix is
// full, an admitted request may seed one clean worker (docs/admission.md).
type Seeding struct {
	Enabled           bool          `koanf:"enabled" doc:"Let a request held on full owners seed one clean worker (needs admission shadow or enforce)."`
	Partitions        []string      `koanf:"partitions" doc:"Partitions allowed to seed; empty = none."`
	PartitionSeedCap  int           `koanf:"partition_seed_cap" doc:"Seeds in flight per partition, a hard cap."`
	SuccessCooldown   time.Duration `koanf:"success_cooldown" doc:"After a committed seed, how long before the prefix may seed again."`
	FailureQuarantine time.Duration `koanf:"failure_quarantine" doc:"After a failed seed, how long the worker is barred from the prefix and its descendants."`
}

// PartitionConfig is one tenant.
type PartitionConfig struct {
	Name    string   `koanf:"name" doc:"Partition name (a metric label)."`
	Weight  float64  `koanf:"weight" doc:"Share of a full fleet relative to the other partitions."`
	APIKeys []string `koanf:"api_keys" doc:"Bearer keys that select this partition; when any partition has keys, requests need one." secret:"true"`
}

// AdmissionQueue bounds the wait for a free slot.
type AdmissionQueue struct {
	MaxPerPartition int           `koanf:"max_per_partition" doc:"Requests a partition may have waiting; more get 429 with Retry-After."`
	Timeout         time.Duration `koanf:"timeout" doc:"Longest wait for a slot; then 503."`
}

// Telemetry controls how the gateway reads the workers' own load reports.
type Telemetry struct {
	Interval time.Duration `koanf:"interval" doc:"How often each worker's load telemetry is polled."`
	MaxAge   time.Duration `koanf:"max_age" doc:"A sample older than this is stale: routing then fails open and capacity is unknown."`
	Timeout  time.Duration `koanf:"timeout" doc:"Timeout of one telemetry poll; at most interval."`
	// SeedMaxAge is stricter than MaxAge: seeding fails closed on anything older.
	SeedMaxAge time.Duration `koanf:"seed_max_age" doc:"Seeding needs telemetry this fresh (complete, every rank); older fails closed."`
}

// Health controls the active health checks.
type Health struct {
	Interval           time.Duration `koanf:"interval" doc:"How often each worker's health endpoint is checked."`
	Timeout            time.Duration `koanf:"timeout" doc:"Timeout of one health check."`
	Path               string        `koanf:"path" doc:"Health endpoint path on the worker."`
	UnhealthyThreshold int           `koanf:"unhealthy_threshold" doc:"Consecutive failed checks that make a worker unhealthy."`
	HealthyThreshold   int           `koanf:"healthy_threshold" doc:"Consecutive good checks that make an unhealthy worker healthy again."`
}

// Breaker is the passive circuit breaker each worker has.
type Breaker struct {
	FailureThreshold int           `koanf:"failure_threshold" doc:"Consecutive request failures that open a worker's circuit; 0 disables the breaker."`
	OpenFor          time.Duration `koanf:"open_for" doc:"How long an open circuit rejects traffic before one trial request is let through."`
}

// Retry bounds how a request is retried before its first byte reaches the client.
type Retry struct {
	MaxAttempts int           `koanf:"max_attempts" doc:"Attempts per request including the first; retries re-route with failed workers excluded."`
	BackoffBase time.Duration `koanf:"backoff_base" doc:"Backoff before the first retry; doubles each retry, with full jitter."`
	BackoffMax  time.Duration `koanf:"backoff_max" doc:"Upper bound of one retry backoff."`
}

// Upstream tunes the pooled HTTP transport to the workers.
type Upstream struct {
	DialTimeout           time.Duration `koanf:"dial_timeout" doc:"TCP connect timeout to a worker."`
	ResponseHeaderTimeout time.Duration `koanf:"response_header_timeout" doc:"Longest wait for a worker's response headers (non-streaming engines answer only when done)."`
	IdleTimeout           time.Duration `koanf:"idle_timeout" doc:"An attempt whose worker sends nothing for this long fails (retried before the first byte, an error event after). Covers queueing and prefill before the first token."`
	IdleConnsPerWorker    int           `koanf:"idle_conns_per_worker" doc:"Keep-alive connections kept open per worker."`
	IdleConnTimeout       time.Duration `koanf:"idle_conn_timeout" doc:"How long an idle keep-alive connection is kept."`
}

// Limits protect the gateway from oversized input.
type Limits struct {
	MaxBodyBytes         int64         `koanf:"max_body_bytes" doc:"Largest accepted request body; larger gets 413."`
	MaxBufferedBodyBytes int64         `koanf:"max_buffered_body_bytes" doc:"Request-body bytes the gateway holds at once (bodies being read, queued for admission or in flight); a request that would go over gets 503 server_busy with Retry-After. At least max_body_bytes; 0 = no bound."`
	BodyReadTimeout      time.Duration `koanf:"body_read_timeout" doc:"Longest time a client may take to send its request body."`
	ClientWriteTimeout   time.Duration `koanf:"client_write_timeout" doc:"Longest a client may leave one write of its answer pending (a stream's event, 64 KiB of a body); past it the client is gone and what its request held is released. 0 disables it."`
}

// Log configures the structured logger.
type Log struct {
	Level    string `koanf:"level" doc:"Log level: debug, info, warn or error."`
	Format   string `koanf:"format" doc:"Log format: json or text."`
	Requests bool   `koanf:"requests" doc:"Log one line per request (id, model, worker, decision, status, duration)."`
}

// Default returns the configuration used when nothing overrides it.
func Default() Config {
	return Config{
		Listen:        "127.0.0.1:8080",
		ShutdownGrace: 30 * time.Second,
		Discovery:     Discovery{DNS: DNSDiscovery{Interval: 5 * time.Second, Scheme: "http", Engine: "auto", DPRanks: 1, RemoveAfter: 3, IPFamily: "any"}},
		Routing: Routing{
			Policy:                   "cache_aware",
			OutputEstimateCap:        1024,
			BlockBytes:               256,
			PressureHighWater:        0.9,
			PressureSlack:            0.10,
			MaxCachedOwnersPerPrefix: 4,
			SpillCooldown:            time.Second,
			ColdPlacement:            "p2c",
			Index:                    RoutingIndex{MaxBlocks: 1 << 20, TTL: 10 * time.Minute},
			SGLang:                   SGLangPolicy{CacheThreshold: 0.3, BalanceAbs: 64, BalanceRel: 1.5},
			PrefixHash:               PrefixHash{Blocks: 4, LoadFactor: 1.25},
		},
		Admission: Admission{
			Mode:             "off",
			DefaultPartition: "default",
			Queue:            AdmissionQueue{MaxPerPartition: 256, Timeout: 30 * time.Second},
			Seeding:          Seeding{PartitionSeedCap: 1, SuccessCooldown: 10 * time.Second, FailureQuarantine: time.Minute},
		},
		Telemetry: Telemetry{Interval: time.Second, MaxAge: 5 * time.Second, Timeout: time.Second, SeedMaxAge: 2 * time.Second},
		Health: Health{
			Interval:           5 * time.Second,
			Timeout:            2 * time.Second,
			Path:               "/health",
			UnhealthyThreshold: 2,
			HealthyThreshold:   1,
		},
		Breaker: Breaker{FailureThreshold: 5, OpenFor: 10 * time.Second},
		Retry:   Retry{MaxAttempts: 3, BackoffBase: 25 * time.Millisecond, BackoffMax: 500 * time.Millisecond},
		Upstream: Upstream{
			DialTimeout:           5 * time.Second,
			ResponseHeaderTimeout: 10 * time.Minute,
			IdleTimeout:           5 * time.Minute,
			IdleConnsPerWorker:    256,
			IdleConnTimeout:       90 * time.Second,
		},
		Limits: Limits{MaxBodyBytes: 32 << 20, MaxBufferedBodyBytes: 256 << 20, BodyReadTimeout: time.Minute, ClientWriteTimeout: time.Minute},
		Log:    Log{Level: "info", Format: "json", Requests: true},
	}
}

// DefaultPartitionConfig holds the defaults applied to each partition.
func DefaultPartitionConfig() PartitionConfig { return PartitionConfig{Weight: 1} }

// DefaultWorker holds the defaults applied to each entry of workers.
func DefaultWorker() Worker {
	return Worker{Engine: "auto", DPRanks: 1}
}

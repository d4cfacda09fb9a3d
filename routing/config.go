package routing

import "time"

// PolicyConfig holds every policy's knobs; each policy reads its own.
type PolicyConfig struct {
	// cache_aware
	PressureHighWater        float64       // an owner at or above this pressure is pressured
	PressureSlack            float64       // suitable owners are within this of the least-pressured owner
	MaxCachedOwnersPerPrefix int           // replication ceiling; 0 disables pressure spills
	SpillCooldown            time.Duration // a spill destination is provisional this long; no new spill meanwhile
	HashedColdPlacement      bool          // cold misses: hashed two choices instead of random ones (hashedTwoChoices)
	IndexMaxBlocks           int           // ownership index bound (LRU)
	IndexTTL                 time.Duration // approximate ownership ages out after this long unused

	// sglang_cache_aware
	CacheThreshold float64 // route by cache when the best match rate exceeds this
	BalanceAbs     int     // imbalance: max-min in-flight above this ...
	BalanceRel     float64 // ... and max above min times this

	// prefix_hash
	PrefixHashBlocks int     // blocks of the prefix that pick the ring position
	LoadFactor       float64 // bounded load: no worker above ceil(mean × factor)

	// Seeding is cache_aware's distribution headroom seeding.
	Seeding SeedingConfig
}

// SeedingConfig lets a request that would be held on full owners seed one
// clean worker instead (DESIGN.md, "Distribution headroom seeding").
type SeedingConfig struct {
	Enabled           bool
	Partitions        []string      // allowlist; empty = none may seed
	PartitionSeedCap  int           // seeds in flight per partition (a hard cap)
	SuccessCooldown   time.Duration // after a committed seed, no new seed of the prefix
	FailureQuarantine time.Duration // after a failed seed, the peer is barred from the prefix and its descendants
	MaxAge            time.Duration // telemetry freshness seeding demands (stricter than routing's)
}

// DefaultPolicyConfig returns the defaults documented in the config reference.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{
		PressureHighWater:        0.9,
		PressureSlack:            0.10,
		MaxCachedOwnersPerPrefix: 4,
		SpillCooldown:            time.Second,
		IndexMaxBlocks:           1 << 20,
		IndexTTL:                 10 * time.Minute,
		CacheThreshold:           0.3,
		BalanceAbs:               64,
		BalanceRel:               1.5,
		PrefixHashBlocks:         4,
		LoadFactor:               1.25,
		Seeding: SeedingConfig{
			PartitionSeedCap:  1,
			SuccessCooldown:   10 * time.Second,
			FailureQuarantine: time.Minute,
			MaxAge:            2 * time.Second,
		},
	}
}

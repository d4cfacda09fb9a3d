package admission

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"off": ModeOff, "shadow": ModeShadow, "enforce": ModeEnforce, " Enforce ": ModeEnforce} {
		m, err := ParseMode(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, m)
		assert.Equal(t, want.String(), m.String())
	}
	_, err := ParseMode("strict")
	assert.Error(t, err)
	assert.Equal(t, "Mode(7)", Mode(7).String())
}

func TestShadowNeverBlocksAndCountsWhatEnforceWouldDo(t *testing.T) {
	fleet := newSlots(0)
	cfg := twoPartitions(ModeShadow, 1, 1)
	cfg.MaxQueuePerPartition = 1
	cfg.QueueTimeout = time.Millisecond
	s, _ := newScheduler(t, cfg, fleet, nil)
	var credits []*Credit
	for range 3 {
		c, err := s.Admit(context.Background(), Request{ID: "x", Partition: "a", Cost: 10})
		require.NoError(t, err, "shadow mode never refuses for capacity")
		credits = append(credits, c)
	}
	assert.EqualValues(t, 3, s.decisionCount("a", decisionAdmitted))
	assert.EqualValues(t, 1, s.decisionCount("a", decisionShadowWouldQueue))
	assert.EqualValues(t, 2, s.decisionCount("a", decisionShadowWouldReject), "the shadow queue holds one")
	assert.Zero(t, s.decisionCount("a", decisionQueued), "nothing actually queued")
	depth, inflight := s.gauges("a")
	assert.Zero(t, depth)
	assert.EqualValues(t, 3, inflight)
	for _, c := range credits {
		c.Release(OutcomeSuccess, 10)
	}
	assertIdle(t, s)

	fleet.total.Store(1)
	c, err := s.Admit(context.Background(), Request{ID: "y", Partition: "b"})
	require.NoError(t, err)
	c.Release(OutcomeSuccess, 0)
	assert.Zero(t, s.decisionCount("b", decisionShadowWouldQueue), "with a free slot, enforce would admit too")
	assertIdle(t, s)
}

func TestOffNeverBlocksNorAsksCapacity(t *testing.T) {
	s, _ := newScheduler(t, twoPartitions(ModeOff, 1, 1), nil, nil)
	var credits []*Credit
	for range 100 {
		c, err := s.Admit(context.Background(), Request{ID: "x", Partition: "b", Cost: 10})
		require.NoError(t, err)
		credits = append(credits, c)
	}
	snap := s.Snapshot()
	assert.Equal(t, 100, snap.Partitions[1].Inflight, "still counted in flight")
	for _, c := range credits {
		c.Routed()
		c.Release(OutcomeSuccess, 10)
	}
	assert.EqualValues(t, 1000, s.Snapshot().Partitions[1].ServedTokens, "still counted in served tokens")
	assertIdle(t, s)

	_, err := NewScheduler(twoPartitions(ModeEnforce, 1, 1), nil, nil, nil)
	assert.Error(t, err, "enforce needs a capacity")
}

func TestConfigValidation(t *testing.T) {
	valid := func() Config { return twoPartitions(ModeEnforce, 1, 2) }
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"no partitions", func(c *Config) { c.Partitions = nil }},
		{"zero weight", func(c *Config) { c.Partitions[0].Weight = 0 }},
		{"negative weight", func(c *Config) { c.Partitions[0].Weight = -1 }},
		{"NaN weight", func(c *Config) { c.Partitions[0].Weight = math.NaN() }},
		{"infinite weight", func(c *Config) { c.Partitions[0].Weight = math.Inf(1) }},
		{"duplicate names", func(c *Config) { c.Partitions[1].Name = "a" }},
		{"empty name", func(c *Config) { c.Partitions[1].Name = "" }},
		{"unknown default", func(c *Config) { c.DefaultPartition = "z" }},
		{"negative queue limit", func(c *Config) { c.MaxQueuePerPartition = -1 }},
		{"negative timeout", func(c *Config) { c.QueueTimeout = -time.Second }},
		{"negative TTL", func(c *Config) { c.CreditTTL = -time.Second }},
		{"unknown mode", func(c *Config) { c.Mode = 9 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.mutate(&cfg)
			_, err := NewScheduler(cfg, newSlots(1), nil, nil)
			assert.Error(t, err)
			s, _ := newScheduler(t, valid(), newSlots(1), nil)
			assert.Error(t, s.Reconfigure(cfg))
			assert.EqualValues(t, 1, s.Generation(), "a refused reload changes nothing")
		})
	}
}

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := NewScheduler(twoPartitions(ModeOff, 1, 1), nil, nil, reg)
	require.NoError(t, err)
	n, err := testutil.GatherAndCount(reg, "kvgate_admission_decisions_total")
	require.NoError(t, err)
	assert.Equal(t, 2*int(numDecisions), n, "every partition's outcomes exist from the start")
	_, err = NewScheduler(twoPartitions(ModeOff, 1, 1), nil, nil, reg)
	assert.Error(t, err, "a second scheduler on one registry is a wiring bug")
}

func TestReconfigure(t *testing.T) {
	t.Run("removed partitions fail their queue; kept ones keep theirs", func(t *testing.T) {
		fleet := newSlots(1)
		cfg := twoPartitions(ModeEnforce, 1, 1)
		s, reg := newScheduler(t, cfg, fleet, nil)
		running := admitOne(t, s, Request{ID: "r", Partition: "b"})
		var got collector
		s.Submit(Request{ID: "qa", Partition: "a"}, got.done)
		s.Submit(Request{ID: "qb", Partition: "b"}, got.done)

		cfg.Partitions = []Partition{{Name: "a", Weight: 2}, {Name: "c", Weight: 1}}
		require.NoError(t, s.Reconfigure(cfg))
		require.Len(t, got.errs, 1)
		assert.ErrorIs(t, got.errs[0], ErrUnknownPartition)
		snap := s.Snapshot()
		require.Len(t, snap.Partitions, 2)
		assert.Equal(t, PartitionStatus{Name: "a", Weight: 2, Queued: 1}, snap.Partitions[0])
		assert.Equal(t, "c", snap.Partitions[1].Name)
		_, err := s.Admit(context.Background(), Request{ID: "x", Partition: "b"})
		assert.ErrorIs(t, err, ErrUnknownPartition)

		n, err := testutil.GatherAndCount(reg, "kvgate_partition_inflight")
		require.NoError(t, err)
		assert.Equal(t, 2, n, "b's series are gone, c's exist")

		running.Release(OutcomeSuccess, 10) // a credit of a removed partition still releases
		require.Len(t, got.credits, 1, "and its slot goes to a's waiting request")
		got.credits[0].Release(OutcomeSuccess, 0)
		assertIdle(t, s)
	})

	t.Run("leaving enforce lets every waiting request through", func(t *testing.T) {
		cfg := twoPartitions(ModeEnforce, 1, 1)
		cfg.QueueTimeout = time.Hour
		s, _ := newScheduler(t, cfg, newSlots(0), nil)
		var got collector
		for range 5 {
			s.Submit(Request{ID: "q", Partition: "b"}, got.done)
		}
		cfg.Mode = ModeShadow
		require.NoError(t, s.Reconfigure(cfg))
		assert.Len(t, got.credits, 5)
		for _, c := range got.credits {
			c.Release(OutcomeSuccess, 0)
		}
		assertIdle(t, s)
	})
}

package routing

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replicaRouters are n gateway replicas' routers: each its own cache_aware
// policy and index, all over the same workers.
func replicaRouters(t *testing.T, n int, hashed bool) []*Router {
	t.Helper()
	cfg := DefaultPolicyConfig()
	cfg.HashedColdPlacement = hashed
	out := make([]*Router, n)
	for i := range out {
		p := NewCacheAware(cfg, NewIndex(cfg.IndexMaxBlocks, cfg.IndexTTL))
		out[i] = NewRouter(p, Options{MaxAge: 5 * time.Second, Clock: func() time.Time { return epoch },
			Rand: rand.New(rand.NewPCG(uint64(i)+1, 7))})
	}
	return out
}

// agreement routes distinct cold prompts through two replicas and counts
// the prompts both send to the same worker.
func agreement(t *testing.T, hashed bool, pool fixedPool) int {
	rs := replicaRouters(t, 2, hashed)
	same := 0
	for i := range 64 {
		p := prompt(uint64(1000+i), 2, 3)
		var got [2]string
		for j, r := range rs {
			d, err := r.Route(&Request{Model: "m", PromptTokens: 100, Prefix: p}, pool)
			require.NoError(t, err)
			require.Equal(t, LabelColdP2C, d.Label)
			got[j] = d.Worker.ID
			d.Done(OutcomeSuccess)
		}
		if got[0] == got[1] {
			same++
		}
	}
	return same
}

// With hashed cold placement, replicas that have never seen a prompt place it
// on the same worker; with random choices they mostly do not.
func TestHashedColdPlacementAgreesAcrossReplicas(t *testing.T) {
	pool := endpoints(8)
	for i := range pool {
		pool[i].Load = Load{Running: 2, MaxRunning: 64, KVUsage: -1, SampledAt: epoch, Complete: true}
	}
	assert.Equal(t, 64, agreement(t, true, pool))
	assert.Less(t, agreement(t, false, pool), 32)
}

// It stays a power of two choices: of its two hashed candidates the less
// loaded takes the prompt.
func TestHashedColdPlacementTakesTheLessLoadedOfItsTwo(t *testing.T) {
	pool := endpoints(8)
	for i := range pool {
		pool[i].Load = Load{Running: 2, MaxRunning: 64, KVUsage: -1, SampledAt: epoch, Complete: true}
	}
	p := prompt(42, 2, 3)
	first := replicaRouters(t, 1, true)[0]
	d, err := first.Route(&Request{Model: "m", PromptTokens: 100, Prefix: p}, pool)
	require.NoError(t, err)
	d.Done(OutcomeSuccess)
	chosen := d.Worker.ID

	// The same prompt, new to another replica, once its first choice is busy.
	for i := range pool {
		if pool[i].ID == chosen {
			pool[i].Load.Running, pool[i].Load.Waiting = 60, 20
		}
	}
	other := replicaRouters(t, 1, true)[0]
	d2, err := other.Route(&Request{Model: "m", PromptTokens: 100, Prefix: p}, pool)
	require.NoError(t, err)
	d2.Done(OutcomeSuccess)
	assert.NotEqual(t, chosen, d2.Worker.ID)

	// And a third replica that sees the same load agrees with the second.
	third := replicaRouters(t, 1, true)[0]
	d3, err := third.Route(&Request{Model: "m", PromptTokens: 100, Prefix: p}, pool)
	require.NoError(t, err)
	d3.Done(OutcomeSuccess)
	assert.Equal(t, d2.Worker.ID, d3.Worker.ID)
}

package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const seedingYAML = `
routing:
  max_cached_owners_per_prefix: 1
admission:
  mode: enforce
  default_partition: hot
  partitions:
    - name: hot
      api_keys: [hot-key]
  seeding:
    enabled: true
    partitions: [hot]
`

// postAs sends one chat request with an API key and reports where it went.
func (f *fleet) postAs(t *testing.T, key, system, user string, stream bool) routed {
	t.Helper()
	body := fmt.Sprintf(`{"model":"sim","max_tokens":4,"stream":%v,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`,
		stream, system, user)
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, 200, resp.StatusCode, string(b))
	return routed{worker: resp.Header.Get("X-Kvgate-Worker"), decision: resp.Header.Get("X-Kvgate-Decision")}
}

// Seed 000 end to end: A owns the prefix and is forced full; one admitted,
// non-streaming request seeds B; streams never seed; after the seed's
// success B is an owner that ordinary requests reach. Observed only through
// HTTP responses and /metrics.
func TestSeedingEndToEnd(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 2, timeScale: 0, yaml: seedingYAML})
	system := strings.Repeat("The shared prompt of the incident. ", 200)
	// Seeding fails closed without telemetry: wait until both workers reported.
	require.Eventually(t, func() bool {
		m := f.metrics(t)
		return strings.Contains(m, `kvgate_worker_telemetry_age_seconds{worker="w0"}`) &&
			strings.Contains(m, `kvgate_worker_telemetry_age_seconds{worker="w1"}`)
	}, 5*time.Second, 10*time.Millisecond)

	owner := f.postAs(t, "hot-key", system, "first", false).worker
	other := "w0"
	if owner == "w0" {
		other = "w1"
	}
	resp, err := http.Post(f.simURL[f.simIndex(owner)]+"/sim/load", "application/json", strings.NewReader(`{"running":8,"waiting":30}`))
	require.NoError(t, err)
	resp.Body.Close()

	var r routed
	require.Eventually(t, func() bool {
		r = f.postAs(t, "hot-key", system, "a stream while A is full", true)
		return r.decision != "owner_hit"
	}, 5*time.Second, 20*time.Millisecond, "the gateway sees A full")
	assert.Equal(t, "seed_rejected_streaming", r.decision, "streams never seed")
	assert.Equal(t, owner, r.worker, "and keep their ordinary behaviour: held on the owner")

	seed := f.postAs(t, "hot-key", system, "the seed", false)
	assert.Equal(t, "seed_dispatch", seed.decision)
	assert.Equal(t, other, seed.worker, "the clean peer")

	after := f.postAs(t, "hot-key", system, "after the seed committed", false)
	assert.Equal(t, "owner_hit", after.decision)
	assert.Equal(t, other, after.worker, "the committed peer takes ordinary traffic")

	m := f.metrics(t)
	for _, series := range []string{
		`kvgate_routing_decisions_total{decision="seed_dispatch",model="sim"} 1`,
		`kvgate_routing_decisions_total{decision="seed_committed",model="sim"} 1`,
		`kvgate_seeds_inflight{partition="hot"} 0`,
	} {
		assert.True(t, strings.Contains(m, series), "/metrics has %s", series)
	}
	assert.Equal(t, 0.0, metricSum(m, "kvgate_partition_inflight"))
}

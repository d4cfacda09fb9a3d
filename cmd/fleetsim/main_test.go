package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvgate/kvgate/routing"
)

// simulate runs policies on goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTrace = "testdata/trace.jsonl"

func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), args, &out))
	return out.String()
}

func TestRunReplaysATraceEndToEnd(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	plotPath := filepath.Join(dir, "ttft.svg")
	out := runCLI(t, "--trace", testTrace, "--policies", "round_robin,least_load", "--workers", "3",
		"--json", jsonPath, "--plot", plotPath)

	assert.Contains(t, out, "trace:trace.jsonl")
	assert.Contains(t, out, "round_robin")
	assert.Contains(t, out, "least_load")

	var rep report
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.Equal(t, "trace:trace.jsonl", rep.Workload)
	assert.Equal(t, 3, rep.Workers)
	assert.Equal(t, 48, rep.Requests)
	assert.Equal(t, traceBlockTokens, rep.Engine.BlockTokens)
	require.Len(t, rep.Results, 2)
	for i, name := range []string{"round_robin", "least_load"} {
		r := rep.Results[i]
		assert.Equal(t, name, r.Policy)
		assert.Equal(t, 48, r.Completed)
		assert.Zero(t, r.Rejected)
		assert.Equal(t, map[string]int{name: 48}, r.Decisions)
		assert.Greater(t, r.HitRate, 0.0, "the trace repeats prefixes")
		assert.Greater(t, r.TTFTP50, 0.0)
		assert.LessOrEqual(t, r.TTFTP50, r.TTFTP90)
		assert.LessOrEqual(t, r.TTFTP90, r.TTFTP99)
		assert.LessOrEqual(t, r.TTFTP99, r.E2EP99)
		assert.Greater(t, r.ThroughputTokensPerS, 0.0)
	}

	svg, err := os.ReadFile(plotPath)
	require.NoError(t, err)
	assertWellFormedXML(t, svg)
	assert.Contains(t, string(svg), ">round_robin</text>")
	assert.Contains(t, string(svg), ">least_load</text>")
}

func TestRunCoversEveryPolicyByDefault(t *testing.T) {
	out := runCLI(t, "--trace", testTrace, "--workers", "2")
	for _, name := range append(routing.PolicyNames, routing.SeedingVariant) {
		assert.Contains(t, out, name, "a default run runs every policy, or says it skipped it")
	}
}

func TestJSONCarriesEverySchemaField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	runCLI(t, "--workload", "hot-prefix", "--requests", "200", "--policies", "round_robin", "--json", path)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	for _, k := range []string{"workload", "workers", "requests", "seed", "engine", "admission", "results"} {
		assert.Contains(t, doc, k)
	}
	assert.Equal(t, "hot-prefix", doc["workload"])
	assert.EqualValues(t, 8, doc["workers"])
	results, ok := doc["results"].([]any)
	require.True(t, ok)
	require.Len(t, results, 1)
	res := results[0].(map[string]any)
	for _, k := range []string{"policy", "hit_rate", "ttft_p50", "ttft_p90", "ttft_p99", "e2e_p50", "e2e_p99",
		"throughput_tokens_per_s", "max_waiting", "imbalance", "completed", "rejected", "decisions", "partitions"} {
		assert.Contains(t, res, k)
	}
	assert.IsType(t, map[string]any{}, res["decisions"])
	parts, ok := res["partitions"].([]any)
	require.True(t, ok)
	require.Len(t, parts, 1, "one partition, \"default\", without --partitions")
	part := parts[0].(map[string]any)
	for _, k := range []string{"name", "weight", "served_tokens", "served_share", "ttft_p99", "completed", "rejected"} {
		assert.Contains(t, part, k)
	}
	assert.Equal(t, "default", part["name"])
	assert.EqualValues(t, 1, part["served_share"])
}

func TestSameSeedGivesIdenticalJSON(t *testing.T) {
	for _, w := range []string{"chat-sessions", "hot-prefix", "agentic", "mixed", "incident", "two-tenants"} {
		t.Run(w, func(t *testing.T) {
			dir := t.TempDir()
			read := func(name string, seed string) []byte {
				path := filepath.Join(dir, name)
				// Enforcing admission with short queues and a timeout: its
				// queue and its virtual timers are part of every run.
				runCLI(t, "--workload", w, "--requests", "600", "--seed", seed, "--workers", "2",
					"--admission", "enforce", "--max-queue", "8", "--queue-timeout", "2s",
					"--policies", "round_robin,random,least_load,cache_aware+seeding", "--json", path)
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				return b
			}
			a, b := read("a.json", "7"), read("b.json", "7")
			assert.Equal(t, string(a), string(b))
			assert.NotEqual(t, string(a), string(read("c.json", "8")), "a different seed is a different run")
		})
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no input", nil, "exactly one of --trace or --workload"},
		{"both inputs", []string{"--trace", testTrace, "--workload", "agentic"}, "exactly one"},
		{"unknown workload", []string{"--workload", "nope"}, `unknown workload "nope"`},
		{"unknown policy", []string{"--workload", "agentic", "--policies", "nope"}, "nope"},
		{"duplicate policy", []string{"--workload", "agentic", "--policies", "random,random"}, "twice"},
		{"generator flag with trace", []string{"--trace", testTrace, "--rate", "3"}, "--rate shapes generated workloads"},
		{"trace flag without trace", []string{"--workload", "agentic", "--trace-limit", "3"}, "--trace-limit applies only"},
		{"trace block size", []string{"--trace", testTrace, "--block-tokens", "100"}, "must divide"},
		{"no workers", []string{"--workload", "agentic", "--workers", "0"}, "--workers"},
		{"no time", []string{"--workload", "agentic", "--time-scale", "0"}, "--time-scale"},
		{"engine config", []string{"--workload", "agentic", "--max-running", "0"}, "max running"},
		{"stray argument", []string{"--workload", "agentic", "extra"}, "unexpected arguments"},
		{"admission mode", []string{"--workload", "agentic", "--admission", "strict"}, "--admission"},
		{"queue limit", []string{"--workload", "agentic", "--max-queue", "-1"}, "--max-queue"},
		{"partition weight", []string{"--workload", "agentic", "--partitions", "a:0"}, "weight must be a finite number > 0"},
		{"partition twice", []string{"--workload", "agentic", "--partitions", "a,a:2"}, "names a twice"},
		{"partition rule", []string{"--workload", "agentic", "--partitions", "a,b", "--partition-by", "user"}, "--partition-by"},
		{"workload partition unnamed", []string{"--workload", "incident", "--partitions", "hot:2,bg1"}, `partition "bg2"`},
		{"no replicas", []string{"--workload", "agentic", "--replicas", "0"}, "--replicas"},
		{"cold placement", []string{"--workload", "agentic", "--cold-placement", "sticky"}, "--cold-placement"},
		{"replicas with admission", []string{"--workload", "incident", "--replicas", "2"}, "--replicas 2 needs --admission off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tt.args, &out)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestHelpPrintsUsage(t *testing.T) {
	out := runCLI(t, "--help")
	assert.Contains(t, out, "--telemetry-interval")
	assert.Contains(t, out, "hot-prefix")
}

func TestRunStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := run(ctx, []string{"--workload", "agentic", "--requests", "500", "--policies", "round_robin"}, &bytes.Buffer{})
	assert.ErrorIs(t, err, context.Canceled)
}

func assertWellFormedXML(t *testing.T, b []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err != nil {
			require.Equal(t, "EOF", strings.TrimSpace(err.Error()), "SVG is not well-formed XML")
			return
		}
	}
}

// A trace split into tenants reports each one.
func TestTracePartitionsAreReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	out := runCLI(t, "--trace", testTrace, "--workers", "2", "--policies", "least_load",
		"--partitions", "gold:3,free:1", "--admission", "enforce", "--json", path)
	assert.Contains(t, out, "partitions (admission enforce)")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var rep report
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Results, 1)
	parts := rep.Results[0].Partitions
	require.Len(t, parts, 2)
	assert.Equal(t, []string{"gold", "free"}, []string{parts[0].Name, parts[1].Name})
	assert.Equal(t, rep.Results[0].Completed, parts[0].Completed+parts[1].Completed)
	assert.Equal(t, "enforce", rep.Admission.Mode)
}

// TestColdPrefixCoalescingSetsTheHotPrefixQueueFloor pins what docs/routing.md
// says of hot-prefix's max waiting: in the first second the first worker to
// take the 8k prompt prefills it cold for one long step, and both
// prefix-affine policies send every hot request of that step to it, so they
// share one max waiting; a policy that spreads a cold prefix stays far below.
func TestColdPrefixCoalescingSetsTheHotPrefixQueueFloor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.json")
	runCLI(t, "--workload", "hot-prefix", "--duration", "1s", "--seed", "1",
		"--policies", "cache_aware,sglang_cache_aware,round_robin", "--json", path)
	var rep report
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Results, 3)
	ca, sg, rr := rep.Results[0], rep.Results[1], rep.Results[2]
	assert.Equal(t, sg.MaxWaiting, ca.MaxWaiting, "both coalesce the cold prefix on its first owner")
	assert.GreaterOrEqual(t, ca.MaxWaiting, 15, "a 0.44 s cold step at 48 hot requests/s")
	assert.LessOrEqual(t, 3*rr.MaxWaiting, ca.MaxWaiting, "spreading the cold prefix avoids the queue: round_robin %d", rr.MaxWaiting)
	assert.Less(t, rr.HitRate, ca.HitRate, "and pays for it in recomputed prompts")
}

// Gateway replicas each learn their own index: a prompt's repeats reach
// replicas that have not seen it, so an affinity policy recomputes more of
// them, while a stateless hash places them alike whatever the replica.
func TestReplicasEachKeepTheirOwnIndex(t *testing.T) {
	hit := func(replicas string) map[string]float64 {
		path := filepath.Join(t.TempDir(), "out.json")
		runCLI(t, "--trace", testTrace, "--workers", "3", "--replicas", replicas,
			"--policies", "sglang_cache_aware,prefix_hash", "--json", path)
		var rep report
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &rep))
		assert.Equal(t, 48, rep.Results[0].Completed)
		out := map[string]float64{}
		for _, r := range rep.Results {
			out[r.Policy] = r.HitRate
		}
		return out
	}
	one, four := hit("1"), hit("4")
	assert.Less(t, four["sglang_cache_aware"], one["sglang_cache_aware"], "separate indexes lose affinity")
	assert.InDelta(t, one["prefix_hash"], four["prefix_hash"], 0.05, "a stateless hash does not care")
}

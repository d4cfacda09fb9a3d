package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/kvgate/kvgate/sim/simserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlags(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, o options)
		fails bool
	}{
		{"defaults", nil, func(t *testing.T, o options) {
			assert.Equal(t, "127.0.0.1:9001", o.listen)
			assert.Equal(t, simserver.DefaultConfig(), o.server)
		}, false},
		{"models repeated and as a list", []string{"--model", "a,b", "--model", "c"}, func(t *testing.T, o options) {
			assert.Equal(t, []string{"a", "b", "c"}, o.server.Models)
		}, false},
		{"engine and faults", []string{
			"--max-running", "8", "--kv-capacity-tokens", "4096", "--block-tokens", "32",
			"--prefill-tokens-per-sec", "1000", "--decode-step-base", "5ms", "--decode-step-per-request", "1ms",
			"--seed", "9", "--time-scale", "0", "--error-rate", "0.5", "--force-status", "503",
			"--slow-first-token", "1s", "--die-after-tokens", "3", "--hang", "--fail-health",
		}, func(t *testing.T, o options) {
			e := o.server.Engine
			assert.Equal(t, 8, e.MaxRunning)
			assert.Equal(t, 4096, e.KVCapacityTokens)
			assert.Equal(t, 32, e.BlockTokens)
			assert.Equal(t, 1000.0, e.PrefillTokensPerSec)
			assert.Equal(t, 5*time.Millisecond, e.DecodeStepBase)
			assert.Equal(t, time.Millisecond, e.DecodeStepPerRequest)
			assert.Equal(t, uint64(9), o.server.Seed)
			assert.Zero(t, o.server.TimeScale)
			assert.Equal(t, simserver.Faults{
				ErrorRate: 0.5, ForceStatus: 503, SlowFirstToken: time.Second, DieAfterTokens: 3, Hang: true, FailHealth: true,
			}, o.server.Faults)
		}, false},
		{"an invalid value", []string{"--error-rate", "3"}, nil, true},
		{"an unknown flag", []string{"--nope"}, nil, true},
		{"a stray argument", []string{"serve"}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if tc.fails {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			tc.check(t, o)
		})
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--time-scale", "0", "--model", "m"}, io.Discard, started)
	}()
	var addr string
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("run ended early: %v", err)
	}

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("http://"+addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"hello","max_tokens":2}`))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("no shutdown")
	}
}

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/routing"
)

func TestPrintConfigShowsTheEffectiveConfig(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), []string{"--config", "../../examples/minimal.yaml", "--print-config", "--routing.policy", "random"},
		[]string{"KVGATE_TELEMETRY__INTERVAL=2s"}, &out, io.Discard, nil)
	require.NoError(t, err)
	s := out.String()
	assert.Contains(t, s, "policy: random", "flag")
	assert.Contains(t, s, "interval: 2s", "environment")
	assert.Contains(t, s, "url: http://127.0.0.1:9001", "file")

	// The printed config is itself a valid config file.
	file := filepath.Join(t.TempDir(), "printed.yaml")
	require.NoError(t, os.WriteFile(file, out.Bytes(), 0o600))
	var again bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"--config", file, "--print-config"}, nil, &again, io.Discard, nil))
	assert.Equal(t, s, again.String())
}

func TestConfigReferenceFlag(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"--config-reference"}, nil, &out, io.Discard, nil))
	assert.Equal(t, config.Reference(), out.String())
}

func TestBadConfigIsAValidationError(t *testing.T) {
	err := run(t.Context(), []string{"--config", "../../examples/invalid/bad-worker.yaml"}, nil, io.Discard, io.Discard, nil)
	require.Error(t, err)
	assert.True(t, config.IsValidation(err))
	assert.Contains(t, err.Error(), "workers[0].url")
}

func TestNoWorkersIsAUsageError(t *testing.T) {
	err := run(t.Context(), nil, nil, io.Discard, io.Discard, nil)
	require.ErrorIs(t, err, errUsage)
	assert.Contains(t, err.Error(), "--demo")
}

func TestDemoServesRequests(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan string, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--demo", "--listen", "127.0.0.1:0", "--demo-workers", "2"}, nil, &out, io.Discard, started)
	}()
	addr := <-started
	assert.Contains(t, out.String(), "curl -s http://"+addr+"/v1/chat/completions")
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, 5*time.Second, 10*time.Millisecond)
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim","messages":[{"role":"user","content":"Hello!"}],"max_tokens":4}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, string(body))
	assert.Contains(t, string(body), `"completion_tokens":4`)
	cancel()
	require.NoError(t, <-done)
}

// The config accepts exactly the policies the routing package builds.
func TestConfigPoliciesMatchRouting(t *testing.T) {
	assert.Equal(t, routing.PolicyNames, config.Policies)
	for _, name := range config.Policies {
		_, err := routing.NewPolicy(name, routing.DefaultPolicyConfig())
		assert.NoError(t, err, name)
	}
}

// The routing section's defaults are the policies' defaults: one place
// (config) documents them, and this keeps routing's own in step.
func TestRoutingDefaultsMatch(t *testing.T) {
	assert.Equal(t, routing.DefaultPolicyConfig(), policyConfig(config.Default()))
}

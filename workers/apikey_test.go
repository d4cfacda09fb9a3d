package workers

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedEngine is a vLLM-like worker started with --api-key: every path
// answers 401 without "Authorization: Bearer KEY". It records the paths it
// saw authorized.
type lockedEngine struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]int
}

func newLockedEngine(t *testing.T, key string) *lockedEngine {
	e := &lockedEngine{seen: map[string]int{}}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		e.mu.Lock()
		e.seen[r.URL.Path]++
		e.mu.Unlock()
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		case "/metrics":
			_, _ = io.WriteString(w, "vllm:num_requests_running 3\nvllm:num_requests_waiting 1\nvllm:kv_cache_usage_perc 0.5\n")
		case "/v1/chat/completions":
			_, _ = io.WriteString(w, `{"id":"x"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *lockedEngine) saw(path string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[path]
}

// A worker's API key goes on every request to it: health checks, the model
// list, telemetry and completions. Without it the worker never turns healthy.
func TestWorkerAPIKeyIsSentOnEveryRequest(t *testing.T) {
	e := newLockedEngine(t, "engine-key")
	r := NewRegistry(Options{
		HealthInterval: 10 * time.Millisecond, HealthTimeout: time.Second, HealthPath: "/health",
		UnhealthyThreshold: 1, HealthyThreshold: 1, TelemetryInterval: 10 * time.Millisecond, TelemetryTimeout: time.Second,
	})
	t.Cleanup(r.Close)
	locked, err := r.Add(Spec{ID: "keyed", URL: e.URL, Engine: EngineVLLM, APIKey: "engine-key"})
	require.NoError(t, err)
	without, err := r.Add(Spec{ID: "keyless", URL: e.URL, Engine: EngineVLLM})
	require.NoError(t, err)

	require.Eventually(t, func() bool { return locked.Routable(time.Now()) }, 2*time.Second, 5*time.Millisecond)
	assert.Equal(t, []string{"m"}, locked.Models(), "models learned with the key")
	require.Eventually(t, func() bool { s, ok := locked.Sample(); return ok && s.Running == 3 }, 2*time.Second, 5*time.Millisecond,
		"telemetry read with the key")

	req, err := locked.NewRequest(context.Background(), "/v1/chat/completions", []byte(`{}`))
	require.NoError(t, err)
	assert.Equal(t, "Bearer engine-key", req.Header.Get("Authorization"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	assert.False(t, without.Routable(time.Now()), "a worker without the key never passes a check")
	req, err = without.NewRequest(context.Background(), "/v1/chat/completions", []byte(`{}`))
	require.NoError(t, err)
	assert.Empty(t, req.Header.Get("Authorization"))
	for _, path := range []string{"/health", "/v1/models", "/metrics", "/v1/chat/completions"} {
		assert.Positive(t, e.saw(path), "%s reached with the key", path)
	}
}

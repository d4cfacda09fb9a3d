package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An engine started with --api-key: it answers only requests that carry
// its key, and records what Authorization each completion came with.
func startKeyedEngine(t *testing.T, key string) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var auths []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		case "/v1/chat/completions":
			mu.Lock()
			auths = append(auths, r.Header.Get("Authorization"))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), auths...) }
}

// workers[].api_key reaches the engine on every request, in place of the
// client's own key, which selects the client's partition and never leaves
// the gateway; a worker added through the admin API takes a key too, and
// no answer shows it.
func TestWorkerAPIKeysThroughTheGateway(t *testing.T) {
	engine, auths := startKeyedEngine(t, "engine-key-1")
	other, otherAuths := startKeyedEngine(t, "engine-key-2")
	g := startReloadGateway(t, reloadBase+"workers:\n"+workerYAML("w0", engine.URL, "m", "    api_key: engine-key-1\n")+`admission:
  partitions:
    - {name: team, api_keys: [client-key]}
  default_partition: team
`)
	require.Eventually(t, func() bool { return g.routable(t, "w0") }, 5*time.Second, 5*time.Millisecond)
	status, body := g.chat(t, "m", "client-key")
	require.Equal(t, 200, status, body)
	assert.Equal(t, []string{"Bearer engine-key-1"}, auths(), "the engine sees its key, never the client's")

	// The admin API: the key is taken, and write-only.
	req, err := http.NewRequest("POST", g.url+"/admin/workers",
		strings.NewReader(`{"id":"w1","url":"`+other.URL+`","models":["m"],"api_key":"engine-key-2"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	added, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode, string(added))
	assert.NotContains(t, string(added), "engine-key-2")
	require.Eventually(t, func() bool { return g.routable(t, "w1") }, 5*time.Second, 5*time.Millisecond, "healthy with its key")
	for range 6 {
		status, body := g.chat(t, "m", "client-key")
		require.Equal(t, 200, status, body)
	}
	assert.NotEmpty(t, otherAuths(), "the added worker served requests")
	for _, a := range otherAuths() {
		assert.Equal(t, "Bearer engine-key-2", a)
	}
	list, err := http.Get(g.url + "/admin/workers")
	require.NoError(t, err)
	listed, _ := io.ReadAll(list.Body)
	list.Body.Close()
	assert.NotContains(t, string(listed), "engine-key")
	require.Eventually(t, func() bool { return strings.Contains(g.logText(), "admin: worker added") }, 5*time.Second, 10*time.Millisecond,
		"the log holds the add (flushed)")
	assert.NotContains(t, g.logText(), "engine-key", "keys are never logged")
}

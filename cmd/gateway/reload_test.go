package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/config"
)

// member is an engine on 127.0.0.1 serving one model; with hold set, its
// completions wait until hold is closed.
type member struct {
	*httptest.Server
	hits    atomic.Int32
	hold    chan struct{}
	started chan struct{}
}

func startMember(t *testing.T, model string, hold bool) *member {
	m := &member{started: make(chan struct{}, 16)}
	if hold {
		m.hold = make(chan struct{})
	}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"`+model+`"}]}`)
		case "/v1/chat/completions":
			_, _ = io.Copy(io.Discard, r.Body)
			m.hits.Add(1)
			m.started <- struct{}{}
			if m.hold != nil {
				select {
				case <-m.hold:
				case <-r.Context().Done():
					return
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(m.Close)
	return m
}

// reloadGateway is a gateway started by runGateway from a config file the
// test rewrites, with reloads sent by the test instead of SIGHUP.
type reloadGateway struct {
	url     string
	file    string
	logs    *syncBuffer
	reloads chan reloadRequest
}

const reloadBase = `listen: 127.0.0.1:0
shutdown_grace: 2s
health:
  interval: 20ms
  timeout: 1s
  unhealthy_threshold: 1
telemetry:
  interval: 1s
retry:
  backoff_base: 1ms
  backoff_max: 2ms
log:
  level: info
`

func workerYAML(id, url, model string, extra string) string {
	return fmt.Sprintf("  - id: %s\n    url: %s\n    models: [%s]\n    engine: vllm\n%s", id, url, model, extra)
}

func startReloadGateway(t *testing.T, conf string, args ...string) *reloadGateway {
	t.Helper()
	g := &reloadGateway{file: filepath.Join(t.TempDir(), "kvgate.yaml"), logs: &syncBuffer{}, reloads: make(chan reloadRequest)}
	g.write(t, conf)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, append([]string{"--config", g.file}, args...), nil, io.Discard, g.logs, started, g.reloads)
	}()
	select {
	case addr := <-started:
		g.url = "http://" + addr
	case err := <-done:
		cancel()
		t.Fatalf("gateway did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return g
}

func (g *reloadGateway) write(t *testing.T, conf string) {
	t.Helper()
	require.NoError(t, os.WriteFile(g.file, []byte(conf), 0o600))
}

func (g *reloadGateway) reload(t *testing.T) error {
	t.Helper()
	done := make(chan error, 1)
	g.reloads <- reloadRequest{done: done}
	return <-done
}

// view is one worker as GET /admin/workers/{id} shows it (the listener is
// loopback, so the admin API needs no token).
type view struct {
	Healthy    bool   `json:"healthy"`
	Routable   bool   `json:"routable"`
	Draining   bool   `json:"draining"`
	Removing   bool   `json:"removing"`
	Inflight   int    `json:"inflight"`
	Origin     string `json:"origin"`
	MaxRunning int    `json:"max_running"`
	URL        string `json:"url"`
	Generation uint64 `json:"generation"`
	Revision   uint64 `json:"revision"`
}

func (g *reloadGateway) worker(t *testing.T, id string) (view, int) {
	t.Helper()
	resp, err := http.Get(g.url + "/admin/workers/" + id)
	require.NoError(t, err)
	defer resp.Body.Close()
	var v view
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	}
	return v, resp.StatusCode
}

func (g *reloadGateway) routable(t *testing.T, id string) bool {
	v, status := g.worker(t, id)
	return status == 200 && v.Routable
}

func (g *reloadGateway) chat(t *testing.T, model, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", g.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (g *reloadGateway) logText() string {
	s, _ := g.logs.snapshot()
	return s
}

// A good reload: an added worker becomes routable after its health check, a
// removed one is drained (its request in flight finishes) and then removed,
// a changed max_running is applied in place, a changed URL replaces the
// worker with a new generation.
func TestReloadReconcilesTheWorkers(t *testing.T) {
	keep, slow, added, moved := startMember(t, "m", false), startMember(t, "slow", true), startMember(t, "m", false), startMember(t, "m", false)
	g := startReloadGateway(t, reloadBase+"workers:\n"+workerYAML("keep", keep.URL, "m", "")+workerYAML("slow", slow.URL, "slow", ""),
		"--routing.policy", "round_robin") // the same prompt each time, shared out
	require.Eventually(t, func() bool { return g.routable(t, "keep") && g.routable(t, "slow") }, 5*time.Second, 5*time.Millisecond)
	before, _ := g.worker(t, "keep")
	assert.Equal(t, "config", before.Origin)

	type result struct {
		status int
		body   string
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := http.Post(g.url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"slow","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			inflight <- result{-1, err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		inflight <- result{resp.StatusCode, string(b)}
	}()
	<-slow.started

	g.write(t, reloadBase+"workers:\n"+workerYAML("keep", keep.URL, "m", "    max_running: 12\n")+workerYAML("added", added.URL, "m", ""))
	require.NoError(t, g.reload(t))

	v, status := g.worker(t, "slow")
	require.Equal(t, 200, status, "listed while its request runs")
	assert.True(t, v.Draining)
	assert.True(t, v.Removing)
	assert.Equal(t, 1, v.Inflight)
	status, body := g.chat(t, "slow", "")
	assert.Equal(t, http.StatusServiceUnavailable, status, "no new request reaches a draining worker: %s", body)

	require.Eventually(t, func() bool { return g.routable(t, "added") }, 5*time.Second, 5*time.Millisecond)
	v, _ = g.worker(t, "added")
	assert.Equal(t, "config", v.Origin)
	after, _ := g.worker(t, "keep")
	assert.Equal(t, 12, after.MaxRunning)
	assert.Equal(t, before.Generation, after.Generation, "an update in place keeps the generation (and the cache)")
	assert.Equal(t, before.Revision+1, after.Revision)

	for range 4 {
		status, body := g.chat(t, "m", "")
		require.Equal(t, 200, status, body)
	}
	keepHits := keep.hits.Load()
	require.NotZero(t, keepHits)

	close(slow.hold)
	r := <-inflight
	assert.Equal(t, 200, r.status, "the drained worker's request finished: %s", r.body)
	require.Eventually(t, func() bool { _, status := g.worker(t, "slow"); return status == 404 }, 5*time.Second, 5*time.Millisecond)

	g.write(t, reloadBase+"workers:\n"+workerYAML("keep", moved.URL, "m", "    max_running: 12\n")+workerYAML("added", added.URL, "m", ""))
	require.NoError(t, g.reload(t))
	require.Eventually(t, func() bool { return g.routable(t, "keep") }, 5*time.Second, 5*time.Millisecond)
	replaced, _ := g.worker(t, "keep")
	assert.Equal(t, moved.URL, replaced.URL)
	assert.Greater(t, replaced.Generation, after.Generation, "a new URL is a new incarnation")

	for range 4 {
		status, body := g.chat(t, "m", "")
		require.Equal(t, 200, status, body)
	}
	assert.Equal(t, keepHits, keep.hits.Load(), "the old URL takes nothing after the reload")
	assert.NotZero(t, moved.hits.Load(), "the new one does")
	require.Eventually(t, func() bool { return strings.Contains(g.logText(), `"msg":"config reloaded"`) }, 5*time.Second, 10*time.Millisecond)
}

// A bad file keeps the running config, and the log says which key is wrong.
// Keys a reload cannot apply are logged as needing a restart.
func TestBadReloadKeepsTheRunningConfig(t *testing.T) {
	w := startMember(t, "m", false)
	good := reloadBase + "workers:\n" + workerYAML("w0", w.URL, "m", "")
	g := startReloadGateway(t, good)
	require.Eventually(t, func() bool { return g.routable(t, "w0") }, 5*time.Second, 5*time.Millisecond)

	g.write(t, reloadBase+"workers:\n"+workerYAML("w0", "ftp://nowhere", "m", "")+workerYAML("w1", w.URL, "m", "")+"routing:\n  polcy: random\n")
	err := g.reload(t)
	require.Error(t, err)
	assert.True(t, config.IsValidation(err))
	assert.Contains(t, err.Error(), "routing.polcy")
	g.write(t, reloadBase+"workers:\n"+workerYAML("w0", "ftp://nowhere", "m", "")+workerYAML("w1", w.URL, "m", ""))
	err = g.reload(t)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "workers[0].url")
	g.write(t, "workers: [\n")
	require.Error(t, g.reload(t), "not YAML")

	v, status := g.worker(t, "w0")
	require.Equal(t, 200, status)
	assert.True(t, v.Routable, "the running worker is untouched")
	_, status = g.worker(t, "w1")
	assert.Equal(t, 404, status, "nothing of a bad file is applied")
	require.Eventually(t, func() bool {
		logs := g.logText()
		return strings.Contains(logs, "config reload failed; keeping the running config") && strings.Contains(logs, "workers[0].url")
	}, 5*time.Second, 10*time.Millisecond, "the log names the bad key")

	g.write(t, strings.Replace(good, "interval: 20ms", "interval: 30ms", 1)+"routing:\n  policy: random\n")
	require.NoError(t, g.reload(t))
	require.Eventually(t, func() bool {
		logs := g.logText()
		return strings.Contains(logs, "need a restart") && strings.Contains(logs, `"routing.policy"`) && strings.Contains(logs, `"health.interval"`)
	}, 5*time.Second, 10*time.Millisecond)
}

// Partitions, weights and keys follow a reload: the resolver is swapped and
// the scheduler reconfigured (a key of a new partition is served, which
// needs both).
func TestReloadSwapsPartitions(t *testing.T) {
	w := startMember(t, "m", false)
	tenants := func(parts string) string {
		return reloadBase + "workers:\n" + workerYAML("w0", w.URL, "m", "    max_running: 8\n") + `admission:
  mode: enforce
  default_partition: a
  partitions:
` + parts
	}
	g := startReloadGateway(t, tenants("    - {name: a, api_keys: [key-a]}\n"))
	require.Eventually(t, func() bool { return g.routable(t, "w0") }, 5*time.Second, 5*time.Millisecond)
	status, body := g.chat(t, "m", "key-a")
	require.Equal(t, 200, status, body)
	status, _ = g.chat(t, "m", "key-b")
	assert.Equal(t, 401, status)

	g.write(t, tenants("    - {name: a, weight: 2, api_keys: [key-a2]}\n    - {name: b, weight: 3, api_keys: [key-b]}\n"))
	require.NoError(t, g.reload(t))
	status, body = g.chat(t, "m", "key-b")
	assert.Equal(t, 200, status, "the new partition is known to the resolver and the scheduler: %s", body)
	status, _ = g.chat(t, "m", "key-a")
	assert.Equal(t, 401, status, "a key taken out no longer works")
	status, _ = g.chat(t, "m", "key-a2")
	assert.Equal(t, 200, status)
}

// The admin API through the binary's own wiring: validation is the config
// file's, and with a token set every route needs it.
func TestAdminAPIThroughTheGateway(t *testing.T) {
	w := startMember(t, "m", false)
	g := startReloadGateway(t, reloadBase+"workers:\n"+workerYAML("w0", w.URL, "m", "")+"auth:\n  admin_token: 0123456789abcdef-token\n")
	post := func(token, body string) *http.Response {
		req, err := http.NewRequest("POST", g.url+"/admin/workers", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	assert.Equal(t, 401, post("", `{"id":"x","url":"`+w.URL+`"}`).StatusCode, "a token, once set, is needed even on loopback")
	resp := post("0123456789abcdef-token", `{"id":"x","url":"`+w.URL+`","engine":"tensorrt"}`)
	assert.Equal(t, 400, resp.StatusCode)
	var e struct {
		Error struct {
			Param string `json:"param"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	assert.Equal(t, "engine", e.Error.Param)
	assert.Equal(t, 201, post("0123456789abcdef-token", `{"id":"x","url":"`+w.URL+`","models":["m"]}`).StatusCode)

	// A reload leaves workers added through the admin API alone.
	require.NoError(t, g.reload(t))
	time.Sleep(100 * time.Millisecond)
	req, err := http.NewRequest("GET", g.url+"/admin/workers/x", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer 0123456789abcdef-token")
	got, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer got.Body.Close()
	var v view
	require.NoError(t, json.NewDecoder(got.Body).Decode(&v))
	assert.Equal(t, "admin", v.Origin)
	assert.False(t, v.Draining)
	assert.NotContains(t, g.logText(), "0123456789abcdef-token", "the token is never logged")
}

// DNS discovery through the binary's wiring. "localhost" is answered by the
// hosts file, so no query leaves the machine; a discovered worker is routable
// once healthy and its lookups are counted.
func TestDiscoveryThroughTheGateway(t *testing.T) {
	w := startMember(t, "m", false)
	_, port, err := net.SplitHostPort(w.Listener.Addr().String())
	require.NoError(t, err)
	g := startReloadGateway(t, reloadBase+"discovery:\n  dns:\n    name: localhost\n    ip_family: ipv4\n    port: "+port+"\n    interval: 50ms\n")
	id := "127.0.0.1:" + port
	require.Eventually(t, func() bool { return g.routable(t, id) }, 5*time.Second, 5*time.Millisecond)
	v, _ := g.worker(t, id)
	assert.Equal(t, "discovery", v.Origin)
	status, body := g.chat(t, "m", "")
	assert.Equal(t, 200, status, body)

	resp, err := http.Get(g.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	assert.Greater(t, metricSum(string(b), `kvgate_discovery_lookups_total{result="ok"}`), 0.0)
	assert.Contains(t, string(b), "kvgate_workers_draining 0")
}

// A file that is valid by itself can still not fit the running config: a
// reload keeps the keys that need a restart, and the partitions it would
// apply must still hold the running seeding.partitions. Nothing changes.
func TestReloadRefusesKeysThatDoNotFitTheRunningConfig(t *testing.T) {
	w := startMember(t, "m", false)
	conf := func(parts, seeding string) string {
		return reloadBase + "workers:\n" + workerYAML("w0", w.URL, "m", "    max_running: 8\n") + `admission:
  mode: enforce
  default_partition: a
  seeding:
    enabled: true
    partitions: [` + seeding + `]
  partitions:
` + parts
	}
	both := "    - {name: a, api_keys: [key-a]}\n    - {name: b, api_keys: [key-b]}\n"
	g := startReloadGateway(t, conf(both, "b"))
	require.Eventually(t, func() bool { return g.routable(t, "w0") }, 5*time.Second, 5*time.Millisecond)

	// Partition b goes, and the file stops naming it for seeding; but
	// seeding.partitions needs a restart, so the running [b] would stay.
	g.write(t, conf("    - {name: a, api_keys: [key-a]}\n", "a"))
	err := g.reload(t)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "do not fit the running config")
	assert.Contains(t, err.Error(), "admission.seeding.partitions")
	assert.Eventually(t, func() bool { return strings.Contains(g.logText(), "keeping the running config") },
		5*time.Second, 10*time.Millisecond, "the refusal is logged")
	status, body := g.chat(t, "m", "key-b")
	assert.Equal(t, 200, status, "partition b is still there: %s", body)
}

// A request queued in a partition that a reload removes is not refused:
// its API key is resolved again with the new partitions (here the key moved
// to another partition), and it is admitted there.
func TestReloadReResolvesRequestsQueuedInARemovedPartition(t *testing.T) {
	w := startMember(t, "m", true) // completions wait until released
	conf := func(parts string) string {
		return reloadBase + "workers:\n" + workerYAML("w0", w.URL, "m", "    max_running: 1\n") + `admission:
  mode: enforce
  default_partition: a
  queue:
    timeout: 30s
  partitions:
` + parts
	}
	g := startReloadGateway(t, conf("    - {name: a, api_keys: [key-a]}\n    - {name: b, api_keys: [key-b]}\n"))
	require.Eventually(t, func() bool { return g.routable(t, "w0") }, 5*time.Second, 5*time.Millisecond)

	first := make(chan int, 1)
	go func() { s, _ := g.chat(t, "m", "key-a"); first <- s }()
	<-w.started // the fleet's one slot is taken
	queued := make(chan int, 1)
	go func() { s, _ := g.chat(t, "m", "key-b"); queued <- s }()
	require.Eventually(t, func() bool {
		return strings.Contains(g.metricsText(t), `kvgate_admission_queue_depth{partition="b"} 1`)
	}, 5*time.Second, 10*time.Millisecond, "the second request waits in b")

	g.write(t, conf("    - {name: a, api_keys: [key-a]}\n    - {name: c, api_keys: [key-b]}\n"))
	require.NoError(t, g.reload(t))
	close(w.hold)
	assert.Equal(t, 200, <-first)
	assert.Equal(t, 200, <-queued, "re-resolved into c and served, not refused")
}

func (g *reloadGateway) metricsText(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(g.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

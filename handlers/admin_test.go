package handlers

import (
	"bytes"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

const adminToken = "admin-token-0123456789"

// adminHarness is a gateway with the admin API mounted, its registry wired
// to routing as cmd/gateway wires it (drains wait for routed requests,
// removal drops routing state).
type adminHarness struct {
	srv    *httptest.Server
	reg    *workers.Registry
	router *routing.Router
	logs   *lockedWriter
}

func newAdminHarness(t *testing.T, token, listen string) *adminHarness {
	t.Helper()
	transport := workers.NewTransport(workers.TransportOptions{
		DialTimeout: time.Second, ResponseHeaderTimeout: 5 * time.Second, IdleConnsPerWorker: 16, IdleConnTimeout: time.Minute,
	})
	policy, err := routing.NewPolicy("round_robin", routing.DefaultPolicyConfig())
	require.NoError(t, err)
	router := routing.NewRouter(policy, routing.Options{Rand: rand.New(rand.NewPCG(1, 2))})
	reg := workers.NewRegistry(workers.Options{
		Client:         &http.Client{Transport: transport},
		HealthInterval: 20 * time.Millisecond, HealthTimeout: time.Second, HealthPath: "/health",
		UnhealthyThreshold: 1, HealthyThreshold: 1,
		OnRemove: router.RemoveWorker,
		Pending:  func(id string) int { n, _ := router.Reserved(id); return n },
	})
	logs := &lockedWriter{w: new(bytes.Buffer)}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	gw := New(Options{
		Registry: reg, Router: router, Transport: transport, MaxBodyBytes: 1 << 16, MaxAttempts: 2,
		BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, Metrics: prometheus.NewRegistry(), Logger: log,
	})
	gw.Mount("/admin", NewAdmin(AdminOptions{Registry: reg, Token: token, Listen: listen, CheckWorker: configRules, Logger: log}))
	srv := httptest.NewServer(gw)
	t.Cleanup(func() {
		srv.Close()
		reg.Close()
		transport.CloseIdleConnections()
	})
	return &adminHarness{srv: srv, reg: reg, router: router, logs: logs}
}

// configRules is what cmd/gateway passes: the config file's defaults and
// validation of a workers[] entry.
func configRules(e *WorkerEntry) []FieldProblem {
	w := config.Worker{ID: e.ID, URL: e.URL, Models: e.Models, Engine: e.Engine, MaxRunning: e.MaxRunning, DPRanks: e.DPRanks}.WithDefaults()
	e.Engine, e.DPRanks = w.Engine, w.DPRanks
	var out []FieldProblem
	for _, p := range config.ValidateWorker(w) {
		out = append(out, FieldProblem{Path: p.Path, Reason: p.Reason})
	}
	return out
}

func (h *adminHarness) logText() string {
	h.logs.mu.Lock()
	defer h.logs.mu.Unlock()
	return h.logs.w.(*bytes.Buffer).String()
}

func (h *adminHarness) do(t *testing.T, method, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (h *adminHarness) worker(t *testing.T, id string) (workerView, int) {
	t.Helper()
	resp := h.do(t, "GET", "/admin/workers/"+id, "")
	var v workerView
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	}
	return v, resp.StatusCode
}

func (h *adminHarness) chat(t *testing.T) *http.Response {
	t.Helper()
	resp, err := http.Post(h.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (h *adminHarness) addWorker(t *testing.T, id, base string) workerView {
	t.Helper()
	resp := h.do(t, "POST", "/admin/workers", `{"id":"`+id+`","url":"`+base+`","models":["m"],"engine":"vllm"}`)
	body := readAll(t, resp.Body)
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	assert.Equal(t, "/admin/workers/"+url.PathEscape(id), resp.Header.Get("Location"))
	var v workerView
	require.NoError(t, json.Unmarshal([]byte(body), &v))
	return v
}

// switchWorker is an engine whose health check and answers the test controls.
type switchWorker struct {
	*httptest.Server
	healthy atomic.Bool
	hits    atomic.Int32
	hold    chan struct{} // when set, completions wait for it to close
	started chan struct{}
}

func newSwitchWorker(t *testing.T, healthy bool, hold bool) *switchWorker {
	s := &switchWorker{started: make(chan struct{}, 16)}
	s.healthy.Store(healthy)
	if hold {
		s.hold = make(chan struct{})
	}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			if !s.healthy.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		case "/v1/models":
			_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		case "/metrics":
			http.NotFound(w, r)
		default:
			_, _ = io.Copy(io.Discard, r.Body)
			s.hits.Add(1)
			s.started <- struct{}{}
			if s.hold != nil {
				select {
				case <-s.hold:
				case <-r.Context().Done():
					return
				}
			}
			okJSON(w, r, nil)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func TestAdminAuthorization(t *testing.T) {
	tests := []struct {
		name, token, listen, header, path string
		status                            int
		code                              string
	}{
		{"token: right", adminToken, "0.0.0.0:8080", "Bearer " + adminToken, "/admin/workers", 200, ""},
		{"token: scheme in any case", adminToken, "0.0.0.0:8080", "bearer  " + adminToken, "/admin/workers", 200, ""},
		{"token: missing", adminToken, "127.0.0.1:8080", "", "/admin/workers", 401, "invalid_admin_token"},
		{"token: wrong", adminToken, "127.0.0.1:8080", "Bearer " + adminToken + "x", "/admin/workers", 401, "invalid_admin_token"},
		{"token: a prefix of it", adminToken, "127.0.0.1:8080", "Bearer admin", "/admin/workers", 401, "invalid_admin_token"},
		{"token: another scheme", adminToken, "127.0.0.1:8080", "Basic " + adminToken, "/admin/workers", 401, "invalid_admin_token"},
		{"token: unknown admin route still needs it", adminToken, "0.0.0.0:8080", "", "/admin/nothing", 401, "invalid_admin_token"},
		{"token: unknown admin route", adminToken, "0.0.0.0:8080", "Bearer " + adminToken, "/admin/nothing", 404, "unknown_url"},
		{"no token: loopback v4", "", "127.0.0.1:8080", "", "/admin/workers", 200, ""},
		{"no token: loopback v6", "", "[::1]:8080", "", "/admin/workers", 200, ""},
		{"no token: localhost", "", "localhost:8080", "", "/admin/workers", 200, ""},
		{"no token: every interface", "", ":8080", "", "/admin/workers", 403, "admin_disabled"},
		{"no token: a public address", "", "0.0.0.0:8080", "Bearer anything", "/admin/workers", 403, "admin_disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newAdminHarness(t, tt.token, tt.listen)
			req, err := http.NewRequest("GET", h.srv.URL+tt.path, nil)
			require.NoError(t, err)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tt.status, resp.StatusCode)
			if tt.code != "" {
				e := decodeError(t, resp)
				require.NotNil(t, e.Error.Code)
				assert.Equal(t, tt.code, *e.Error.Code)
			}
			assert.NotContains(t, h.logText(), adminToken, "the token is never logged")
		})
	}
}

func TestAdminListShowsEachWorkersState(t *testing.T) {
	h := newAdminHarness(t, adminToken, "0.0.0.0:8080")
	sw := newSwitchWorker(t, true, false)
	h.addWorker(t, "a", sw.URL)
	require.Eventually(t, func() bool { v, _ := h.worker(t, "a"); return v.Routable }, 5*time.Second, 5*time.Millisecond)

	resp := h.do(t, "GET", "/admin/workers", "")
	require.Equal(t, 200, resp.StatusCode)
	var list workerList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	assert.Equal(t, "list", list.Object)
	require.Len(t, list.Data, 1)
	assert.Equal(t, workerView{ID: "a", URL: sw.URL, Origin: workers.OriginAdmin, Models: []string{"m"}, Engine: "vllm",
		DPRanks: 1, Healthy: true, Routable: true, Circuit: "closed", Generation: 1, Revision: 1}, list.Data[0])
}

func TestAdminAddValidatesLikeTheConfigFile(t *testing.T) {
	h := newAdminHarness(t, adminToken, "0.0.0.0:8080")
	sw := newSwitchWorker(t, true, false)
	h.addWorker(t, "a", sw.URL)
	tests := []struct {
		name, body string
		status     int
		param      string
		code       string
	}{
		{"not json", `{"id":`, 400, "", ""},
		{"not an object", `["a"]`, 400, "", ""},
		{"unknown field", `{"id":"n","urll":"http://127.0.0.1:1"}`, 400, "urll", ""},
		{"wrong type", `{"id":"n","url":"http://127.0.0.1:1","max_running":"many"}`, 400, "max_running", ""},
		{"missing url", `{"id":"n"}`, 400, "url", ""},
		{"missing id", `{"url":"http://127.0.0.1:1"}`, 400, "id", ""},
		{"id with a slash", `{"id":"a/b","url":"http://127.0.0.1:1"}`, 400, "id", ""},
		{"not http", `{"id":"n","url":"ftp://127.0.0.1:1"}`, 400, "url", ""},
		{"unknown engine", `{"id":"n","url":"http://127.0.0.1:1","engine":"tgi"}`, 400, "engine", ""},
		{"empty model", `{"id":"n","url":"http://127.0.0.1:1","models":[""]}`, 400, "models[0]", ""},
		{"negative dp ranks", `{"id":"n","url":"http://127.0.0.1:1","dp_ranks":-1}`, 400, "dp_ranks", ""},
		{"duplicate id", `{"id":"a","url":"http://127.0.0.1:1"}`, 409, "id", "worker_exists"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.do(t, "POST", "/admin/workers", tt.body)
			require.Equal(t, tt.status, resp.StatusCode)
			e := decodeError(t, resp)
			assert.Equal(t, "invalid_request_error", e.Error.Type)
			if tt.param == "" {
				assert.Nil(t, e.Error.Param)
			} else {
				require.NotNil(t, e.Error.Param)
				assert.Equal(t, tt.param, *e.Error.Param)
			}
			if tt.code != "" {
				require.NotNil(t, e.Error.Code)
				assert.Equal(t, tt.code, *e.Error.Code)
			}
		})
	}
	assert.Len(t, h.reg.Workers(), 1, "nothing invalid was added")

	big := `{"id":"n","url":"http://127.0.0.1:1","models":["` + strings.Repeat("m", adminMaxBody) + `"]}`
	resp := h.do(t, "POST", "/admin/workers", big)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
}

// A worker added at run time takes no request before its first healthy check.
func TestAdminAddedWorkerIsRoutableOnlyOnceHealthy(t *testing.T) {
	h := newAdminHarness(t, adminToken, "0.0.0.0:8080")
	old := newSwitchWorker(t, true, false)
	h.addWorker(t, "old", old.URL)
	require.Eventually(t, func() bool { v, _ := h.worker(t, "old"); return v.Routable }, 5*time.Second, 5*time.Millisecond)

	sick := newSwitchWorker(t, false, false)
	v := h.addWorker(t, "new", sick.URL)
	assert.False(t, v.Healthy)
	assert.False(t, v.Routable)
	assert.Equal(t, workers.OriginAdmin, v.Origin)
	for range 6 {
		resp := h.chat(t)
		require.Equal(t, 200, resp.StatusCode)
	}
	assert.Zero(t, sick.hits.Load(), "an unchecked worker takes nothing")
	assert.Equal(t, int32(6), old.hits.Load())

	sick.healthy.Store(true)
	require.Eventually(t, func() bool { v, _ := h.worker(t, "new"); return v.Routable }, 5*time.Second, 5*time.Millisecond)
	for range 6 {
		resp := h.chat(t)
		require.Equal(t, 200, resp.StatusCode)
	}
	assert.Equal(t, int32(3), sick.hits.Load(), "round robin shares the fleet with it once healthy")
}

func TestAdminDeleteDrainsThenRemoves(t *testing.T) {
	h := newAdminHarness(t, adminToken, "0.0.0.0:8080")
	slow := newSwitchWorker(t, true, true)
	h.addWorker(t, "slow", slow.URL)
	require.Eventually(t, func() bool { v, _ := h.worker(t, "slow"); return v.Routable }, 5*time.Second, 5*time.Millisecond)

	type result struct {
		status int
		body   string
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post(h.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		if err != nil {
			done <- result{status: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- result{resp.StatusCode, string(b)}
	}()
	<-slow.started

	resp := h.do(t, "DELETE", "/admin/workers/slow", "")
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	var v workerView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	assert.True(t, v.Draining)
	assert.True(t, v.Removing)
	assert.False(t, v.Routable)
	assert.Equal(t, 1, v.Inflight)

	other := newSwitchWorker(t, true, false)
	h.addWorker(t, "other", other.URL)
	require.Eventually(t, func() bool { v, _ := h.worker(t, "other"); return v.Routable }, 5*time.Second, 5*time.Millisecond)
	for range 4 {
		require.Equal(t, 200, h.chat(t).StatusCode)
	}
	assert.Equal(t, int32(1), slow.hits.Load(), "a draining worker takes no new request")

	time.Sleep(100 * time.Millisecond)
	_, status := h.worker(t, "slow")
	assert.Equal(t, 200, status, "still listed while its request runs")

	close(slow.hold)
	r := <-done
	assert.Equal(t, 200, r.status, "the request in flight finished normally: %s", r.body)
	require.Eventually(t, func() bool { _, status := h.worker(t, "slow"); return status == 404 }, 5*time.Second, 5*time.Millisecond,
		"removed once idle")
	reqs, _ := h.router.Reserved("slow")
	assert.Zero(t, reqs, "routing forgot it")

	resp = h.do(t, "DELETE", "/admin/workers/slow", "")
	assert.Equal(t, 404, resp.StatusCode)
	e := decodeError(t, resp)
	require.NotNil(t, e.Error.Code)
	assert.Equal(t, "worker_not_found", *e.Error.Code)
}

func TestAdminDrainKeepsTheWorkerListed(t *testing.T) {
	h := newAdminHarness(t, adminToken, "0.0.0.0:8080")
	a := newSwitchWorker(t, true, false)
	b := newSwitchWorker(t, true, false)
	h.addWorker(t, "a", a.URL)
	h.addWorker(t, "b", b.URL)
	require.Eventually(t, func() bool {
		va, _ := h.worker(t, "a")
		vb, _ := h.worker(t, "b")
		return va.Routable && vb.Routable
	}, 5*time.Second, 5*time.Millisecond)

	resp := h.do(t, "POST", "/admin/workers/a/drain", "")
	require.Equal(t, 200, resp.StatusCode)
	var v workerView
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	assert.True(t, v.Draining)
	assert.False(t, v.Removing)
	for range 4 {
		require.Equal(t, 200, h.chat(t).StatusCode)
	}
	assert.Zero(t, a.hits.Load())
	assert.Equal(t, int32(4), b.hits.Load())
	time.Sleep(100 * time.Millisecond)
	v, status := h.worker(t, "a")
	assert.Equal(t, 200, status, "a drained worker stays listed")
	assert.True(t, v.Draining)

	resp = h.do(t, "POST", "/admin/workers/nope/drain", "")
	assert.Equal(t, 404, resp.StatusCode)
	resp = h.do(t, "PUT", "/admin/workers/a/drain", "")
	assert.Equal(t, 405, resp.StatusCode)
}

func TestAdminIDsMayBePercentEncoded(t *testing.T) {
	h := newAdminHarness(t, adminToken, "0.0.0.0:8080")
	sw := newSwitchWorker(t, true, false)
	h.addWorker(t, "[fd00::7]:8000", sw.URL)
	v, status := h.worker(t, "%5Bfd00::7%5D:8000")
	require.Equal(t, 200, status)
	assert.Equal(t, "[fd00::7]:8000", v.ID)
	v, status = h.worker(t, "[fd00::7]:8000")
	require.Equal(t, 200, status)
	assert.Equal(t, "[fd00::7]:8000", v.ID)
}

// A config reload swaps the partition resolver; requests after it use the new keys.
func TestSetPartitionsSwapsTheResolver(t *testing.T) {
	oldKeys, err := admission.NewResolver([]admission.Partition{{Name: "p", Weight: 1, APIKeys: []string{"old-key"}}}, "p", "")
	require.NoError(t, err)
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, func(o *Options) { o.Partitions = oldKeys })
	send := func(key string) int {
		req, err := http.NewRequest("POST", h.srv.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, 200, send("old-key"))
	assert.Equal(t, 401, send("new-key"))

	newKeys, err := admission.NewResolver([]admission.Partition{{Name: "p", Weight: 1, APIKeys: []string{"new-key"}}}, "p", "")
	require.NoError(t, err)
	h.gw.SetPartitions(newKeys)
	assert.Equal(t, 401, send("old-key"))
	assert.Equal(t, 200, send("new-key"))
}

// A web page the operator visits must not drive the admin API: cross-site
// writes are refused (with or without a token), a token-less API answers
// loopback Host names only (DNS rebinding), and worker entries must be JSON
// (a form or text/plain body needs no preflight).
func TestAdminRefusesWhatAWebPageCanSend(t *testing.T) {
	spec := `{"id":"x","url":"http://127.0.0.1:9"}`
	send := func(h *adminHarness, method, path, body string, header ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		for i := 0; i+1 < len(header); i += 2 {
			if header[i] == "Host" {
				req.Host = header[i+1]
				continue
			}
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	json := []string{"Content-Type", "application/json"}

	open := newAdminHarness(t, "", "127.0.0.1:8080")
	tests := []struct {
		name         string
		method, path string
		body         string
		header       []string
		want         int
		code         string
	}{
		{"cross-site add", "POST", "/admin/workers", spec, append(json, "Sec-Fetch-Site", "cross-site"), 403, "cross_origin_request"},
		{"foreign origin drain", "POST", "/admin/workers/w0/drain", "", []string{"Origin", "http://evil.example"}, 403, "cross_origin_request"},
		{"rebound host list", "GET", "/admin/workers", "", []string{"Host", "rebind.evil.example:8080"}, 403, "cross_origin_request"},
		{"rebound host add", "POST", "/admin/workers", spec, append(json, "Host", "rebind.evil.example"), 403, "cross_origin_request"},
		{"text/plain body", "POST", "/admin/workers", spec, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"form body", "POST", "/admin/workers", spec, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"localhost host", "GET", "/admin/workers", "", []string{"Host", "localhost:8080"}, 200, ""},
		{"same-origin add", "POST", "/admin/workers", spec, append(json, "Sec-Fetch-Site", "same-origin"), 201, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := send(open, tt.method, tt.path, tt.body, tt.header...)
			assert.Equal(t, tt.want, status, body)
			if tt.code != "" {
				assert.Contains(t, body, `"code":"`+tt.code+`"`)
			}
		})
	}
	assert.NotNil(t, open.reg.Get("x"), "the same-origin add went through")

	t.Run("with a token", func(t *testing.T) {
		h := newAdminHarness(t, adminToken, "0.0.0.0:8080")
		status, body := send(h, "POST", "/admin/workers", spec, append(json, "Authorization", "Bearer "+adminToken, "Sec-Fetch-Site", "cross-site")...)
		assert.Equal(t, 403, status, body)
		req, err := http.NewRequest("GET", h.srv.URL+"/admin/workers", nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 401, resp.StatusCode)
		assert.Equal(t, `Bearer realm="kvgate admin"`, resp.Header.Get("WWW-Authenticate"))
		status, _ = send(h, "GET", "/admin/workers", "", "Authorization", "Bearer "+adminToken, "Host", "kvgate.example.com")
		assert.Equal(t, 200, status, "with a token any Host may ask")
	})
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/openapi"
)

// apiContract validates real exchanges with a running gateway against
// openapi/openapi.yaml, and remembers which operations it saw.
type apiContract struct {
	doc    *openapi3.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // "METHOD path" of validated operations
}

var registerDecoders sync.Once

func loadContract(t *testing.T) *apiContract {
	t.Helper()
	registerDecoders.Do(func() {
		// Bodies the validator has no decoder for: a string schema each.
		for _, ct := range []string{"text/event-stream", "application/yaml", "text/html"} {
			openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
		}
	})
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openapi.Spec)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context), "openapi.yaml is a valid OpenAPI 3 document")
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &apiContract{doc: doc, router: router, seen: map[string]bool{}}
}

// exchange sends a request and validates both it and the response against
// the document; it returns the status and body.
func (c *apiContract) exchange(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	var reqBody []byte
	if req.Body != nil {
		var err error
		reqBody, err = io.ReadAll(req.Body)
		require.NoError(t, err)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)

	// Validate against a copy of the request, with its body restored.
	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := c.router.FindRoute(vreq)
	require.NoError(t, err, "%s %s is documented", req.Method, req.URL.Path)
	in := &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	// Requests meant to be refused (bad JSON, no messages) are not valid
	// requests; only the answers to the others are checked as such.
	if resp.StatusCode < 400 {
		require.NoError(t, openapi3filter.ValidateRequest(context.Background(), in), "request")
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	out.SetBodyBytes(body)
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out),
		"%s %s → %d %s", req.Method, req.URL.Path, resp.StatusCode, body)

	c.mu.Lock()
	c.seen[req.Method+" "+route.Path] = true
	c.mu.Unlock()
	return resp.StatusCode, body
}

// validateEvents checks every data event of an SSE body against schema.
func (c *apiContract) validateEvents(t *testing.T, body []byte, schema string) {
	t.Helper()
	ref := c.doc.Components.Schemas[schema]
	require.NotNil(t, ref, schema)
	events, done := 0, false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var v any
		require.NoError(t, json.Unmarshal([]byte(data), &v))
		require.NoError(t, ref.Value.VisitJSON(v), "event %s", data)
		events++
	}
	assert.Positive(t, events)
	assert.True(t, done, "the stream ends with [DONE]")
}

// operations lists every documented "METHOD path".
func (c *apiContract) operations() []string {
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}

func newRequest(t *testing.T, method, url, body string, header ...string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// Every documented route answers, in success and in error, as openapi.yaml
// says; and every documented operation is exercised here.
func TestResponsesMatchTheOpenAPIDocument(t *testing.T) {
	c := loadContract(t)
	f := startFleet(t, fleetConfig{workers: 2, yaml: `
limits:
  max_body_bytes: 2048
auth:
  admin_token: test-admin-token-0123456789
admission:
  partitions:
    - name: team
      weight: 1
      api_keys: [key-team]
  default_partition: team
`})
	auth := []string{"Authorization", "Bearer key-team"}
	chat := `{"model":"sim","messages":[{"role":"user","content":"hello there"}],"max_tokens":8}`

	t.Run("chat completion", func(t *testing.T) {
		status, _ := c.exchange(t, newRequest(t, "POST", f.url+"/v1/chat/completions", chat, auth...))
		assert.Equal(t, 200, status)
	})
	t.Run("chat completion stream", func(t *testing.T) {
		body := `{"model":"sim","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`
		status, b := c.exchange(t, newRequest(t, "POST", f.url+"/v1/chat/completions", body, auth...))
		require.Equal(t, 200, status)
		c.validateEvents(t, b, "ChatCompletionChunk")
	})
	t.Run("completion", func(t *testing.T) {
		status, _ := c.exchange(t, newRequest(t, "POST", f.url+"/v1/completions", `{"model":"sim","prompt":"once upon","max_tokens":8}`, auth...))
		assert.Equal(t, 200, status)
	})
	errorsCases := []struct {
		name, path, body string
		header           []string
		want             int
	}{
		{"bad JSON", "/v1/chat/completions", `{"model":`, auth, 400},
		{"no messages", "/v1/chat/completions", `{"model":"sim"}`, auth, 400},
		{"no key", "/v1/chat/completions", chat, nil, 401},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, auth, 404},
		{"body too large", "/v1/chat/completions", `{"model":"sim","messages":[{"role":"user","content":"` + strings.Repeat("x", 4096) + `"}]}`, auth, 413},
		{"completion without prompt", "/v1/completions", `{"model":"sim"}`, auth, 400},
	}
	for _, tt := range errorsCases {
		t.Run(tt.name, func(t *testing.T) {
			status, _ := c.exchange(t, newRequest(t, "POST", f.url+tt.path, tt.body, tt.header...))
			assert.Equal(t, tt.want, status)
		})
	}
	for _, path := range []string{"/v1/models", "/health", "/readyz", "/metrics", "/openapi.yaml", "/", "/api/status", "/api/status?since=1"} {
		t.Run(path, func(t *testing.T) {
			status, _ := c.exchange(t, newRequest(t, "GET", f.url+path, ""))
			assert.Equal(t, 200, status)
		})
	}
	t.Run("status with a bad since", func(t *testing.T) {
		status, _ := c.exchange(t, newRequest(t, "GET", f.url+"/api/status?since=yesterday", ""))
		assert.Equal(t, 400, status)
	})

	t.Run("admin", func(t *testing.T) {
		admin := []string{"Authorization", "Bearer test-admin-token-0123456789"}
		// A worker nobody listens for: it never turns healthy, so it never
		// takes traffic, and removing it is immediate.
		spec := `{"id":"extra","url":"http://127.0.0.1:9","engine":"vllm","max_running":4}`
		steps := []struct {
			method, path, body string
			header             []string
			want               int
		}{
			{"GET", "/admin/workers", "", admin, 200},
			{"GET", "/admin/workers", "", nil, 401},
			{"POST", "/admin/workers", spec, admin, 201},
			{"POST", "/admin/workers", spec, admin, 409},
			{"POST", "/admin/workers", `{"id":"bad","url":"ftp://x"}`, admin, 400},
			{"GET", "/admin/workers/extra", "", admin, 200},
			{"GET", "/admin/workers/nope", "", admin, 404},
			{"POST", "/admin/workers/extra/drain", "", admin, 200},
			{"POST", "/admin/workers/nope/drain", "", admin, 404},
			{"DELETE", "/admin/workers/extra", "", admin, 202},
			{"DELETE", "/admin/workers/nope", "", admin, 404},
		}
		for _, s := range steps {
			status, body := c.exchange(t, newRequest(t, s.method, f.url+s.path, s.body, s.header...))
			assert.Equal(t, s.want, status, "%s %s: %s", s.method, s.path, body)
		}
	})

	var missing []string
	for _, op := range c.operations() {
		if !c.seen[op] {
			missing = append(missing, op)
		}
	}
	assert.Empty(t, missing, "documented operations this test never exercised")
}

// The served document is the embedded one.
func TestOpenAPIDocumentIsServed(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 1})
	resp, err := http.Get(f.url + "/openapi.yaml")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "application/yaml", resp.Header.Get("Content-Type"))
	assert.Equal(t, openapi.Spec, b)
}

// Every route the gateway serves, as run() wires it, is in the document
// (but for the status page's static assets).
func TestEveryRouteIsDocumented(t *testing.T) {
	c := loadContract(t)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Workers = []config.Worker{{ID: "w0", URL: "http://127.0.0.1:9", Engine: "vllm"}}
	cfg.Auth.AdminToken = "test-admin-token-0123456789"
	a, err := newApp(cfg, slog.New(slog.DiscardHandler), nil)
	require.NoError(t, err)
	defer a.registry.Close()

	documented := map[string]bool{}
	for _, op := range c.operations() {
		documented[op] = true
	}
	var served []string
	require.NoError(t, chi.Walk(a.gateway.Routes(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if method == http.MethodHead || strings.HasPrefix(route, "/assets/") {
			return nil
		}
		served = append(served, method+" "+strings.TrimSuffix(strings.ReplaceAll(route, "/*/", "/"), "/*"))
		return nil
	}))
	require.NotEmpty(t, served)
	var undocumented []string
	for _, op := range served {
		if !documented[op] {
			undocumented = append(undocumented, op)
		}
	}
	assert.Empty(t, undocumented, "served but not in openapi/openapi.yaml")
	assert.Contains(t, served, "DELETE /admin/workers/{id}", "the walk reaches mounted routers")
}

package handlers

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/sim/simserver"
	"github.com/kvgate/kvgate/workers"
)

// discardFlusher is a ResponseWriter that throws the body away, as cheaply as possible.
type discardFlusher struct{ h http.Header }

func (d *discardFlusher) Header() http.Header         { return d.h }
func (d *discardFlusher) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardFlusher) WriteHeader(int)             {}
func (d *discardFlusher) Flush()                      {}

func BenchmarkParseRequest(b *testing.B) {
	body := []byte(`{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"system","content":"` +
		strings.Repeat("You are a helpful assistant. ", 40) + `"},{"role":"user","content":"What is a KV cache?"}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseRequest(body, endpointChat); err != nil {
			b.Fatal(err)
		}
	}
}

// sseBody is a worker's stream of n token chunks.
func sseBody(n int) []byte {
	var buf bytes.Buffer
	for i := range n {
		buf.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok` +
			strconv.Itoa(i) + `"},"finish_reason":null}]}` + "\n\n")
	}
	buf.WriteString("data: [DONE]\n\n")
	return buf.Bytes()
}

// BenchmarkSSERelay relays a 256-event stream from memory to a discarding
// writer: the relay's own cost per stream, without sockets.
func BenchmarkSSERelay(b *testing.B) {
	body := sseBody(256)
	reg := workers.NewRegistry(workers.Options{})
	defer reg.Close()
	wk, err := reg.Add(workers.Spec{ID: "a", URL: "http://127.0.0.1:1", Models: []string{"m"}})
	if err != nil {
		b.Fatal(err)
	}
	g := New(Options{Registry: reg, Now: time.Now})
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	w := &discardFlusher{h: http.Header{}}
	header := http.Header{"Content-Type": []string{"text/event-stream"}}
	rd := bytes.NewReader(body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		resp := &http.Response{StatusCode: 200, Header: header, Body: io.NopCloser(rd)}
		rec := requestRecord{start: time.Now()}
		if res := g.relayStream(w, r, r.Context(), wk, &routing.Decision{Label: "bench"}, resp, &rec); res.verdict != answered || res.outcome != routing.OutcomeSuccess {
			b.Fatalf("relay failed: %+v", res)
		}
	}
}

// BenchmarkGatewayProxy is the whole request path over loopback: an HTTP
// client, the gateway, and a simulated worker answering at once. Most of the
// time is the three processes' HTTP stacks; run with -cpuprofile to see the
// gateway's share.
func BenchmarkGatewayProxy(b *testing.B) {
	benchmarkGatewayProxy(b, false)
}

// BenchmarkGatewayProxyStream is BenchmarkGatewayProxy streaming: 16 events
// and [DONE] per request, each written to the client through clientWriter.
func BenchmarkGatewayProxyStream(b *testing.B) {
	benchmarkGatewayProxy(b, true)
}

func benchmarkGatewayProxy(b *testing.B, stream bool) {
	cfg := simserver.DefaultConfig()
	cfg.TimeScale = 0
	sim, err := simserver.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	simSrv := httptest.NewServer(sim.Handler())
	defer func() { simSrv.Close(); _ = sim.Close() }()

	transport := workers.NewTransport(workers.TransportOptions{DialTimeout: time.Second, ResponseHeaderTimeout: 10 * time.Second,
		IdleConnsPerWorker: 256, IdleConnTimeout: time.Minute})
	reg := workers.NewRegistry(workers.Options{Client: &http.Client{Transport: transport}, HealthInterval: time.Second,
		HealthTimeout: time.Second, HealthPath: "/health", UnhealthyThreshold: 1, HealthyThreshold: 1})
	defer reg.Close()
	if _, err := reg.Add(workers.Spec{ID: "a", URL: simSrv.URL, Models: []string{"sim"}, Engine: workers.EngineVLLM}); err != nil {
		b.Fatal(err)
	}
	for !reg.AnyServing() {
		time.Sleep(time.Millisecond)
	}
	policy, _ := routing.NewPolicy("least_load", routing.DefaultPolicyConfig())
	g := New(Options{Registry: reg, Router: routing.NewRouter(policy, routing.Options{}), Transport: transport,
		MaxBodyBytes: 1 << 20, MaxAttempts: 3, LogRequests: true, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
		RequestLog: io.Discard}) // the JSON request log, written as the gateway writes it
	gw := httptest.NewServer(g)
	defer gw.Close()

	body := `{"model":"sim","max_tokens":16,"stream":` + strconv.FormatBool(stream) +
		`,"messages":[{"role":"user","content":"` + strings.Repeat("hello ", 170) + `"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	client.CloseIdleConnections()
	transport.CloseIdleConnections()
}

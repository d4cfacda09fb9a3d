package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	json "github.com/goccy/go-json"
)

// API endpoints.
const (
	endpointChat        = "chat"
	endpointCompletions = "completions"
)

// Error kinds (see doc.go for their meaning).
const (
	kindConnect     = "connect"
	kindTimeout     = "timeout"
	kindStreamError = "stream_error"
	kindDecode      = "decode"
	kindDropped     = "dropped"
	kindCanceled    = "canceled"
)

// result is the outcome of one request. kind is empty on success.
type result struct {
	kind         string
	ttft         time.Duration
	hasTTFT      bool
	e2e          time.Duration
	outputTokens int
}

// runner sends one request at a time (any number concurrently) and measures
// it. Everything that does not change between requests is prepared once.
type runner struct {
	transport  *http.Transport
	url        *url.URL
	header     http.Header // shared read-only by every request
	stream     bool
	contentKey []byte
	timeout    time.Duration

	readers sync.Pool // *sseReader
	bufs    sync.Pool // *bytes.Buffer, non-streaming bodies
}

type runnerConfig struct {
	baseURL     string
	endpoint    string
	apiKey      string
	stream      bool
	timeout     time.Duration // per request; 0 = none
	connections int           // expected concurrent requests
}

func newRunner(cfg runnerConfig) (*runner, error) {
	u, err := url.Parse(strings.TrimRight(cfg.baseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url must be an http(s) base URL such as http://127.0.0.1:8080/v1, got %q", cfg.baseURL)
	}
	r := &runner{
		// The transport is used directly: http.Client would add redirect
		// handling and a header copy per request, neither of which loadgen
		// wants.
		transport: newTransport(cfg.connections),
		header:    http.Header{"Content-Type": {"application/json"}},
		stream:    cfg.stream,
		timeout:   cfg.timeout,
	}
	switch cfg.endpoint {
	case endpointChat:
		u = u.JoinPath("chat", "completions")
		r.contentKey = chatContentKey
	case endpointCompletions:
		u = u.JoinPath("completions")
		r.contentKey = textContentKey
	default:
		return nil, fmt.Errorf("--endpoint must be %s or %s, got %q", endpointChat, endpointCompletions, cfg.endpoint)
	}
	r.url = u
	if cfg.stream {
		r.header.Set("Accept", "text/event-stream")
	} else {
		r.header.Set("Accept", "application/json")
	}
	if cfg.apiKey != "" {
		r.header.Set("Authorization", "Bearer "+cfg.apiKey)
	}
	return r, nil
}

// newTransport holds exactly one connection per concurrent request, so a
// steady run opens no new connection after warm-up, and leaves compression
// off: gzip on either side would be the load generator's cost, not the
// server's.
//
// MaxConnsPerHost matters as much as the idle limit: a closed-loop worker
// sends its next request before the transport's read loop has put the
// previous connection back in the pool, and without the cap each such race
// dials an extra connection that the idle limit later closes, which is
// connection churn the server would be measured with.
func newTransport(connections int) *http.Transport {
	connections = max(connections, 1)
	return &http.Transport{
		Proxy: nil, // measure the endpoint, never a proxy from the environment
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        connections,
		MaxIdleConnsPerHost: connections,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		TLSHandshakeTimeout: 10 * time.Second,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      16 << 10,
	}
}

// close releases idle connections.
func (r *runner) close() { r.transport.CloseIdleConnections() }

// do sends body and measures the response. ctx is the run's request context:
// its cancellation is counted as canceled, the per-request --timeout as
// timeout. do releases body.
func (r *runner) do(ctx context.Context, body *requestBody) result {
	defer body.release()
	reqCtx := httptrace.WithClientTrace(ctx, &body.trace)
	if r.timeout > 0 {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(reqCtx, r.timeout)
		defer cancel()
	}
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           r.url,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        r.header,
		Body:          body.open(),
		ContentLength: int64(len(body.buf)),
		Host:          r.url.Host,
	}).WithContext(reqCtx)

	start := time.Now()
	resp, err := r.transport.RoundTrip(req)
	if err != nil {
		return result{kind: classify(ctx, reqCtx, kindConnect)}
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Read a little so a short error body leaves the connection reusable.
		_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
		return result{kind: "http_" + strconv.Itoa(resp.StatusCode)}
	}
	if r.stream {
		return r.readStream(ctx, reqCtx, resp.Body, start)
	}
	return r.readJSON(ctx, reqCtx, resp.Body, start)
}

func (r *runner) readStream(ctx, reqCtx context.Context, body io.Reader, start time.Time) result {
	s, _ := r.readers.Get().(*sseReader)
	if s == nil {
		s = newSSEReader()
	}
	defer r.readers.Put(s)
	out, err := s.read(body, r.contentKey)
	end := time.Now()
	switch {
	case errors.Is(err, errUsageDecode):
		return result{kind: kindDecode}
	case err != nil:
		return result{kind: classify(ctx, reqCtx, kindStreamError)}
	case out.errorEvent || !out.done:
		return result{kind: kindStreamError}
	}
	// Drain what follows [DONE] (normally the chunked terminator) so the
	// connection goes back to the pool instead of being closed.
	_, _ = io.CopyN(io.Discard, body, 4<<10)
	res := result{e2e: end.Sub(start), outputTokens: out.completionTokens}
	if out.completionTokens < 0 {
		res.outputTokens = out.contentChunks
	}
	if !out.firstContent.IsZero() {
		res.ttft, res.hasTTFT = out.firstContent.Sub(start), true
	}
	return res
}

// completionJSON is the part of a non-streaming response loadgen reads.
type completionJSON struct {
	Choices []struct {
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Text string `json:"text"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

func (r *runner) readJSON(ctx, reqCtx context.Context, body io.Reader, start time.Time) result {
	buf, _ := r.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer func() { buf.Reset(); r.bufs.Put(buf) }()
	if _, err := buf.ReadFrom(body); err != nil {
		return result{kind: classify(ctx, reqCtx, kindConnect)}
	}
	e2e := time.Since(start)
	var c completionJSON
	if err := json.Unmarshal(buf.Bytes(), &c); err != nil || (c.Choices == nil && c.Usage == nil) {
		return result{kind: kindDecode}
	}
	res := result{e2e: e2e, ttft: e2e, hasTTFT: true}
	if c.Usage != nil {
		res.outputTokens = c.Usage.CompletionTokens
	} else {
		chars := 0
		for _, ch := range c.Choices {
			chars += len(ch.Message.Content) + len(ch.Text)
		}
		res.outputTokens = (chars + charsPerToken - 1) / charsPerToken
	}
	return res
}

// classify names a failure by which context ended, if any: the run's
// (canceled) or the request's own deadline (timeout). Otherwise the failure
// is the transport's and gets fallback.
func classify(runCtx, reqCtx context.Context, fallback string) string {
	switch {
	case runCtx.Err() != nil:
		return kindCanceled
	case errors.Is(reqCtx.Err(), context.DeadlineExceeded):
		return kindTimeout
	default:
		return fallback
	}
}

package handlers

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/workers"
)

// What the gateway does when a client or a worker misbehaves on the answer's
// way back: neither may hold the gateway's resources, grow its memory without
// bound, or make a broken answer look whole.

// rawPost sends a request over a new TCP connection and returns it with a
// reader positioned after the status line.
func rawPost(t *testing.T, h *harness, body string, readBuffer int) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	if readBuffer > 0 {
		require.NoError(t, conn.(*net.TCPConn).SetReadBuffer(readBuffer))
	}
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"+
		"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	require.NoError(t, err)
	return conn, br, status
}

// declareBody opens a request that declares a body of n bytes and sends
// one of them.
func declareBody(t *testing.T, h *harness, n int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.srv.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(n)+"\r\n\r\n{")
	require.NoError(t, err)
	return conn
}

// endlessStream is a worker streaming 4 KB events until its client goes.
func endlessStream(w http.ResponseWriter, r *http.Request, _ []byte) {
	event := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 4000) + `"}}]}` + "\n\n"
	w.Header().Set("Content-Type", "text/event-stream")
	for r.Context().Err() == nil {
		if _, err := io.WriteString(w, event); err != nil {
			return
		}
		w.(http.Flusher).Flush()
	}
}

func TestClientThatStopsReadingIsGoneAfterTheWriteTimeout(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, endlessStream)}, func(o *Options) {
		o.IdleTimeout = 5 * time.Second
		o.ClientWriteTimeout = 300 * time.Millisecond
	})
	_, _, status := rawPost(t, h, streamBody, 4096)
	require.Contains(t, status, "200")
	// The client reads nothing more, and keeps its connection open.
	require.Eventually(t, func() bool { return h.inflightTotal() == 0 && h.reservedTotal() == 0 },
		10*time.Second, 20*time.Millisecond, "what the request held is released")
	require.Eventually(t, func() bool { return strings.Contains(h.logText(), `"status":499`) },
		5*time.Second, 10*time.Millisecond)
	assert.Equal(t, workers.BreakerClosed, h.reg.Workers()[0].CircuitState(time.Now()))
	assert.Zero(t, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "timeout")))
}

func TestSlowClientIsNotTheWorkersSilence(t *testing.T) {
	event := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 4000) + `"}}]}` + "\n\n"
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 8000 && r.Context().Err() == nil; i++ { // 32 MB: more than the socket buffers hold
			if _, err := io.WriteString(w, event); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})}, func(o *Options) {
		// Long enough that a busy CI machine does not starve the worker
		// for it: only the client's pause may exceed it.
		o.IdleTimeout = time.Second
		o.ClientWriteTimeout = 20 * time.Second
	})
	_, br, status := rawPost(t, h, streamBody, 0)
	require.Contains(t, status, "200")
	time.Sleep(3 * time.Second) // the client pauses for 3 idle timeouts
	rest, err := io.ReadAll(br)
	require.NoError(t, err)
	assert.True(t, bytes.Contains(rest, []byte("data: [DONE]")), "the stream ends well")
	assert.False(t, bytes.Contains(rest, []byte("upstream_stream_error")), "the worker is not blamed")
	assert.Zero(t, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "timeout")))
}

func TestEndlessFirstEventFailsTheAttemptWithoutGrowing(t *testing.T) {
	endless := newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: ")
		line := bytes.Repeat([]byte("x"), 1<<20)
		for i := 0; i < 64 && r.Context().Err() == nil; i++ {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	})
	h := newHarness(t, []*fakeWorker{endless, newFakeWorker(t, okStream)})
	for range 2 { // round robin: one of them starts on the endless worker
		resp := h.post(t, "/v1/chat/completions", streamBody)
		body := readAll(t, resp.Body)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "b", resp.Header.Get("X-Kvgate-Worker"))
		assert.Contains(t, body, "data: [DONE]")
	}
	// Round robin puts each request on a first, which fails it before anything is sent.
	assert.Equal(t, 2.0, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "stream")))
}

// hugeAnswer is a worker whose answer is 2 MiB over what the gateway
// buffers; with breakOff it dies before the end of it.
func hugeAnswer(breakOff bool) func(w http.ResponseWriter, _ *http.Request, _ []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		const mib = 1 << 20
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"`)
		chunk := bytes.Repeat([]byte("x"), mib)
		for range maxBufferedBody/mib + 2 {
			_, _ = w.Write(chunk)
		}
		if breakOff {
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, `"}}]}`)
	}
}

func TestAnswerLargerThanTheBufferPassesThroughWhole(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, hugeAnswer(false))})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Greater(t, len(b), maxBufferedBody)
	assert.True(t, json.Valid(b), "the whole answer, not its first 64 MiB")
}

func TestAnswerBrokenOffAfterPassingThroughAbortsTheConnection(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, hugeAnswer(true))})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	assert.Equal(t, 200, resp.StatusCode)
	_, err := io.Copy(io.Discard, resp.Body)
	assert.Error(t, err, "a truncated answer must not end like a whole one")
	require.Eventually(t, func() bool { return strings.Contains(h.logText(), "worker failed mid-answer") },
		5*time.Second, 10*time.Millisecond)
	assert.Zero(t, h.inflightTotal())
}

func TestStreamEndsAtDoneEvenIfTheWorkerKeepsItOpen(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		okStream(w, r, nil)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})}, func(o *Options) { o.IdleTimeout = 10 * time.Second })
	start := time.Now()
	resp := h.post(t, "/v1/chat/completions", streamBody)
	body := readAll(t, resp.Body)
	assert.Less(t, time.Since(start), 5*time.Second, "the stream ends at [DONE], not at the idle timeout")
	assert.True(t, strings.HasSuffix(body, "data: [DONE]\n\n"), "%q", body)
	assert.Zero(t, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "timeout")))
}

func TestMalformed2xxIsRetriedElsewhere(t *testing.T) {
	broken := newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[{"index":0,"message":{"role":"assis`)
	})
	h := newHarness(t, []*fakeWorker{broken, newFakeWorker(t, okJSON)})
	for range 2 {
		resp := h.post(t, "/v1/chat/completions", chatBody)
		body := readAll(t, resp.Body)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "b", resp.Header.Get("X-Kvgate-Worker"))
		assert.True(t, json.Valid([]byte(body)))
	}
	assert.Equal(t, 2.0, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "transport")))
	assert.Zero(t, h.reservedTotal(), "a retried request's first decision is released once the retry is routed")
}

func TestWorkerRefusingTheGatewaysKeyIsAWorkerFailure(t *testing.T) {
	refusing := newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"invalid api key","type":"invalid_request_error"}}`)
	})
	h := newHarness(t, []*fakeWorker{refusing, newFakeWorker(t, okJSON)})
	for range 2 {
		resp := h.post(t, "/v1/chat/completions", chatBody)
		readAll(t, resp.Body)
		assert.Equal(t, 200, resp.StatusCode, "another worker answers")
		assert.Equal(t, "b", resp.Header.Get("X-Kvgate-Worker"))
	}
	assert.Equal(t, 2.0, counterValue(t, h.reg.Metrics.UpstreamErrors.WithLabelValues("a", "auth")))
	assert.Contains(t, h.logText(), "refused the gateway's credentials")

	// With no other worker, the client hears that a worker, not its key, failed.
	h = newHarness(t, []*fakeWorker{refusing})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	e := decodeError(t, resp)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Contains(t, e.Error.Message, "refused the gateway's credentials")
	assert.Zero(t, h.reservedTotal(), "and when no retry can be routed")
}

func TestStalledErrorBodyDoesNotDelayTheRetry(t *testing.T) {
	stalled := newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	h := newHarness(t, []*fakeWorker{stalled, newFakeWorker(t, okJSON)}, func(o *Options) { o.IdleTimeout = time.Minute })
	start := time.Now()
	resp := h.post(t, "/v1/chat/completions", chatBody) // round robin: worker a first
	readAll(t, resp.Body)
	assert.Equal(t, 200, resp.StatusCode)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestErrorAnswersSayWhichWorker(t *testing.T) {
	full := newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"full"}}`)
	})
	h := newHarness(t, []*fakeWorker{full})
	resp := h.post(t, "/v1/chat/completions", chatBody)
	readAll(t, resp.Body)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "a", resp.Header.Get("X-Kvgate-Worker"))
	assert.Equal(t, "round_robin", resp.Header.Get("X-Kvgate-Decision"))

	failing := newFakeWorker(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":{"message":"CUDA out of memory"}}`)
	})
	h = newHarness(t, []*fakeWorker{failing})
	resp = h.post(t, "/v1/chat/completions", chatBody)
	e := decodeError(t, resp)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Contains(t, e.Error.Message, "CUDA out of memory")
	assert.Equal(t, "a", resp.Header.Get("X-Kvgate-Worker"))
}

func TestBodyDeclaredTooLargeIsAnsweredWithoutWaitingForIt(t *testing.T) {
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, okJSON)}, func(o *Options) { o.BodyReadTimeout = time.Minute })
	// Over the harness's 64 KiB limit, under net/http's 256 KiB drain, and never sent.
	conn := declareBody(t, h, 100000)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.True(t, resp.Close, "the unread body ends the connection")
}

func TestBodiesOverTheBudgetGet503AndItIsGivenBack(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, []*fakeWorker{newFakeWorker(t, func(w http.ResponseWriter, r *http.Request, b []byte) {
		<-release
		okJSON(w, r, b)
	})}, func(o *Options) { o.MaxBufferedBodyBytes = int64(len(chatBody)) + 10 })
	first := make(chan *http.Response)
	go func() {
		resp, err := http.Post(h.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		if err != nil {
			resp = nil
		}
		first <- resp
	}()
	require.Eventually(t, func() bool { return h.gw.bodyBytes.Load() == int64(len(chatBody)) }, 5*time.Second, time.Millisecond)

	resp := h.post(t, "/v1/chat/completions", chatBody) // the budget holds one body
	e := decodeError(t, resp)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotNil(t, e.Error.Code)
	assert.Equal(t, "server_busy", *e.Error.Code)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))

	close(release)
	r1 := <-first
	require.NotNil(t, r1)
	readAll(t, r1.Body)
	assert.Equal(t, 200, r1.StatusCode)
	require.Eventually(t, func() bool { return h.gw.bodyBytes.Load() == 0 }, 5*time.Second, time.Millisecond, "given back when the request ends")
	resp = h.post(t, "/v1/chat/completions", chatBody)
	readAll(t, resp.Body)
	assert.Equal(t, 200, resp.StatusCode)
}

package handlers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"

	json "github.com/goccy/go-json"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// errEmptyAnswer: a 2xx completion without a body is a broken worker, not
// an answer.
var errEmptyAnswer = errors.New("empty answer")

// maxBufferedBody bounds a non-streaming answer held before relaying it.
const maxBufferedBody = 64 << 20

var answerBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer keeps one huge answer from pinning its buffer in the pool.
const maxPooledAnswer = 1 << 20

// relayBody relays a non-streaming answer. The body is read whole before the
// first byte goes to the client, so a worker that dies mid-body is retried.
func (g *Gateway) relayBody(w http.ResponseWriter, r *http.Request, ctx context.Context, wk *workers.Worker,
	dec *routing.Decision, resp *http.Response, rec *requestRecord) attemptResult {
	buf := answerBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			answerBuffers.Put(buf)
		}
	}()
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBufferedBody))
	resp.Body.Close()
	if err == nil && buf.Len() == 0 {
		err = errEmptyAnswer
	}
	if err != nil {
		return g.bodyFailed(r, ctx, wk, err)
	}
	g.writeHead(w, wk, dec, resp)
	w.WriteHeader(resp.StatusCode)
	rec.status = resp.StatusCode
	rec.ttft = g.opts.Now().Sub(rec.start)
	_, _ = w.Write(buf.Bytes())
	return attemptResult{verdict: answered, outcome: routing.OutcomeSuccess, health: workers.HealthSuccess}
}

var sseReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

var doneLine = []byte("data: [DONE]")

// relayStream relays server-sent events, flushing at the end of each event
// unless the next whole event is already read. The first event is read
// whole before anything is sent, so a worker that fails before producing one
// is retried elsewhere; after that, a failure ends the stream with an error
// event.
func (g *Gateway) relayStream(w http.ResponseWriter, r *http.Request, ctx context.Context, wk *workers.Worker,
	dec *routing.Decision, resp *http.Response, rec *requestRecord) attemptResult {
	defer resp.Body.Close()
	br := sseReaders.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() {
		br.Reset(nil)
		sseReaders.Put(br)
	}()
	flusher, _ := w.(http.Flusher)

	first := answerBuffers.Get().(*bytes.Buffer)
	first.Reset()
	defer answerBuffers.Put(first)
	sawDone, err := readEvent(br, first)
	if err != nil && !(err == io.EOF && sawDone) {
		return g.bodyFailed(r, ctx, wk, err)
	}

	g.writeHead(w, wk, dec, resp)
	h := w.Header()
	h["Cache-Control"] = []string{"no-cache"}
	h["X-Accel-Buffering"] = []string{"no"}
	w.WriteHeader(resp.StatusCode)
	rec.status = resp.StatusCode
	rec.ttft = g.opts.Now().Sub(rec.start)
	if _, werr := w.Write(first.Bytes()); werr != nil {
		return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
	}
	if flusher != nil {
		flusher.Flush()
	}

	// Read to the end of the body: the blank line after [DONE] belongs to the
	// stream too, and a worker may still fail after it without harm.
	midLine := false
	for err == nil {
		var line []byte
		line, err = br.ReadSlice('\n')
		switch {
		case err == bufio.ErrBufferFull:
			err = nil // a line longer than the buffer: relay it in pieces
		case err != nil && len(line) > 0:
			// A fragment the worker broke off mid-line is not relayed: the
			// error event below must start on an event boundary.
			line = nil
		}
		if len(line) == 0 {
			continue
		}
		if _, werr := w.Write(line); werr != nil {
			return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
		}
		midLine = line[len(line)-1] != '\n'
		if midLine {
			continue
		}
		if isBlank(line) {
			if flusher != nil && !eventBuffered(br) {
				flusher.Flush()
			}
		} else if bytes.HasPrefix(line, doneLine) {
			sawDone = true
		}
	}
	if sawDone {
		if flusher != nil {
			flusher.Flush()
		}
		return attemptResult{verdict: answered, outcome: routing.OutcomeSuccess, health: workers.HealthSuccess}
	}
	if r.Context().Err() != nil {
		return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
	}
	// The worker broke off (or stalled) mid-stream. Tokens already reached
	// the client, so no retry: end the stream with an error event.
	if midLine {
		_, _ = w.Write(eventEnd) // only a line longer than the buffer leaves one open
	}
	_, _ = w.Write(streamErrorEvent)
	if flusher != nil {
		flusher.Flush()
	}
	kind := "stream"
	if errors.Is(context.Cause(ctx), errIdle) {
		kind = "timeout"
	}
	rec.err = "worker failed mid-stream (" + kind + ")"
	rec.streamFailed = true
	return attemptResult{verdict: answered, outcome: routing.OutcomeFailure, health: workers.HealthFailure, kind: kind}
}

// writeHead sets the headers a relayed 2xx answer carries.
func (g *Gateway) writeHead(w http.ResponseWriter, wk *workers.Worker, dec *routing.Decision, resp *http.Response) {
	h := w.Header()
	if ct := resp.Header["Content-Type"]; ct != nil {
		h["Content-Type"] = ct
	}
	g.writeHeadFor(w, wk, dec)
}

// readEvent reads lines into dst up to and including the blank line that
// ends one event. It reports whether the event was the [DONE] marker.
func readEvent(br *bufio.Reader, dst *bytes.Buffer) (done bool, err error) {
	for {
		line, err := br.ReadSlice('\n')
		dst.Write(line)
		if err == bufio.ErrBufferFull {
			continue
		}
		if bytes.HasPrefix(line, doneLine) {
			done = true
		}
		if err != nil {
			return done, err
		}
		if isBlank(line) && dst.Len() > len(line) {
			return done, nil
		}
	}
}

// eventBuffered reports whether br already holds a complete event (one
// ending in a blank line), so relaying it needs no wait on the worker.
func eventBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n == 0 {
		return false
	}
	buf, _ := br.Peek(n)
	return bytes.Contains(buf, eventEnd) || bytes.Contains(buf, eventEndCRLF)
}

var (
	eventEnd     = []byte("\n\n")
	eventEndCRLF = []byte("\n\r\n")
)

func isBlank(line []byte) bool {
	return len(line) == 1 || (len(line) == 2 && line[0] == '\r')
}

// decodeErrorMessage returns error.message from an OpenAI error body.
func decodeErrorMessage(b []byte) (string, bool) {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
		return "", false
	}
	return e.Error.Message, true
}

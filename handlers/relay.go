package handlers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// errEmptyAnswer: a 2xx completion without a body is a broken worker, not
// an answer.
var errEmptyAnswer = errors.New("empty answer")

// errMalformedAnswer: a 2xx JSON answer that is not JSON (a truncated body,
// an HTML page from something in front of the worker).
var errMalformedAnswer = errors.New("malformed answer")

// errEventTooLarge: a stream's first event grew past maxFirstEvent.
var errEventTooLarge = errors.New("first event too large")

// maxBufferedBody bounds a non-streaming answer held before relaying it;
// a larger one is passed through as it comes (relayBody).
const maxBufferedBody = 64 << 20

// maxFirstEvent bounds a stream's first event, read whole before anything
// is sent: a worker that sends one endless line must not exhaust memory.
const maxFirstEvent = 4 << 20

// doneGrace is how long the end of a stream may take after [DONE]: enough
// for a worker's last bytes to arrive (and its connection to be reused), not
// enough to hold the client.
const doneGrace = 100 * time.Millisecond

var answerBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer keeps one huge answer from pinning its buffer in the pool.
const maxPooledAnswer = 1 << 20

func putAnswerBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxPooledAnswer {
		answerBuffers.Put(b)
	}
}

// relayBody relays a non-streaming answer. The body is read whole before the
// first byte goes to the client, so a worker that dies mid-body, or sends
// something that is not JSON, is retried. An answer larger than
// maxBufferedBody (logprobs of a long generation) is passed through as it
// comes once that much has arrived; if the worker breaks off after that, the
// client's connection is aborted, so a truncated answer never looks whole.
func (g *Gateway) relayBody(w http.ResponseWriter, r *http.Request, ctx context.Context, wk *workers.Worker,
	dec *routing.Decision, resp *http.Response, rec *requestRecord) attemptResult {
	defer resp.Body.Close()
	buf := answerBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer putAnswerBuffer(buf)
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBufferedBody+1))
	whole := buf.Len() <= maxBufferedBody
	switch {
	case err != nil:
	case buf.Len() == 0:
		err = errEmptyAnswer
	case whole && isJSON(resp) && !json.Valid(buf.Bytes()):
		err = errMalformedAnswer
	}
	if err != nil {
		return g.bodyFailed(r, ctx, wk, err)
	}
	cw := g.newClientWriter(w, resp.Body)
	defer cw.done()
	g.writeHead(w, wk, dec, resp)
	w.WriteHeader(resp.StatusCode)
	rec.status = resp.StatusCode
	rec.ttft = g.opts.Now().Sub(rec.start)
	if cw.write(buf.Bytes()) != nil {
		return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
	}
	if whole {
		return attemptResult{verdict: answered, outcome: routing.OutcomeSuccess, health: workers.HealthSuccess}
	}
	chunk := buf.Bytes()[:clientWriteChunk]
	for {
		n, rerr := resp.Body.Read(chunk)
		if n > 0 && cw.write(chunk[:n]) != nil {
			return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
		}
		if rerr == io.EOF {
			return attemptResult{verdict: answered, outcome: routing.OutcomeSuccess, health: workers.HealthSuccess}
		}
		if rerr != nil {
			if r.Context().Err() != nil {
				return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
			}
			kind := failureKind(ctx)
			rec.err = "worker failed mid-answer (" + kind + ")"
			rec.streamFailed, rec.abort = true, true
			return attemptResult{verdict: answered, outcome: routing.OutcomeFailure, health: workers.HealthFailure, kind: kind}
		}
	}
}

// isJSON reports whether a worker's answer says it is JSON (or says nothing).
func isJSON(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	return ct == "" || strings.HasPrefix(ct, "application/json")
}

var sseReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

var doneLine = []byte("data: [DONE]")

// relayStream relays server-sent events, flushing at the end of each event
// unless the next whole event is already read. The first event is read
// whole before anything is sent, so a worker that fails before producing one
// is retried elsewhere; after that, a failure ends the stream with an error
// event. The stream ends with the event after [DONE]: a worker that keeps
// its response open past it does not hold the client.
func (g *Gateway) relayStream(w http.ResponseWriter, r *http.Request, ctx context.Context, wk *workers.Worker,
	dec *routing.Decision, resp *http.Response, rec *requestRecord) attemptResult {
	defer resp.Body.Close()
	br := sseReaders.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() {
		br.Reset(nil)
		sseReaders.Put(br)
	}()

	first := answerBuffers.Get().(*bytes.Buffer)
	first.Reset()
	defer putAnswerBuffer(first)
	sawDone, err := readEvent(br, first, maxFirstEvent)
	if err != nil && !(err == io.EOF && sawDone) {
		return g.bodyFailed(r, ctx, wk, err)
	}

	cw := g.newClientWriter(w, resp.Body)
	defer cw.done()
	g.writeHead(w, wk, dec, resp)
	h := w.Header()
	h["Cache-Control"] = []string{"no-cache"}
	h["X-Accel-Buffering"] = []string{"no"}
	w.WriteHeader(resp.StatusCode)
	rec.status = resp.StatusCode
	rec.ttft = g.opts.Now().Sub(rec.start)
	if cw.write(first.Bytes()) != nil || cw.flush() != nil {
		return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
	}

	midLine := false
	for err == nil && !sawDone {
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
		if cw.write(line) != nil {
			return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
		}
		midLine = line[len(line)-1] != '\n'
		if midLine {
			continue
		}
		if isBlank(line) {
			if !eventBuffered(br) && cw.flush() != nil {
				return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
			}
		} else if bytes.HasPrefix(line, doneLine) {
			// The blank line that ends the [DONE] event belongs to the
			// stream too; then it is over.
			line, err = br.ReadSlice('\n')
			if err == nil && isBlank(line) && cw.write(line) != nil {
				return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
			}
			err, sawDone = nil, true
		}
	}
	if sawDone {
		if cw.flush() != nil {
			return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
		}
		// Let the worker's last bytes (the end of its chunked body) arrive so
		// its connection is reused, but not for long.
		shortenIdle(resp.Body, doneGrace)
		_, _ = io.CopyN(io.Discard, br, 64<<10)
		return attemptResult{verdict: answered, outcome: routing.OutcomeSuccess, health: workers.HealthSuccess}
	}
	if r.Context().Err() != nil {
		return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
	}
	// The worker broke off (or stalled) mid-stream. Tokens already reached
	// the client, so no retry: end the stream with an error event.
	if midLine {
		_ = cw.write(eventEnd) // only a line longer than the buffer leaves one open
	}
	_ = cw.write(streamErrorEvent)
	_ = cw.flush()
	kind := failureKind(ctx)
	rec.err = "worker failed mid-stream (" + kind + ")"
	rec.streamFailed = true
	return attemptResult{verdict: answered, outcome: routing.OutcomeFailure, health: workers.HealthFailure, kind: kind}
}

// failureKind names a worker's failure after the answer began: a stall past
// the idle timeout, or a break.
func failureKind(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), errIdle) {
		return "timeout"
	}
	return "stream"
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
// ends one event, at most limit bytes. It reports whether the event was the
// [DONE] marker.
func readEvent(br *bufio.Reader, dst *bytes.Buffer, limit int) (done bool, err error) {
	for {
		line, err := br.ReadSlice('\n')
		dst.Write(line)
		if dst.Len() > limit {
			return false, errEventTooLarge
		}
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

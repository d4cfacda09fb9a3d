package handlers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// requestRecord gathers what the request log line and metrics report.
type requestRecord struct {
	id       string
	model    string // metric label: a served model or "unknown"
	worker   string
	decision string
	status   int
	attempts int
	stream   bool
	start    time.Time
	ttft     time.Duration // 0 when no byte reached the client
	err      string
}

var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody keeps one huge request from pinning its buffer in the pool.
const maxPooledBody = 1 << 20

// completion serves POST /v1/chat/completions and /v1/completions.
func (g *Gateway) completion(ep endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := requestRecord{id: requestID(r), model: "unknown", start: g.opts.Now()}
		w.Header()["X-Request-Id"] = []string{rec.id}
		defer g.finish(&rec)

		buf := bodyBuffers.Get().(*bytes.Buffer)
		buf.Reset()
		defer func() {
			if buf.Cap() <= maxPooledBody {
				bodyBuffers.Put(buf)
			}
		}()
		if aerr := g.readBody(w, r, buf); aerr != nil {
			g.fail(w, &rec, aerr)
			return
		}
		p, aerr := parseRequest(buf.Bytes(), ep)
		if aerr != nil {
			g.fail(w, &rec, aerr)
			return
		}
		rec.stream = p.Stream
		if !g.opts.Registry.KnowsModel(p.Model) {
			g.fail(w, &rec, errModelNotFound(p.Model))
			return
		}
		rec.model = p.Model
		g.proxy(w, r, ep, p, buf.Bytes(), &rec)
	}
}

func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, buf *bytes.Buffer) *apiError {
	limit := g.opts.MaxBodyBytes
	if r.ContentLength > limit {
		return errBodyTooLarge(limit)
	}
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength))
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		return nil
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return errBodyTooLarge(limit)
	}
	return errBadRequest("", "Could not read the request body: "+err.Error())
}

func (g *Gateway) fail(w http.ResponseWriter, rec *requestRecord, e *apiError) {
	rec.status = e.Status
	if rec.err == "" {
		rec.err = e.Message
	}
	writeError(w, e)
}

// finish records the request's metrics and its log line.
func (g *Gateway) finish(rec *requestRecord) {
	elapsed := g.opts.Now().Sub(rec.start)
	g.metrics.requests.WithLabelValues(rec.model, statusLabel(rec.status)).Inc()
	g.metrics.duration.WithLabelValues(rec.model).Observe(elapsed.Seconds())
	if rec.ttft > 0 {
		g.metrics.ttft.WithLabelValues(rec.model).Observe(rec.ttft.Seconds())
	}
	if !g.opts.LogRequests {
		return
	}
	level := slog.LevelInfo
	if rec.status >= 500 {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{
		slog.String("request_id", rec.id),
		slog.String("model", rec.model),
		slog.String("worker", rec.worker),
		slog.String("decision", rec.decision),
		slog.Int("status", rec.status),
		slog.Bool("stream", rec.stream),
		slog.Int("attempts", rec.attempts),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
	}
	if rec.ttft > 0 {
		attrs = append(attrs, slog.Float64("ttft_ms", float64(rec.ttft.Microseconds())/1000))
	}
	if rec.err != "" {
		attrs = append(attrs, slog.String("error", rec.err))
	}
	g.opts.Logger.LogAttrs(context.Background(), level, "request", attrs...)
}

// statusClientClosed is logged and counted when the client went away first
// (nginx's convention; never sent).
const statusClientClosed = 499

var statusLabels = func() (s [600]string) {
	for i := range s {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

func statusLabel(code int) string {
	if code >= 0 && code < len(statusLabels) {
		return statusLabels[code]
	}
	return strconv.Itoa(code)
}

// requestID returns the client's X-Request-Id when it is reasonable, else a
// new random one.
func requestID(r *http.Request) string {
	if v := r.Header.Get("X-Request-Id"); v != "" && len(v) <= 128 && printable(v) {
		return v
	}
	var b [32]byte
	const hex = "0123456789abcdef"
	x, y := rand.Uint64(), rand.Uint64()
	for i := range 16 {
		b[i] = hex[x>>(4*i)&0xf]
		b[16+i] = hex[y>>(4*i)&0xf]
	}
	return string(b[:])
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// drain reads what is left of an upstream body (bounded) so its connection
// can be reused, and closes it.
func drain(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, 64<<10)
	_ = body.Close()
}

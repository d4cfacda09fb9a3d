package handlers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// requestRecord gathers what the request log line and metrics report.
type requestRecord struct {
	id        string
	partition string
	model     string // metric label: a served model or "unknown"
	worker    string
	decision  string
	status    int
	attempts  int
	stream    bool
	start     time.Time
	ttft      time.Duration // 0 when no byte reached the client
	err       string
	// streamFailed: the status was 200 but the stream broke off after its
	// first event; the log line says so at warning level.
	streamFailed bool
	// abort: an answer passed through as it came broke off; the client's
	// connection is cut so that it cannot take the part for the whole.
	abort bool
	// bodyBytes is what the request holds of the gateway's body budget.
	bodyBytes int64
}

// maxBodyPrealloc bounds the buffer reserved from a request's declared
// Content-Length before its bytes arrive: a client must not make the
// gateway allocate memory it has not sent.
const maxBodyPrealloc = 64 << 10

// completion serves POST /v1/chat/completions and /v1/completions.
func (g *Gateway) completion(ep endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := requestRecord{id: requestID(r), model: "unknown", start: g.opts.Now()}
		w.Header()["X-Request-Id"] = []string{rec.id}
		defer g.finish(&rec)
		defer func() {
			// A panic once the answer has begun (a stream half sent): the
			// recoverer's JSON 500 would land inside it. Log it here, where
			// its stack is, and cut the connection instead.
			if rec.status == 0 {
				return // nothing sent: the recoverer answers 500
			}
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					g.opts.Logger.Error("panic serving request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				}
				panic(http.ErrAbortHandler)
			}
		}()

		// The body is not pooled: the transport may still be reading it
		// after the worker answered, and it must outlive every attempt.
		body, aerr := g.readBody(w, r, &rec)
		if aerr != nil {
			g.fail(w, &rec, aerr)
			return
		}
		p, aerr := parseRequest(body, ep)
		if aerr != nil {
			g.fail(w, &rec, aerr)
			return
		}
		rec.stream = p.Stream
		switch g.opts.Registry.KnowsModel(p.Model) {
		case workers.ModelUnknown:
			g.fail(w, &rec, errModelNotFound(p.Model))
			return
		case workers.ModelPending:
			// Some worker has not told us its models yet: "not found" would
			// be final to the client, so say "not now".
			g.fail(w, &rec, errNoWorker(p.Model))
			return
		}
		rec.model = p.Model
		credit, aerr := g.admit(r, p, &rec)
		if aerr != nil {
			g.fail(w, &rec, aerr)
			return
		}
		if rec.status == statusClientClosed {
			return // gone while waiting for capacity: nothing to answer
		}
		if credit != nil {
			cost := g.cost(p)
			defer func() {
				// Served tokens are the estimate of what a success was given;
				// a failed or abandoned request was given nothing to count.
				outcome, served := admissionOutcome(&rec), 0
				if outcome == admission.OutcomeSuccess {
					served = cost
				}
				credit.Release(outcome, served)
			}()
		}
		var prefix []uint64
		if g.opts.BlockBytes > 0 {
			h := g.hashers.Get().(*routing.BlockHasher)
			defer g.hashers.Put(h)
			h.ResetSeed(routing.CacheSeed(p.Model, p.CacheSalt))
			if writeRoutingText(h, body, ep) == nil {
				prefix = h.Hashes()
			}
		}
		g.proxy(w, r, ep, p, body, prefix, credit, &rec)
		if rec.abort {
			// After the deferred releases and the log line: net/http cuts
			// the connection instead of ending the body cleanly.
			panic(http.ErrAbortHandler)
		}
	}
}

func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, rec *requestRecord) ([]byte, *apiError) {
	limit := g.opts.MaxBodyBytes
	if r.ContentLength > limit {
		// Unread, the body would be drained by net/http before the 413 goes
		// out, with no deadline: close instead.
		w.Header().Set("Connection", "close")
		return nil, errBodyTooLarge(limit)
	}
	rc := http.NewResponseController(w)
	if g.opts.BodyReadTimeout > 0 {
		_ = rc.SetReadDeadline(g.opts.Now().Add(g.opts.BodyReadTimeout))
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 512), maxBodyPrealloc)))
	// The body takes its share of the budget as its bytes arrive: a declared
	// length costs nothing until it is sent.
	_, err := buf.ReadFrom(budgetReader{r: http.MaxBytesReader(w, r.Body, limit), g: g, rec: rec})
	if err == nil {
		if g.opts.BodyReadTimeout > 0 {
			_ = rc.SetReadDeadline(time.Time{}) // the connection may serve the next request
		}
		return buf.Bytes(), nil
	}
	if errors.Is(err, errOverBudget) {
		w.Header().Set("Connection", "close")
		return nil, errBodiesOverBudget()
	}
	// The deadline stays: after an error net/http would drain the unread
	// body to reuse the connection, and a client that never sends it must
	// not hold the connection open.
	w.Header().Set("Connection", "close")
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, errBodyTooLarge(limit)
	}
	return nil, errBadRequest("", "Could not read the request body: "+err.Error())
}

func (g *Gateway) fail(w http.ResponseWriter, rec *requestRecord, e *apiError) {
	rec.status = e.Status
	if rec.err == "" {
		rec.err = e.Message
	}
	writeError(w, e)
}

// errOverBudget: a body's next bytes would take the bodies held over
// limits.max_buffered_body_bytes.
var errOverBudget = errors.New("request bodies over budget")

// budgetReader charges the bytes it reads to the body budget.
type budgetReader struct {
	r   io.Reader
	g   *Gateway
	rec *requestRecord
}

func (b budgetReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 && !b.g.holdBody(b.rec, int64(n)) {
		return 0, errOverBudget
	}
	return n, err
}

// holdBody takes n bytes of the body budget for rec, or reports false
// (taking nothing) when that would exceed it.
func (g *Gateway) holdBody(rec *requestRecord, n int64) bool {
	budget := g.opts.MaxBufferedBodyBytes
	if budget <= 0 {
		return true
	}
	if g.bodyBytes.Add(n) > budget {
		g.bodyBytes.Add(-n)
		return false
	}
	rec.bodyBytes += n
	return true
}

// finish records the request's metrics and its log line, and gives back
// its share of the body budget.
func (g *Gateway) finish(rec *requestRecord) {
	if rec.bodyBytes > 0 {
		g.bodyBytes.Add(-rec.bodyBytes)
		rec.bodyBytes = 0
	}
	now := g.opts.Now()
	elapsed := now.Sub(rec.start)
	g.metrics.requests.WithLabelValues(rec.model, statusLabel(rec.status)).Inc()
	g.metrics.duration.WithLabelValues(rec.model).Observe(elapsed.Seconds())
	if rec.ttft > 0 {
		g.metrics.ttft.WithLabelValues(rec.model).Observe(rec.ttft.Seconds())
	}
	if !g.opts.LogRequests {
		return
	}
	level := slog.LevelInfo
	if rec.status >= 500 || rec.streamFailed {
		level = slog.LevelWarn
	}
	if w := g.opts.RequestLog; w != nil {
		if g.opts.Logger.Enabled(context.Background(), level) {
			writeRequestLine(w, requestLine{time: now, level: level, rec: rec, duration: elapsed})
		}
		return
	}
	g.opts.Logger.LogAttrs(context.Background(), level, "request", requestAttrs(rec, elapsed)...)
}

// requestAttrs are the attributes of a request's log line (requestLine
// writes the same, in the same order).
func requestAttrs(rec *requestRecord, elapsed time.Duration) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("request_id", rec.id),
		slog.String("partition", rec.partition),
		slog.String("model", rec.model),
		slog.String("worker", rec.worker),
		slog.String("decision", rec.decision),
		slog.Int("status", rec.status),
		slog.Bool("stream", rec.stream),
		slog.Int("attempts", rec.attempts),
		slog.Float64("duration_ms", millis(elapsed)),
	}
	if rec.ttft > 0 {
		attrs = append(attrs, slog.Float64("ttft_ms", millis(rec.ttft)))
	}
	if rec.err != "" {
		attrs = append(attrs, slog.String("error", rec.err))
	}
	return attrs
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

// admit resolves the request's partition and, with admission on, waits for
// the fleet to have room for it. A nil credit with no error means no gate
// (or the client left while waiting: rec.status says 499).
func (g *Gateway) admit(r *http.Request, p *parsed, rec *requestRecord) (*admission.Credit, *apiError) {
	parts, aerr := g.resolvePartition(r, rec)
	if aerr != nil || g.opts.Admission == nil {
		return nil, aerr
	}
	credit, err := g.opts.Admission.Admit(r.Context(), admission.Request{ID: rec.id, Model: p.Model, Partition: rec.partition, Cost: g.cost(p)})
	if errors.Is(err, admission.ErrUnknownPartition) && g.partitions.Load() != parts {
		// A reload removed the partition while the request was resolved or
		// queued: its key is resolved again with the new partitions, once.
		if _, aerr := g.resolvePartition(r, rec); aerr != nil {
			return nil, aerr
		}
		credit, err = g.opts.Admission.Admit(r.Context(), admission.Request{ID: rec.id, Model: p.Model, Partition: rec.partition, Cost: g.cost(p)})
	}
	var full *admission.QueueFullError
	switch {
	case err == nil:
		return credit, nil
	case errors.As(err, &full):
		return nil, errQueueFull(rec.partition, full.RetryAfter)
	case errors.Is(err, admission.ErrQueueTimeout):
		return nil, errQueueTimeout(rec.partition)
	case errors.Is(err, admission.ErrUnknownPartition):
		return nil, errUnknownPartition()
	case r.Context().Err() != nil:
		rec.status, rec.err = statusClientClosed, "client closed the request while it waited for capacity"
		return nil, nil
	}
	return nil, errInternal()
}

// resolvePartition sets rec.partition from the request's API key or trusted
// header, with the partitions in force now, which it returns.
func (g *Gateway) resolvePartition(r *http.Request, rec *requestRecord) (*admission.Resolver, *apiError) {
	rec.partition = "default"
	parts := g.partitions.Load()
	if parts == nil {
		return nil, nil
	}
	var trusted string
	if h := parts.TrustedHeader(); h != "" {
		trusted = r.Header.Get(h)
	}
	part, err := parts.Resolve(r.Header.Get("Authorization"), trusted)
	switch {
	case errors.Is(err, admission.ErrInvalidAPIKey):
		return parts, errInvalidAPIKey()
	case err != nil:
		return parts, errUnknownPartition()
	}
	rec.partition = part
	return parts, nil
}

// cost is a request's estimated tokens: what it reserves when routed, what
// admission charges its partition.
func (g *Gateway) cost(p *parsed) int {
	return g.opts.Router.EstimatedWork(&routing.Request{PromptTokens: p.promptTokens, MaxTokens: p.maxTokens(), Choices: p.choices()})
}

// choices is how many completions the request generates: n, or best_of
// when larger (each best_of candidate is generated in full).
func (p *parsed) choices() int {
	c := 1
	if p.N != nil {
		c = max(c, *p.N)
	}
	if p.BestOf != nil {
		c = max(c, *p.BestOf)
	}
	return c
}

// admissionOutcome is how the request ended, for its partition's counts.
func admissionOutcome(rec *requestRecord) admission.Outcome {
	switch {
	case rec.status == statusClientClosed:
		return admission.OutcomeCancelled
	case rec.status >= 200 && rec.status < 300 && !rec.streamFailed:
		return admission.OutcomeSuccess
	}
	return admission.OutcomeFailure
}

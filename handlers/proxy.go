package handlers

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// verdict is how one attempt on one worker ended.
type verdict int

const (
	// answered: the client has its answer (success, a passed-through 4xx,
	// or a stream that failed after its first event); stop.
	answered verdict = iota
	// retryable: nothing reached the client; try another worker.
	retryable
	// gone: the client went away; stop without answering.
	gone
)

// attemptResult is one attempt's verdict, the routing outcome it reports,
// and, for a retryable failure, the error the client gets if no attempt is left.
type attemptResult struct {
	verdict verdict
	outcome routing.Outcome
	err     *apiError
}

// proxy routes the request, sends it, and retries on another worker while
// nothing has reached the client.
func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request, ep endpoint, p *parsed, body []byte, rec *requestRecord) {
	rreq := routing.Request{Model: p.Model, PromptTokens: p.promptTokens, MaxTokens: p.maxTokens(), Stream: p.Stream}
	var last *apiError
	for rec.attempts < g.opts.MaxAttempts {
		if rec.attempts > 0 {
			g.metrics.retries.Inc()
			if !sleepBackoff(r.Context(), rec.attempts, g.opts.BackoffBase, g.opts.BackoffMax) {
				rec.status = statusClientClosed
				return
			}
		}
		dec, err := g.opts.Router.Route(&rreq, g.pool)
		if err != nil {
			break
		}
		wk := g.opts.Registry.Get(dec.Worker.ID)
		if wk == nil || !wk.Breaker.Begin(g.opts.Now()) {
			// Removed, or its half-open trial was taken since routing looked:
			// not an attempt, just a worker to skip.
			dec.Done(routing.OutcomeCancelled)
			rreq.Exclude = append(rreq.Exclude, dec.Worker.ID)
			continue
		}
		rec.attempts++
		rec.worker, rec.decision = wk.ID(), string(dec.Label)
		g.metrics.decisions.WithLabelValues(p.Model, rec.decision).Inc()

		release := wk.Acquire()
		res := g.attempt(w, r, ep, wk, dec, body, rec)
		release()
		dec.Done(res.outcome)

		switch res.verdict {
		case answered:
			return
		case gone:
			rec.status = statusClientClosed
			rec.err = "client closed the request"
			return
		}
		last = res.err
		rreq.Exclude = append(rreq.Exclude, wk.ID())
	}
	if last == nil {
		last = errNoWorker(p.Model)
	}
	g.fail(w, rec, last)
}

// attempt sends the request to wk once and relays or judges the answer.
func (g *Gateway) attempt(w http.ResponseWriter, r *http.Request, ep endpoint, wk *workers.Worker,
	dec *routing.Decision, body []byte, rec *requestRecord) attemptResult {
	ctx := r.Context()
	up, err := wk.NewRequest(ctx, ep.path(), body)
	if err != nil {
		wk.Breaker.Neutral()
		return attemptResult{verdict: retryable, outcome: routing.OutcomeCancelled, err: errInternal()}
	}
	up.Header["X-Request-Id"] = []string{rec.id}
	if accept := r.Header["Accept"]; accept != nil {
		up.Header["Accept"] = accept
	}
	resp, err := g.opts.Transport.RoundTrip(up)
	if err != nil {
		if ctx.Err() != nil {
			wk.Breaker.Neutral()
			return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
		}
		kind := transportErrorKind(err)
		g.workerFailed(wk, kind)
		return attemptResult{verdict: retryable, outcome: routing.OutcomeFailure,
			err: errUpstream("Worker " + wk.ID() + " failed: " + kind + ".")}
	}

	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			return g.relayStream(w, r, wk, dec, resp, rec)
		}
		return g.relayBody(w, r, wk, dec, resp, rec)
	case code == http.StatusTooManyRequests:
		// The worker is full, not broken: try another, and if none is left
		// tell the client what the worker said.
		g.opts.Registry.Metrics.UpstreamErrors.WithLabelValues(wk.ID(), "status_429").Inc()
		wk.Breaker.Neutral()
		return g.retryOrPass(w, wk, resp, rec, routing.OutcomeCancelled)
	case code >= 400 && code < 500:
		// The request's own fault: the worker's answer goes to the client as it is.
		wk.Breaker.Neutral()
		return g.passThrough(w, wk, dec, resp, rec)
	case code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		g.workerFailed(wk, "status_5xx")
		drain(resp.Body)
		return attemptResult{verdict: retryable, outcome: routing.OutcomeFailure,
			err: errUpstream("Worker " + wk.ID() + " answered " + resp.Status + ".")}
	default:
		// A 500 is the worker failing this request; retrying it elsewhere
		// would likely fail the same way, so the client hears of it now.
		g.workerFailed(wk, "status_5xx")
		msg := upstreamMessage(resp)
		g.fail(w, rec, errUpstream("Worker "+wk.ID()+" failed the request ("+resp.Status+"): "+msg))
		return attemptResult{verdict: answered, outcome: routing.OutcomeFailure}
	}
}

func (g *Gateway) workerFailed(wk *workers.Worker, kind string) {
	g.opts.Registry.Metrics.UpstreamErrors.WithLabelValues(wk.ID(), kind).Inc()
	wk.Breaker.Failure(g.opts.Now())
}

// retryOrPass keeps a retryable status's body so the last attempt can pass it on.
func (g *Gateway) retryOrPass(w http.ResponseWriter, wk *workers.Worker, resp *http.Response, rec *requestRecord, o routing.Outcome) attemptResult {
	if rec.attempts < g.opts.MaxAttempts {
		drain(resp.Body)
		return attemptResult{verdict: retryable, outcome: o, err: errUpstream("Worker " + wk.ID() + " answered " + resp.Status + ".")}
	}
	return g.passThrough(w, wk, nil, resp, rec)
}

// passThrough relays a worker's non-2xx answer unchanged.
func (g *Gateway) passThrough(w http.ResponseWriter, wk *workers.Worker, dec *routing.Decision, resp *http.Response, rec *requestRecord) attemptResult {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return attemptResult{verdict: retryable, outcome: routing.OutcomeFailure, err: errUpstream("Worker " + wk.ID() + " broke off its answer.")}
	}
	g.writeHead(w, wk, dec, resp)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	rec.status = resp.StatusCode
	rec.err = string(body)
	return attemptResult{verdict: answered, outcome: routing.OutcomeCancelled}
}

// writeHead sets the response headers a relayed answer carries.
func (g *Gateway) writeHead(w http.ResponseWriter, wk *workers.Worker, dec *routing.Decision, resp *http.Response) {
	h := w.Header()
	if ct := resp.Header["Content-Type"]; ct != nil {
		h["Content-Type"] = ct
	}
	h["X-Kvgate-Worker"] = []string{wk.ID()}
	if dec != nil {
		h["X-Kvgate-Decision"] = []string{string(dec.Label)}
	}
}

// upstreamMessage extracts a worker's error message from its body, bounded.
func upstreamMessage(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if e, ok := decodeErrorMessage(b); ok {
		return e
	}
	return strings.TrimSpace(string(b))
}

func transportErrorKind(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return "connect"
	}
	return "transport"
}

// sleepBackoff waits before retry n (1-based): full jitter over an
// exponentially growing window, so retries from many requests spread out.
// It reports false when ctx ended first.
func sleepBackoff(ctx context.Context, n int, base, limit time.Duration) bool {
	if base <= 0 {
		return ctx.Err() == nil
	}
	window := base << min(n-1, 20)
	if window > limit || window <= 0 {
		window = limit
	}
	t := time.NewTimer(rand.N(window + 1))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

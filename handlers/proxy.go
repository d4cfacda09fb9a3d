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

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// verdict is how one attempt on one worker ended.
type verdict int

const (
	// gone: the client went away; stop without answering. (The zero value:
	// an attempt that panics counts as gone for its releases.)
	gone verdict = iota
	// answered: the client has its answer (success, a passed-through 4xx,
	// or a stream that failed after its first event); stop.
	answered
	// retryable: nothing reached the client; try another worker.
	retryable
)

// attemptResult is one attempt's verdict, what it tells routing and the
// circuit breaker, and, for a retryable failure, what the client gets if no
// attempt is left.
type attemptResult struct {
	verdict verdict
	outcome routing.Outcome
	health  workers.Health
	kind    string    // failure kind for kvgate_upstream_errors_total
	err     *apiError // retryable: the error if this was the last attempt
	replay  *replay   // retryable 429: the worker's answer, if it was the last
}

// replay is a worker's answer kept to pass on if no other worker takes the request.
type replay struct {
	status     int
	header     http.Header
	body       []byte
	retryAfter string
	worker     string // who said it, and why it was asked (X-Kvgate-Worker, X-Kvgate-Decision)
	decision   string
}

// errorBodyGrace bounds the wait for the body of a worker's error answer:
// the status already says what happened, and a worker that stalls its error
// body must not hold the retry for the whole idle timeout.
const errorBodyGrace = 10 * time.Second

// proxy routes the request, sends it, and re-routes it to another worker
// while nothing has reached the client.
func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request, ep endpoint, p *parsed, body []byte, prefix []uint64,
	credit *admission.Credit, rec *requestRecord) {
	rreq := routing.Request{Model: p.Model, PromptTokens: p.promptTokens, MaxTokens: p.maxTokens(), Choices: p.choices(), Stream: p.Stream, Prefix: prefix,
		Partition: rec.partition, SingleTarget: p.singleTarget()}
	if credit != nil && g.seeding {
		// The proof a seed must claim; redeeming it changes nothing else.
		if proof, err := credit.Redeem(rec.id, p.Model, rec.partition); err == nil {
			rreq.Proof = proof
		}
	}
	var last *apiError
	var lastReplay *replay
	// A failed attempt's decision stays open until the retry's is taken, so
	// the request holds a reservation, and with it its admission slot, all
	// the way: released first, it would leave a gap in which a queued request
	// is dispatched into the slot this one still needs.
	var retried *routing.Decision
	var retriedOutcome routing.Outcome
	defer func() { retried.Done(retriedOutcome) }()
	for rec.attempts < g.opts.MaxAttempts {
		dec, err := g.opts.Router.Route(&rreq, g.pool)
		retried.Done(retriedOutcome)
		retried = nil
		if err != nil {
			break
		}
		// The routing reservation now counts this request: admission stops
		// counting its credit (no gap, no double count past this point).
		credit.Routed()
		wk := g.opts.Registry.Get(dec.Worker.ID)
		if wk == nil || wk.Identity() != (workers.Identity{ID: dec.Worker.ID, Generation: dec.Worker.Generation, Revision: dec.Worker.Revision}) {
			// Removed or replaced since routing looked: the decision was for
			// another incarnation and fails closed (a seed's lease with it).
			// Not an attempt.
			if dec.Seed() {
				g.metrics.decisions.WithLabelValues(p.Model, string(routing.LabelSeedRejectedIdentity)).Inc()
			}
			retried, retriedOutcome = retryAfter(dec, routing.OutcomeCancelled)
			rreq.Exclude = append(rreq.Exclude, dec.Worker.ID)
			continue
		}
		ticket, ok := wk.BeginAttempt(g.opts.Now())
		if !ok {
			// Its half-open trial was taken since routing looked: skip it.
			retried, retriedOutcome = retryAfter(dec, routing.OutcomeCancelled)
			rreq.Exclude = append(rreq.Exclude, dec.Worker.ID)
			continue
		}
		if rec.attempts > 0 {
			g.metrics.retries.Inc()
			if !sleepBackoff(r.Context(), rec.attempts, g.opts.BackoffBase, g.opts.BackoffMax) {
				wk.EndAttempt(ticket, workers.HealthNeutral, g.opts.Now())
				dec.Done(routing.OutcomeCancelled)
				rec.status, rec.err = statusClientClosed, "client closed the request"
				return
			}
		}
		rec.attempts++
		rec.worker, rec.decision = wk.ID(), string(dec.Label)
		g.metrics.decisions.WithLabelValues(p.Model, rec.decision).Inc()
		if len(prefix) > 0 && rec.attempts == 1 {
			g.metrics.match.WithLabelValues(p.Model).Observe(float64(dec.MatchedBlocks) / float64(len(prefix)))
		}

		if dec.Seed() {
			g.metrics.seeds.WithLabelValues(rec.partition).Inc()
		}
		res := g.attempt(w, r, ep, wk, dec, ticket, body, rec)
		if dec.Seed() {
			g.metrics.seeds.WithLabelValues(rec.partition).Dec()
			outcome := routing.LabelSeedFailed
			if res.outcome == routing.OutcomeSuccess {
				outcome = routing.LabelSeedCommitted
			}
			if res.outcome != routing.OutcomeCancelled {
				g.metrics.decisions.WithLabelValues(p.Model, string(outcome)).Inc()
			}
		}
		switch res.verdict {
		case answered:
			return
		case gone:
			rec.status, rec.err = statusClientClosed, "client closed the request"
			return
		}
		last, lastReplay = res.err, res.replay
		rreq.Exclude = append(rreq.Exclude, wk.ID())
		retried, retriedOutcome = retryAfter(dec, res.outcome)
	}
	if lastReplay != nil {
		// The last worker tried was full (429) and no other could take the
		// request: the client hears what that worker said, Retry-After too.
		g.writeReplay(w, lastReplay, rec)
		return
	}
	if last == nil {
		last = errNoWorker(p.Model)
	}
	g.fail(w, rec, last)
}

// retryAfter settles a decision the request moves on from without an answer,
// and returns it to be released once the retry is routed (a seed's lease
// ends at once instead: its prefix may seed or spill again).
func retryAfter(dec *routing.Decision, o routing.Outcome) (*routing.Decision, routing.Outcome) {
	if dec.Seed() {
		dec.Done(o)
		return nil, o
	}
	dec.Settle(o)
	return dec, o
}

// attempt sends the request to wk once and relays or judges the answer.
// Whatever happens, panics included, it releases the worker's in-flight
// count and the breaker ticket exactly once, and the routing decision too
// unless the verdict is retryable (proxy then hands it to retryAfter).
func (g *Gateway) attempt(w http.ResponseWriter, r *http.Request, ep endpoint, wk *workers.Worker,
	dec *routing.Decision, ticket workers.Ticket, body []byte, rec *requestRecord) (res attemptResult) {
	release := wk.Acquire()
	ctx, cancel := context.WithCancelCause(r.Context())
	defer func() {
		cancel(nil)
		release()
		if res.verdict != retryable {
			dec.Done(res.outcome) // a retryable one is proxy's: retryAfter
		}
		wk.EndAttempt(ticket, res.health, g.opts.Now())
		if res.health == workers.HealthFailure || res.kind != "" {
			g.opts.Registry.Metrics.UpstreamErrors.WithLabelValues(wk.ID(), res.kind).Inc()
		}
	}()
	res.outcome = routing.OutcomeCancelled

	up, err := wk.NewRequest(ctx, ep.path(), body)
	if err != nil {
		return attemptResult{verdict: retryable, outcome: routing.OutcomeCancelled, err: errInternal()}
	}
	up.Header["X-Request-Id"] = []string{rec.id}
	if accept := r.Header["Accept"]; accept != nil {
		up.Header["Accept"] = accept
	}
	resp, err := g.opts.Transport.RoundTrip(up)
	if err != nil {
		if r.Context().Err() != nil {
			return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
		}
		return failed(transportErrorKind(err), errUpstream("Worker "+wk.ID()+" failed: "+transportErrorKind(err)+"."))
	}
	// From here on the worker must keep sending: a body that stalls longer
	// than the idle timeout is a failed attempt, not a hung client.
	resp.Body = newIdleBody(resp.Body, g.opts.IdleTimeout, cancel)

	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			return g.relayStream(w, r, ctx, wk, dec, resp, rec)
		}
		return g.relayBody(w, r, ctx, wk, dec, resp, rec)
	}
	shortenIdle(resp.Body, errorBodyGrace)
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests:
		// Full, not broken: try another worker, and keep this answer in case
		// none is left.
		rp, err := readReplay(resp, wk, dec)
		if err != nil {
			return g.bodyFailed(r, ctx, wk, err)
		}
		return attemptResult{verdict: retryable, outcome: routing.OutcomeCancelled, health: workers.HealthNeutral,
			kind: "status_429", replay: rp}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		// The client's credentials never reach a worker: the gateway sends
		// the worker's own api_key. A refusal is about that key, which the
		// client cannot fix, so another worker is tried and this one is
		// charged for it.
		msg := upstreamMessage(resp)
		g.opts.Logger.Error("worker refused the gateway's credentials: check its api_key",
			"worker", wk.ID(), "status", code, "message", msg)
		return failed("auth", errUpstream("Worker "+wk.ID()+" refused the gateway's credentials ("+resp.Status+")."))
	case code >= 400 && code < 500:
		// The request's own fault: the worker's answer goes to the client as it is.
		rp, err := readReplay(resp, wk, dec)
		if err != nil {
			return g.bodyFailed(r, ctx, wk, err)
		}
		g.writeReplay(w, rp, rec)
		return attemptResult{verdict: answered, outcome: routing.OutcomeCancelled, health: workers.HealthNeutral}
	case code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout:
		// The status says it all: close without waiting for the body (the
		// connection is not reused, which an error path can afford).
		resp.Body.Close()
		return failed("status_5xx", errUpstream("Worker "+wk.ID()+" answered "+resp.Status+"."))
	default:
		// A 500 is the worker failing this request; retrying it elsewhere
		// would most likely fail the same way, so the client hears of it now.
		msg := upstreamMessage(resp)
		g.writeHeadFor(w, wk, dec)
		g.fail(w, rec, errUpstream("Worker "+wk.ID()+" failed the request ("+resp.Status+"): "+msg))
		return attemptResult{verdict: answered, outcome: routing.OutcomeFailure, health: workers.HealthFailure, kind: "status_5xx"}
	}
}

// failed is a retryable worker failure of the given kind.
func failed(kind string, e *apiError) attemptResult {
	return attemptResult{verdict: retryable, outcome: routing.OutcomeFailure, health: workers.HealthFailure, kind: kind, err: e}
}

// bodyFailed judges a failed read of a worker's body before anything was
// sent: the client left, the worker stalled past the idle timeout, or the
// worker broke off.
func (g *Gateway) bodyFailed(r *http.Request, ctx context.Context, wk *workers.Worker, err error) attemptResult {
	if r.Context().Err() != nil {
		return attemptResult{verdict: gone, outcome: routing.OutcomeCancelled}
	}
	if errors.Is(context.Cause(ctx), errIdle) {
		return failed("timeout", errUpstream("Worker "+wk.ID()+" stalled for "+g.opts.IdleTimeout.String()+"."))
	}
	switch {
	case errors.Is(err, errEmptyAnswer):
		return failed("transport", errUpstream("Worker "+wk.ID()+" sent an empty answer."))
	case errors.Is(err, errMalformedAnswer):
		return failed("transport", errUpstream("Worker "+wk.ID()+" sent an answer that is not JSON."))
	case errors.Is(err, errEventTooLarge):
		return failed("stream", errUpstream("Worker "+wk.ID()+" sent a first event larger than 4 MiB."))
	}
	return failed("stream", errUpstream("Worker "+wk.ID()+" broke off its answer."))
}

// readReplay keeps a worker's non-2xx answer (bounded) to relay later.
func readReplay(resp *http.Response, wk *workers.Worker, dec *routing.Decision) (*replay, error) {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	return &replay{status: resp.StatusCode, header: resp.Header, body: body, retryAfter: resp.Header.Get("Retry-After"),
		worker: wk.ID(), decision: string(dec.Label)}, nil
}

// writeReplay relays a kept answer unchanged: status, type, Retry-After, body.
func (g *Gateway) writeReplay(w http.ResponseWriter, rp *replay, rec *requestRecord) {
	h := w.Header()
	if ct := rp.header["Content-Type"]; ct != nil {
		h["Content-Type"] = ct
	}
	if rp.retryAfter != "" {
		h.Set("Retry-After", rp.retryAfter)
	}
	h["X-Kvgate-Worker"] = []string{rp.worker}
	h["X-Kvgate-Decision"] = []string{rp.decision}
	w.WriteHeader(rp.status)
	_, _ = w.Write(rp.body)
	rec.status = rp.status
	if msg, ok := decodeErrorMessage(rp.body); ok {
		rec.err = msg
	}
}

// writeHeadFor sets the headers that say who answered.
func (g *Gateway) writeHeadFor(w http.ResponseWriter, wk *workers.Worker, dec *routing.Decision) {
	h := w.Header()
	h["X-Kvgate-Worker"] = []string{wk.ID()}
	h["X-Kvgate-Decision"] = []string{string(dec.Label)}
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

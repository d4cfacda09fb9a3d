// Package workers owns the engine workers behind the gateway: who they are
// (id, generation, revision), whether they may take traffic (active health
// checks, a passive circuit breaker, draining), what load they report
// (telemetry pollers for vLLM and SGLang), and the pooled HTTP transport that
// reaches them.
//
// It decides routability, never placement: which worker gets a request is
// the routing package's call, made on a read-only view of this registry.
//
// Identity is what makes a routing decision safe to act on later. A worker's
// generation is bumped whenever it may have lost its state (re-registered, or
// back from being unhealthy: the process may have restarted and its KV cache
// with it); its revision is bumped when what it serves or its capacity
// changes. A decision bound to an older (generation, revision) fails closed.
//
// Membership changes at run time (membership.go) never cut a request: Drain
// takes a worker out of routing, Retire drains it and removes it once idle,
// Replace swaps in a new incarnation (new generation) while the old one
// drains, and Update changes models or capacity in place (new revision).
package workers

// Package admission decides who goes next when the fleet is full: requests
// wait in one queue per partition (tenant), and whenever the fleet has a free
// request slot the scheduler dispatches the waiting request with the smallest
// start tag of start-time fair queueing, weighted by partition weight and
// costed in estimated tokens. It is work-conserving: a slot is never left
// idle while anything waits, so an idle partition's share goes to whoever is
// waiting, and a partition that comes back gets its share at once.
//
// A dispatch issues a Credit bound to (request id, model, partition,
// scheduler generation). Redeeming it yields a Proof that can be claimed
// exactly once; distribution seeding requires a claimed proof before it may
// seed a clean worker.
//
// The package refuses two things. It never picks a worker: that is routing's
// job, and the scheduler knows the fleet only as a number of free request
// slots (Capacity). And in enforce mode it never lets a request through
// without a credit. It does no I/O and reads time only through a Clock, so
// the gateway, the tests and the fleet simulator run the same decisions.
// Errors are typed values; the gateway's handlers map them to HTTP.
//
// # The credit → routing hand-off
//
// A request occupies exactly one slot from dispatch to completion, counted by
// exactly one side at any time, never by none:
//
//   - Capacity.Available is the gateway's free slots across the fleet,
//     counting every request it has routed (telemetry plus routing
//     reservations), and nothing else.
//   - The scheduler subtracts its outstanding credits: those issued and
//     neither Routed nor Released. Free slots = Available() − outstanding.
//
// The gateway therefore calls, in this order:
//
//  1. Admit (or Submit) → a Credit.
//  2. Route the request: routing takes its reservation, which Available now
//     counts.
//  3. Credit.Routed(): the scheduler stops counting the credit. Between 2 and
//     3 the request is briefly counted twice, which can only delay a dispatch,
//     never over-admit; Routed then retries dispatch at once, so the slot is
//     not lost. Calling Routed before the reservation exists would open a gap
//     in which the slot is counted by nobody.
//  4. On completion: release the routing reservation (Decision.Done), then
//     Credit.Release, which dispatches into the slot just freed. If routing
//     failed, skip 3 and Release at once: the credit's slot returns to the
//     scheduler.
//
// Kick tells the scheduler that capacity may have grown for other reasons (a
// telemetry sample arrived). Available is called under the scheduler's lock:
// it must be cheap, and the gateway must never call the scheduler while
// holding a lock that Available takes.
package admission

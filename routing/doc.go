// Package routing decides which worker serves each request.
//
// A Router holds the policy and the reservations: the work this gateway has
// dispatched that the workers' telemetry cannot show yet. It takes a
// reservation in the same critical section as the choice, so a burst of
// requests between two telemetry polls spreads out instead of all landing on
// whichever worker looked idlest at the last poll. Every Decision releases
// its reservation exactly once, whatever happens to the request.
//
// The package refuses I/O and the wall clock: it reads a Pool (a read-only
// view of the workers, defined here by what routing needs) and takes a clock
// and a random source, so the gateway, the unit tests and the fleet simulator
// run the very same decisions.
package routing

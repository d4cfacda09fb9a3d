// Package discovery finds engine workers at run time and keeps the registry
// in step with what it finds. DNS is its one source: the address records of
// a name (a Kubernetes headless Service lists one per ready pod), A, AAAA
// or both as Options.IPFamily says, or the SRV records of a _service._proto
// name, with their ports.
//
// It decides membership, never routability: a discovered worker is added
// like any other and takes traffic only after its first healthy check. One
// whose record is missing from Options.RemoveAfter answers in a row is
// drained (its requests in flight finish) before it is removed, and one
// whose record comes back while it drains is restored as it was (same
// generation, its prefix ownership kept): a readiness blip must not cost
// the busiest worker its cache affinity. It touches only the workers it
// added: static and admin-added workers are never changed, an address whose
// id a worker of another origin holds is skipped, and an operator's drain
// is never undone.
//
// It refuses to empty the fleet on bad news: a failed lookup, or one that
// finds no record at all, keeps the workers found before (logged and
// counted) and counts for nothing, since a DNS outage looks exactly like a
// fleet scaled to zero.
package discovery

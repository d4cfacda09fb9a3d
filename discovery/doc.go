// Package discovery finds engine workers at run time and keeps the registry
// in step with what it finds. DNS is its one source: the address records of
// a name (a Kubernetes headless Service lists one per ready pod), or the SRV
// records of a _service._proto name, with their ports.
//
// It decides membership, never routability: a discovered worker is added
// like any other and takes traffic only after its first healthy check, and
// one whose record disappears is drained (its requests in flight finish)
// before it is removed. It touches only the workers it added: static and
// admin-added workers are never changed, and an address whose id a worker of
// another origin holds is skipped.
//
// It refuses to empty the fleet on bad news: a failed lookup, or one that
// finds no record at all, keeps the workers found before (logged and
// counted), since a DNS outage looks exactly like a fleet scaled to zero.
package discovery

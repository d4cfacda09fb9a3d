package admission

import (
	"errors"
	"fmt"
	"time"
)

// Errors the gateway maps to HTTP answers.
var (
	// ErrInvalidAPIKey: keys are configured and the request carries none, or
	// one no partition owns (401 invalid_api_key).
	ErrInvalidAPIKey = errors.New("admission: invalid API key")
	// ErrUnknownPartition: a partition name no configuration knows, from the
	// trusted header or a request, or a queued request's partition was
	// removed by Reconfigure.
	ErrUnknownPartition = errors.New("admission: unknown partition")
	// ErrQueueFull is matched (errors.Is) by every *QueueFullError (429).
	ErrQueueFull = errors.New("admission: partition queue full")
	// ErrQueueTimeout: the request waited QueueTimeout without a free slot (503).
	ErrQueueTimeout = errors.New("admission: queue timeout")
)

// Errors of credits and proofs. Seeding fails closed on any of them.
var (
	// ErrProofMismatch: the credit was issued for another request id, model
	// or partition.
	ErrProofMismatch = errors.New("admission: proof does not match the request")
	// ErrProofStale: the credit was issued by an older scheduler generation
	// (before a Reconfigure).
	ErrProofStale = errors.New("admission: proof from an older scheduler generation")
	// ErrProofExpired: the credit is older than CreditTTL.
	ErrProofExpired = errors.New("admission: proof expired")
	// ErrProofCancelled: the credit was already released.
	ErrProofCancelled = errors.New("admission: proof of a released credit")
	// ErrProofReplayed: the credit was already redeemed, or the proof already
	// claimed.
	ErrProofReplayed = errors.New("admission: proof replayed")
)

// QueueFullError refuses a request whose partition queue is at
// MaxQueuePerPartition.
type QueueFullError struct {
	Partition string
	Queued    int
	// RetryAfter estimates when the partition's queue will have room: its
	// length over its recent dispatch rate, whole seconds, at least 1s and at
	// most QueueTimeout (by then every waiting request has left).
	RetryAfter time.Duration
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("admission: partition %q queue full (%d waiting), retry after %s", e.Partition, e.Queued, e.RetryAfter)
}

// Is makes errors.Is(err, ErrQueueFull) hold.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

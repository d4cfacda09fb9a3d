package admission

import (
	"crypto/sha256"
	"fmt"
	"strings"
)

// Resolver maps a request's credentials to its partition.
//
// It keeps only SHA-256 digests of the API keys, looked up in a map: the
// lookup compares digests, so its timing tells nothing about the bytes of any
// key, and no key survives construction in clear to be logged or leaked.
type Resolver struct {
	byDigest   map[[sha256.Size]byte]string
	partitions map[string]bool
	def        string
	header     string
}

// NewResolver returns a Resolver over partitions. trustedHeader names the
// header an authenticating proxy sets to the partition name; empty turns it
// off. Keys must be non-empty and owned by one partition each.
func NewResolver(partitions []Partition, defaultPartition, trustedHeader string) (*Resolver, error) {
	if err := validatePartitions(partitions, defaultPartition); err != nil {
		return nil, err
	}
	r := &Resolver{
		byDigest:   map[[sha256.Size]byte]string{},
		partitions: make(map[string]bool, len(partitions)),
		def:        defaultPartition,
		header:     trustedHeader,
	}
	for i, p := range partitions {
		r.partitions[p.Name] = true
		for j, key := range p.APIKeys {
			// Errors name the position of a key, never its bytes.
			if strings.TrimSpace(key) != key || key == "" || strings.ContainsAny(key, " \t") {
				return nil, fmt.Errorf("admission: partitions[%d] (%q): api_keys[%d] is empty or contains whitespace", i, p.Name, j)
			}
			d := sha256.Sum256([]byte(key))
			if owner, dup := r.byDigest[d]; dup {
				return nil, fmt.Errorf("admission: partitions[%d] (%q): api_keys[%d] is already a key of partition %q", i, p.Name, j, owner)
			}
			r.byDigest[d] = p.Name
		}
	}
	return r, nil
}

// TrustedHeader is the configured trusted header name ("" when off).
func (r *Resolver) TrustedHeader() string { return r.header }

// Resolve returns the partition of a request from its Authorization header
// and the value of the trusted header ("" when absent).
//
// A trusted header value, when the header is configured, names the partition
// and wins over any key: the proxy in front has authenticated the caller. (It
// is trusted only if that proxy strips it from client requests.) An unknown
// name there is ErrUnknownPartition. Otherwise, with keys configured, the
// bearer token must be one of them (ErrInvalidAPIKey); with none, every
// request belongs to the default partition.
func (r *Resolver) Resolve(authorization, trustedHeaderValue string) (string, error) {
	if r.header != "" {
		if name := strings.TrimSpace(trustedHeaderValue); name != "" {
			if !r.partitions[name] {
				return "", fmt.Errorf("%w: %q in header %s", ErrUnknownPartition, name, r.header)
			}
			return name, nil
		}
	}
	if len(r.byDigest) == 0 {
		return r.def, nil
	}
	token, ok := bearerToken(authorization)
	if !ok {
		return "", fmt.Errorf("%w: no bearer token", ErrInvalidAPIKey)
	}
	if name, ok := r.byDigest[sha256.Sum256([]byte(token))]; ok {
		return name, nil
	}
	return "", ErrInvalidAPIKey
}

// bearerToken extracts the token of "Bearer TOKEN": the scheme in any case,
// any run of spaces or tabs around and between; a token must be one word.
func bearerToken(h string) (string, bool) {
	h = strings.Trim(h, " \t")
	i := strings.IndexAny(h, " \t")
	if i < 0 || !strings.EqualFold(h[:i], "Bearer") {
		return "", false
	}
	token := strings.TrimLeft(h[i:], " \t")
	if token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

// Package mooncake reads request traces in the format released with the
// Mooncake paper (FAST '25): one JSON object a line with an arrival time, the
// prompt and output lengths, and the prompt as a list of 512-token block ids
// (equal ids at equal positions mean an identical prefix).
//
// The load generator replays such a trace against real endpoints and the
// fleet simulator replays it in virtual time; both read it here. The package
// checks what the format promises and refuses what it cannot honour: a record
// whose blocks cannot hold its input_length is an error, not a prompt
// silently shorter than the trace says.
package mooncake

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	json "github.com/goccy/go-json"
)

// BlockTokens is the size of a trace block: one hash_id names 512 tokens.
const BlockTokens = 512

// Record is one line of a trace.
type Record struct {
	Timestamp    float64  `json:"timestamp"` // ms from the start of the trace
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// ReadFile reads the first limit records (all when limit <= 0) of the trace
// at path.
func ReadFile(path string, limit int) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	recs, err := Read(f, limit)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return recs, nil
}

// Read parses the first limit records (all when limit <= 0), one JSON
// object a line, skipping blank lines.
func Read(r io.Reader, limit int) ([]Record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a 1M-token prompt is ~15 MB of ids
	var recs []Record
	for line := 1; sc.Scan(); line++ {
		if limit > 0 && len(recs) >= limit {
			break
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec, err := parse(b)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		recs = append(recs, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("no records")
	}
	return recs, nil
}

func parse(b []byte) (Record, error) {
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("decode: %w", err)
	}
	switch {
	case rec.Timestamp < 0:
		return rec, fmt.Errorf("negative timestamp %v", rec.Timestamp)
	case rec.InputLength < 1:
		return rec, fmt.Errorf("input_length must be at least 1, got %d", rec.InputLength)
	case rec.InputLength > len(rec.HashIDs)*BlockTokens:
		return rec, fmt.Errorf("input_length %d needs %d blocks of %d tokens, hash_ids has %d",
			rec.InputLength, (rec.InputLength+BlockTokens-1)/BlockTokens, BlockTokens, len(rec.HashIDs))
	}
	return rec, nil
}

// Offsets is when each record arrives relative to the earliest one, with
// time compressed by scale (2 replays twice as fast).
func Offsets(recs []Record, scale float64) []time.Duration {
	if len(recs) == 0 {
		return nil
	}
	first := recs[0].Timestamp
	for _, r := range recs {
		first = min(first, r.Timestamp)
	}
	out := make([]time.Duration, len(recs))
	for i, r := range recs {
		out[i] = time.Duration((r.Timestamp - first) / scale * float64(time.Millisecond))
	}
	return out
}

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	json "github.com/goccy/go-json"
)

// Mooncake traces describe a prompt as KV blocks of this many tokens.
const (
	blockTokens = 512
	blockChars  = blockTokens * charsPerToken
)

// traceRecord is one line of a Mooncake trace.
type traceRecord struct {
	Timestamp    float64 `json:"timestamp"` // ms from the start of the trace
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// readTraceFile reads the first limit records (all when limit <= 0) of the
// Mooncake trace at path.
func readTraceFile(path string, limit int) ([]traceRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	recs, err := readTrace(f, limit)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return recs, nil
}

// readTrace parses one JSON object a line, skipping blank lines. A record
// whose blocks cannot hold its input_length is an error rather than a prompt
// silently shorter than the trace says.
func readTrace(r io.Reader, limit int) ([]traceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a 1M-token prompt is ~15 MB of ids
	var recs []traceRecord
	for line := 1; sc.Scan(); line++ {
		if limit > 0 && len(recs) >= limit {
			break
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec, err := parseTraceLine(b)
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

func parseTraceLine(b []byte) (traceRecord, error) {
	var rec traceRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("decode: %w", err)
	}
	switch {
	case rec.Timestamp < 0:
		return rec, fmt.Errorf("negative timestamp %v", rec.Timestamp)
	case rec.InputLength < 1:
		return rec, fmt.Errorf("input_length must be at least 1, got %d", rec.InputLength)
	case rec.InputLength > len(rec.HashIDs)*blockTokens:
		return rec, fmt.Errorf("input_length %d needs %d blocks of %d tokens, hash_ids has %d",
			rec.InputLength, (rec.InputLength+blockTokens-1)/blockTokens, blockTokens, len(rec.HashIDs))
	}
	return rec, nil
}

// tracePrompts replays a trace's prompts: block id b always expands to the
// same blockChars of text, derived from b alone, so requests that share a
// block-id prefix in the trace share a text prefix on the wire, and a
// prefix cache sees the reuse the trace recorded.
type tracePrompts struct {
	recs          []traceRecord
	defaultTokens int
}

var _ workload = (*tracePrompts)(nil)

func (t *tracePrompts) size() int { return len(t.recs) }

// maxTokens is the trace's output_length, or the --max-tokens default for a
// record that has none.
func (t *tracePrompts) maxTokens(i int) int {
	if n := t.recs[i].OutputLength; n > 0 {
		return n
	}
	return t.defaultTokens
}

// appendPrompt appends input_length*charsPerToken characters: every block in
// full but the last, which is cut to make up the length.
func (t *tracePrompts) appendPrompt(dst []byte, i int) []byte {
	rec := &t.recs[i]
	remaining := rec.InputLength * charsPerToken
	for _, id := range rec.HashIDs {
		if remaining <= 0 {
			break
		}
		n := min(remaining, blockChars)
		dst = appendText(dst, blockKey(id), n)
		remaining -= n
	}
	return dst
}

func blockKey(id int64) uint64 { return mixKey(domainBlock, 0, uint64(id)) }

// traceOffsets is when each record arrives relative to the earliest one,
// with time compressed by scale (2 replays twice as fast).
func traceOffsets(recs []traceRecord, scale float64) []time.Duration {
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

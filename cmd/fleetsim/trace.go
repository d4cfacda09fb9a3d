package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvgate/kvgate/routing"
)

// traceBlockTokens is the size of a Mooncake trace's blocks: one hash_id
// names 512 tokens.
const traceBlockTokens = 512

// traceRecord is one line of a Mooncake trace.
type traceRecord struct {
	Timestamp    float64  `json:"timestamp"` // ms from the start of the trace
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// readTraceFile reads a trace into a workload of blocks of blockTokens
// tokens (see traceWorkload).
func readTraceFile(path string, limit int, model string, blockTokens int) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	recs, err := readTrace(f, limit)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return traceWorkload("trace:"+filepath.Base(path), recs, model, blockTokens)
}

// readTrace parses the first limit records (all when limit <= 0), one JSON
// object a line, skipping blank lines. A record whose blocks cannot hold its
// input_length is an error rather than a prompt silently shorter than the
// trace says.
func readTrace(r io.Reader, limit int) ([]traceRecord, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var recs []traceRecord
	for line := 1; sc.Scan(); line++ {
		if limit > 0 && len(recs) >= limit {
			break
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var rec traceRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		switch {
		case rec.Timestamp < 0:
			return nil, fmt.Errorf("line %d: negative timestamp %v", line, rec.Timestamp)
		case rec.InputLength < 1:
			return nil, fmt.Errorf("line %d: input_length must be at least 1, got %d", line, rec.InputLength)
		case rec.InputLength > len(rec.HashIDs)*traceBlockTokens:
			return nil, fmt.Errorf("line %d: input_length %d needs %d blocks of %d tokens, hash_ids has %d", line,
				rec.InputLength, (rec.InputLength+traceBlockTokens-1)/traceBlockTokens, traceBlockTokens, len(rec.HashIDs))
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

// traceWorkload turns trace records into requests, arrivals relative to the
// earliest record. With blocks of 512 tokens a hash_id is one block; a
// smaller block size that divides 512 splits each id into 512/blockTokens
// sub-blocks, so the engine caches at a finer grain while the trace's
// sharing stays exactly what it recorded. Only full blocks are hashed: a
// partial tail could not be reused by an engine, and the gateway does not
// hash it either. A record without output counts one output token, the least
// an engine generates.
func traceWorkload(name string, recs []traceRecord, model string, blockTokens int) (*Workload, error) {
	if blockTokens < 1 || traceBlockTokens%blockTokens != 0 {
		return nil, fmt.Errorf("block tokens %d: a trace needs a size that divides %d", blockTokens, traceBlockTokens)
	}
	split := uint64(traceBlockTokens / blockTokens)
	seed := routing.ModelSeed(model)
	first := recs[0].Timestamp
	for _, r := range recs {
		first = min(first, r.Timestamp)
	}
	w := &Workload{Name: name, Model: model, BlockTokens: blockTokens, Requests: make([]Request, len(recs))}
	var ids []uint64
	for i, r := range recs {
		full := r.InputLength / blockTokens
		ids = ids[:0]
		for k := range full {
			id := r.HashIDs[uint64(k)/split]
			ids = append(ids, id*split+uint64(k)%split)
		}
		w.Requests[i] = Request{
			At:           time.Duration((r.Timestamp - first) * float64(time.Millisecond)),
			PromptTokens: r.InputLength,
			OutputTokens: max(r.OutputLength, 1),
			Prefix:       routing.ChainIDs(seed, ids, make([]uint64, 0, full)),
		}
	}
	// A trace is in arrival order; sort defensively, keeping equal times in
	// file order.
	sortByArrival(w.Requests)
	return w, nil
}

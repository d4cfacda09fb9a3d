package main

import (
	"fmt"
	"path/filepath"

	"github.com/kvgate/kvgate/mooncake"
	"github.com/kvgate/kvgate/routing"
)

// traceBlockTokens is the size of a Mooncake trace's blocks.
const traceBlockTokens = mooncake.BlockTokens

// readTraceFile reads a trace into a workload of blocks of blockTokens
// tokens (see traceWorkload).
func readTraceFile(path string, limit int, model string, blockTokens int) (*Workload, error) {
	recs, err := mooncake.ReadFile(path, limit)
	if err != nil {
		return nil, err
	}
	return traceWorkload("trace:"+filepath.Base(path), recs, model, blockTokens)
}

// traceWorkload turns trace records into requests, arrivals relative to the
// earliest record. With blocks of 512 tokens a hash_id is one block; a
// smaller block size that divides 512 splits each id into 512/blockTokens
// sub-blocks, so the engine caches at a finer grain while the trace's
// sharing stays exactly what it recorded. Only full blocks are hashed: a
// partial tail could not be reused by an engine, and the gateway does not
// hash it either. A record without output counts one output token, the least
// an engine generates.
func traceWorkload(name string, recs []mooncake.Record, model string, blockTokens int) (*Workload, error) {
	if blockTokens < 1 || traceBlockTokens%blockTokens != 0 {
		return nil, fmt.Errorf("block tokens %d: a trace needs a size that divides %d", blockTokens, traceBlockTokens)
	}
	split := uint64(traceBlockTokens / blockTokens)
	seed := routing.ModelSeed(model)
	arrivals := mooncake.Offsets(recs, 1)
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
			At:           arrivals[i],
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

package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/mooncake"
	"github.com/kvgate/kvgate/routing"
)

func TestTraceWorkloadHashesFullBlocks(t *testing.T) {
	recs := []mooncake.Record{
		{Timestamp: 1000, InputLength: 1100, OutputLength: 4, HashIDs: []uint64{7, 8, 9}},
		{Timestamp: 1500, InputLength: 1024, OutputLength: 0, HashIDs: []uint64{7, 8}},
	}
	seed := routing.ModelSeed("m")

	t.Run("512-token blocks: one hash an id", func(t *testing.T) {
		wl, err := traceWorkload("t", recs, "m", 512)
		require.NoError(t, err)
		require.Len(t, wl.Requests, 2)
		assert.Equal(t, time.Duration(0), wl.Requests[0].At, "arrivals start at the first record")
		assert.Equal(t, 500*time.Millisecond, wl.Requests[1].At)
		assert.Equal(t, routing.ChainIDs(seed, []uint64{7, 8}, nil), wl.Requests[0].Prefix, "the partial third block is not hashed")
		assert.Equal(t, wl.Requests[0].Prefix, wl.Requests[1].Prefix, "equal ids, equal prefix")
		assert.Equal(t, 1, wl.Requests[1].OutputTokens, "a record without output generates one token")
	})
	t.Run("smaller blocks split each id", func(t *testing.T) {
		wl, err := traceWorkload("t", recs, "m", 256)
		require.NoError(t, err)
		assert.Equal(t, routing.ChainIDs(seed, []uint64{14, 15, 16, 17}, nil), wl.Requests[0].Prefix)
		assert.Len(t, wl.Requests[1].Prefix, 4)
	})
	t.Run("a size that does not divide 512", func(t *testing.T) {
		_, err := traceWorkload("t", recs, "m", 100)
		assert.ErrorContains(t, err, "divides 512")
	})
}

func TestReadTraceFileOfTestdata(t *testing.T) {
	wl, err := readTraceFile(testTrace, 10, "m", 512)
	require.NoError(t, err)
	assert.Equal(t, "trace:trace.jsonl", wl.Name)
	assert.Len(t, wl.Requests, 10)

	_, err = readTraceFile("testdata/missing.jsonl", 0, "m", 512)
	assert.ErrorContains(t, err, "open trace")
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/routing"
)

func TestReadTrace(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		limit   int
		want    int
		wantErr string
	}{
		{"skips blank lines", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n\n" +
			"{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 2, \"hash_ids\": [1, 2]}\n", 0, 2, ""},
		{"limit", "{\"timestamp\": 0, \"input_length\": 10, \"hash_ids\": [1]}\n{\"timestamp\": 1, \"input_length\": 10, \"hash_ids\": [1]}\n", 1, 1, ""},
		{"too few blocks", `{"timestamp": 0, "input_length": 513, "hash_ids": [1]}`, 0, 0, "line 1: input_length 513 needs 2 blocks"},
		{"no input", `{"timestamp": 0, "input_length": 0, "hash_ids": [1]}`, 0, 0, "input_length must be at least 1"},
		{"negative time", `{"timestamp": -1, "input_length": 1, "hash_ids": [1]}`, 0, 0, "negative timestamp"},
		{"not json", `{"timestamp": `, 0, 0, "line 1"},
		{"empty", "\n", 0, 0, "no records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := readTrace(strings.NewReader(tt.in), tt.limit)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Len(t, recs, tt.want)
		})
	}
}

func TestTraceWorkloadHashesFullBlocks(t *testing.T) {
	recs := []traceRecord{
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

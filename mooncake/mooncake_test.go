package mooncake

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRead(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}

{"timestamp": 40, "input_length": 1536, "output_length": 2, "hash_ids": [0, 1, 5], "extra": true}
{"timestamp": 90, "input_length": 10, "output_length": 1, "hash_ids": [9]}`
	recs, err := Read(strings.NewReader(in), 0)
	require.NoError(t, err)
	require.Len(t, recs, 3, "blank lines skipped")
	assert.Equal(t, Record{Timestamp: 40, InputLength: 1536, OutputLength: 2, HashIDs: []uint64{0, 1, 5}}, recs[1])

	recs, err = Read(strings.NewReader(in), 2)
	require.NoError(t, err)
	assert.Len(t, recs, 2, "limit")
}

func TestReadRejects(t *testing.T) {
	for name, in := range map[string]string{
		"not json":           `{"timestamp": `,
		"negative time":      `{"timestamp": -1, "input_length": 1, "hash_ids": [1]}`,
		"no input":           `{"timestamp": 0, "input_length": 0, "hash_ids": [1]}`,
		"blocks too few":     `{"timestamp": 0, "input_length": 513, "hash_ids": [1]}`,
		"empty":              ``,
		"wrong id type":      `{"timestamp": 0, "input_length": 1, "hash_ids": ["a"]}`,
		"negative block ids": `{"timestamp": 0, "input_length": 1, "hash_ids": [-1]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Read(strings.NewReader(in), 0)
			assert.Error(t, err)
		})
	}
	_, err := Read(strings.NewReader("{\"timestamp\": 0, \"input_length\": 1, \"hash_ids\": [1]}\nnope"), 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 2")
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"timestamp": 0, "input_length": 5, "hash_ids": [3]}`+"\n"), 0o600))
	recs, err := ReadFile(path, 0)
	require.NoError(t, err)
	assert.Len(t, recs, 1)
	_, err = ReadFile(filepath.Join(t.TempDir(), "missing.jsonl"), 0)
	assert.Error(t, err)
}

func TestOffsets(t *testing.T) {
	recs := []Record{{Timestamp: 1000}, {Timestamp: 1000}, {Timestamp: 1040}, {Timestamp: 3000}}
	assert.Equal(t, []time.Duration{0, 0, 40 * time.Millisecond, 2 * time.Second}, Offsets(recs, 1))
	assert.Equal(t, []time.Duration{0, 0, 10 * time.Millisecond, 500 * time.Millisecond}, Offsets(recs, 4))
	assert.Nil(t, Offsets(nil, 1))
}

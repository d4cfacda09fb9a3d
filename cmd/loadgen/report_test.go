package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sampleSummary() summary {
	return summary{
		duration:     4 * time.Second,
		sent:         110,
		completed:    100,
		outputTokens: 3200,
		errors:       map[string]int64{"http_503": 7, kindStreamError: 2, kindDropped: 1},
		ttft:         latencyQuantiles{12 * time.Millisecond, 30 * time.Millisecond, 95 * time.Millisecond},
		e2e:          latencyQuantiles{250 * time.Millisecond, 400 * time.Millisecond, 1500 * time.Millisecond},
	}
}

func TestWriteJSONFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.json")
	require.NoError(t, writeJSONFile(path, sampleSummary()))
	b, err := os.ReadFile(path)
	require.NoError(t, err)

	var fields map[string]any
	require.NoError(t, json.Unmarshal(b, &fields))
	want := []string{"requests_per_s", "output_tokens_per_s", "ttft_p50", "ttft_p90", "ttft_p99",
		"e2e_p50", "e2e_p90", "e2e_p99", "completed", "errors", "duration_s", "sent"}
	assert.ElementsMatch(t, want, keys(fields), "exactly the documented fields")

	assert.InDelta(t, 25.0, fields["requests_per_s"], 1e-9)
	assert.InDelta(t, 800.0, fields["output_tokens_per_s"], 1e-9)
	assert.InDelta(t, 0.012, fields["ttft_p50"], 1e-12, "seconds, not ms")
	assert.InDelta(t, 1.5, fields["e2e_p99"], 1e-12)
	assert.InDelta(t, 4.0, fields["duration_s"], 1e-12)
	assert.EqualValues(t, 100, fields["completed"])
	assert.EqualValues(t, 110, fields["sent"])
	assert.Equal(t, map[string]any{"http_503": 7.0, "stream_error": 2.0, "dropped": 1.0}, fields["errors"])
}

func TestJSONReportErrorsIsAnObjectWhenEmpty(t *testing.T) {
	b, err := json.Marshal(newJSONReport(summary{}))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"errors":{}`)
}

func TestWriteJSONFileUnwritable(t *testing.T) {
	assert.Error(t, writeJSONFile(filepath.Join(t.TempDir(), "missing", "r.json"), sampleSummary()))
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, writeTable(&buf, sampleSummary()))
	out := buf.String()
	lines := strings.Split(out, "\n")
	find := func(prefix string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		t.Fatalf("no line %q in\n%s", prefix, out)
		return ""
	}
	assert.Equal(t, "requests/s 25.00", find("requests/s"))
	assert.Equal(t, "output tokens/s 800.00", find("output tokens/s"))
	assert.Equal(t, "completed 100", find("completed"))
	assert.Equal(t, "errors 10", find("errors"))
	assert.Equal(t, "http_503 7", find("  http_503"))
	assert.Equal(t, "dropped 1", find("  dropped"))
	assert.Equal(t, "TTFT 12.00 30.00 95.00", find("TTFT"), "milliseconds")
	assert.Equal(t, "E2E 250.00 400.00 1500.00", find("E2E"))
	assert.Less(t, strings.Index(out, "dropped"), strings.Index(out, "http_503"), "kinds sorted")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

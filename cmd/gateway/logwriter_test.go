package main

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/config"
)

type syncBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.buf.Write(p)
}

func (s *syncBuffer) snapshot() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String(), s.writes
}

func TestBufferedLogBatchesAndFlushes(t *testing.T) {
	out := &syncBuffer{}
	b := newBufferedLog(out)
	for range 100 {
		_, err := b.Write([]byte("line\n"))
		require.NoError(t, err)
	}
	text, writes := out.snapshot()
	assert.Empty(t, text, "nothing written before the flush interval")
	assert.Zero(t, writes)
	require.Eventually(t, func() bool { s, _ := out.snapshot(); return len(s) == 500 }, 2*time.Second, 10*time.Millisecond,
		"lines reach the output within the flush interval")
	_, writes = out.snapshot()
	assert.Equal(t, 1, writes, "a hundred lines, one write")

	_, _ = b.Write([]byte("last\n"))
	require.NoError(t, b.Close())
	text, _ = out.snapshot()
	assert.Equal(t, 505, len(text), "Close flushes what is buffered")
}

// The gateway's JSON logger has the plain slog layout that handlers' direct
// request line reproduces (no source, no renamed keys, no added
// attributes), and only a JSON log sends request lines direct.
func TestRequestLinesMatchTheGatewayLogger(t *testing.T) {
	cfg := config.Default()
	var viaSlog, direct bytes.Buffer
	newLogger(cfg.Log, &viaSlog).Info("request", slog.String("request_id", "x"))
	assert.NotNil(t, jsonLogWriter(cfg.Log, &direct), "the default log is JSON: request lines go direct")
	cfg.Log.Format = "text"
	assert.Nil(t, jsonLogWriter(cfg.Log, &direct), "a text log keeps slog for request lines")
	line := viaSlog.String()
	assert.Regexp(t, `^\{"time":"[^"]+","level":"INFO","msg":"request","request_id":"x"\}\n$`, line,
		"newLogger's JSON layout is the one handlers/requestlog.go writes")
}

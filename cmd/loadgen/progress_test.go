package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is written by the progress goroutine and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestProgressRedrawsUntilStopped(t *testing.T) {
	rec := newRecorder(0)
	for range 3 {
		rec.markSent()
	}
	rec.record(result{e2e: time.Millisecond})
	rec.record(result{kind: "http_500"})

	var out lockedBuffer
	stop := startProgress(&out, rec, time.Now(), time.Millisecond)
	require.Eventually(t, func() bool { return strings.Count(out.String(), "\r") >= 3 }, 5*time.Second, time.Millisecond)
	stop()

	got := out.String()
	assert.True(t, strings.HasSuffix(got, "\n"), "stop ends the line")
	last := got[strings.LastIndex(got, "\r")+1:]
	assert.Contains(t, last, "sent 3  completed 1  errors 1")
	assert.Equal(t, got, out.String(), "nothing drawn after stop")
}

func TestProgressLine(t *testing.T) {
	assert.Equal(t, "elapsed    2.5s  sent 10  completed 8  errors 1  3.2 req/s",
		progressLine(2500*time.Millisecond, 10, 8, 1, 3.24))
}

func TestIsTerminal(t *testing.T) {
	assert.False(t, isTerminal(&bytes.Buffer{}))
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, isTerminal(f), "a regular file is not a terminal")
}

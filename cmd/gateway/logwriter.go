package main

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// bufferedLog batches log lines into few writes. With one log line per
// request, an unbuffered stderr costs a write syscall per request, a quarter
// of the gateway's handler time under load. Lines reach the output within
// flushEvery, or at once when the buffer fills, and Close flushes the rest.
type bufferedLog struct {
	mu   sync.Mutex
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

const (
	logBufferSize = 64 << 10
	flushEvery    = 200 * time.Millisecond
)

func newBufferedLog(out io.Writer) *bufferedLog {
	b := &bufferedLog{w: bufio.NewWriterSize(out, logBufferSize), stop: make(chan struct{}), done: make(chan struct{})}
	go b.flushLoop()
	return b
}

func (b *bufferedLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

func (b *bufferedLog) flushLoop() {
	defer close(b.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.flush()
		}
	}
}

func (b *bufferedLog) flush() {
	b.mu.Lock()
	_ = b.w.Flush()
	b.mu.Unlock()
}

// Close stops the flusher and writes out what is buffered.
func (b *bufferedLog) Close() error {
	close(b.stop)
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}

package main

import (
	"bytes"
	"io"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"

	json "github.com/goccy/go-json"
)

// bodyEncoder assembles request bodies from fragments marshalled once:
//
//	head + max_tokens + mid + prompt + tail
//
// Only max_tokens and the prompt vary between requests, and the prompt is
// JSON-safe by construction, so a body costs a few appends and no encoding.
type bodyEncoder struct {
	head, mid, tail []byte
}

// newBodyEncoder prepares the fragments for the chat or completions API.
func newBodyEncoder(endpoint, model string, stream, ignoreEOS bool) (*bodyEncoder, error) {
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	head := append([]byte(`{"model":`), m...)
	if stream {
		head = append(head, `,"stream":true,"stream_options":{"include_usage":true}`...)
	} else {
		head = append(head, `,"stream":false`...)
	}
	if ignoreEOS {
		head = append(head, `,"ignore_eos":true`...)
	}
	head = append(head, `,"max_tokens":`...)
	e := &bodyEncoder{head: head}
	if endpoint == endpointChat {
		e.mid = []byte(`,"messages":[{"role":"user","content":"`)
		e.tail = []byte(`"}]}`)
	} else {
		e.mid = []byte(`,"prompt":"`)
		e.tail = []byte(`"}`)
	}
	return e, nil
}

// appendBody appends the body of request i of w to dst.
func (e *bodyEncoder) appendBody(dst []byte, w workload, i int) []byte {
	dst = append(dst, e.head...)
	dst = strconv.AppendInt(dst, int64(w.maxTokens(i)), 10)
	dst = append(dst, e.mid...)
	dst = w.appendPrompt(dst, i)
	return append(dst, e.tail...)
}

// bodyPool recycles request bodies, and their buffers, between requests.
type bodyPool struct {
	bodies sync.Pool // *requestBody
}

// requestBody is one request's body bytes on their way to the wire.
//
// The transport reads the body from its own goroutine, possibly after the
// response is back (a server may answer before reading everything), so the
// buffer is recycled only when both sides are done with it: the transport
// (httptrace's WroteRequest, fired once the request is fully written or has
// failed) and the runner (release at the end of do). A body whose request
// was never written is left to the garbage collector.
//
// The body goes out as io.NopCloser(*bytes.Reader) on purpose: net/http
// sends the headers and an in-memory body of a known type in one write, but
// flushes the headers on their own before any other body type, which costs
// a syscall and a TCP segment a request on both sides of the benchmark.
type requestBody struct {
	buf    []byte
	reader bytes.Reader
	trace  httptrace.ClientTrace
	pool   *bodyPool

	writing atomic.Bool  // armed until WroteRequest for this use
	refs    atomic.Int32 // transport + runner
}

// get returns an empty body to append a request into.
func (p *bodyPool) get() *requestBody {
	if b, ok := p.bodies.Get().(*requestBody); ok {
		return b
	}
	b := &requestBody{buf: make([]byte, 0, 4<<10), pool: p}
	b.trace.WroteRequest = func(httptrace.WroteRequestInfo) {
		// net/http writes a request once (a POST without GetBody is never
		// retried); the guard keeps a stray second call from releasing a
		// later use of this body.
		if b.writing.CompareAndSwap(true, false) {
			b.release()
		}
	}
	return b
}

// open arms the body for one request and returns what goes in
// http.Request.Body.
func (b *requestBody) open() io.ReadCloser {
	b.reader.Reset(b.buf)
	b.refs.Store(2)
	b.writing.Store(true)
	return io.NopCloser(&b.reader)
}

// release drops one reference; the last one returns the body to the pool.
func (b *requestBody) release() {
	if b.refs.Add(-1) != 0 {
		return
	}
	b.reader.Reset(nil)
	b.buf = b.buf[:0]
	b.pool.bodies.Put(b)
}

package workers

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"time"
)

// TransportOptions size the pooled connections to the workers.
type TransportOptions struct {
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	IdleConnsPerWorker    int
	IdleConnTimeout       time.Duration
}

// NewTransport returns the HTTP transport used to reach workers: keep-alive
// pools sized per worker, no compression (SSE must flow event by event and
// engines do not compress), and bounded connect and header waits.
func NewTransport(o TransportOptions) *http.Transport {
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 nil, // workers are reached directly, never through an environment proxy
		DialContext:           dialer.DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   o.IdleConnsPerWorker,
		IdleConnTimeout:       o.IdleConnTimeout,
		ResponseHeaderTimeout: o.ResponseHeaderTimeout,
		DisableCompression:    true,
		ExpectContinueTimeout: 0,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
}

// NewRequest builds a POST of body to path on w, bound to ctx so that the
// client's cancellation reaches the worker.
func (w *Worker) NewRequest(ctx context.Context, path string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = []string{"application/json"}
	w.authorize(req)
	return req, nil
}

// authorize adds the worker's API key to req, if it has one.
func (w *Worker) authorize(req *http.Request) {
	if w.auth != nil {
		req.Header["Authorization"] = w.auth
	}
}

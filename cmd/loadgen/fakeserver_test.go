package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeBehavior is how the fake OpenAI server misbehaves, if at all.
type fakeBehavior int

const (
	behaveOK          fakeBehavior = iota
	behaveNoUsage                  // never sends a usage object
	behaveCutClean                 // stream ends, cleanly, without [DONE]
	behaveAbort                    // connection dropped mid-stream
	behaveErrorEvent               // data: {"error":...} after some content
	behaveBadUsage                 // usage chunk that is not JSON
	behaveBadJSON                  // non-streaming body that is not JSON
	behaveHang                     // never answers until the client goes away
	behaveStatus                   // replies with fakeConfig.status
	behaveOmitContent              // stream carries no content at all
)

type fakeConfig struct {
	behavior        fakeBehavior
	status          int
	firstTokenDelay time.Duration // between the role chunk and the first content
}

// fakeServer is a small OpenAI-compatible server on loopback: it emits one
// content chunk per max_tokens, and usage when stream_options asks for it.
type fakeServer struct {
	*httptest.Server
	cfg      fakeConfig
	requests atomic.Int64
	conns    atomic.Int64 // connections accepted

	mu   sync.Mutex
	last fakeRequest
	auth string
	path string
}

// fakeRequest is the request body as the fake server decoded it.
type fakeRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens int `json:"max_tokens"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	Prompt    string `json:"prompt"`
	IgnoreEOS bool   `json:"ignore_eos"`
}

func newFakeServer(t testing.TB, cfg fakeConfig) *fakeServer {
	t.Helper()
	f := &fakeServer{cfg: cfg}
	f.Server = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.conns.Add(1)
		}
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

// baseURL is the --url to give loadgen.
func (f *fakeServer) baseURL() string { return f.URL + "/v1" }

func (f *fakeServer) lastRequest() (fakeRequest, string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.auth, f.path
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	var req fakeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad body"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.last, f.auth, f.path = req, r.Header.Get("Authorization"), r.URL.Path
	f.mu.Unlock()

	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	if !chat && !strings.HasSuffix(r.URL.Path, "/completions") {
		http.NotFound(w, r)
		return
	}
	switch f.cfg.behavior {
	case behaveStatus:
		http.Error(w, `{"error":{"message":"injected"}}`, f.cfg.status)
		return
	case behaveHang:
		<-r.Context().Done()
		return
	}
	if req.Stream {
		f.stream(w, r, req, chat)
	} else {
		f.complete(w, req, chat)
	}
}

func (f *fakeServer) stream(w http.ResponseWriter, r *http.Request, req fakeRequest, chat bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	flusher := w.(http.Flusher)
	send := func(payload string) {
		fmt.Fprintf(w, "data: %s\n\n", payload)
		flusher.Flush()
	}
	if chat {
		send(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
	}
	if f.cfg.firstTokenDelay > 0 {
		select {
		case <-time.After(f.cfg.firstTokenDelay):
		case <-r.Context().Done():
			return
		}
	}
	n := req.MaxTokens
	if f.cfg.behavior == behaveOmitContent {
		n = 0
	}
	for i := range n {
		if i == n/2 {
			switch f.cfg.behavior {
			case behaveCutClean:
				return
			case behaveAbort:
				panic(http.ErrAbortHandler)
			case behaveErrorEvent:
				send(`{"error":{"message":"engine died","type":"server_error"}}`)
				send("[DONE]")
				return
			}
		}
		if chat {
			send(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}`)
		} else {
			send(`{"id":"c1","object":"text_completion","choices":[{"index":0,"text":"tok ","finish_reason":null}]}`)
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		switch f.cfg.behavior {
		case behaveNoUsage:
		case behaveBadUsage:
			send(`{"choices":[],"usage":{"completion_tokens":`)
		default:
			send(fmt.Sprintf(`{"id":"c1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":%d,"total_tokens":%d}}`, n, n+7))
		}
	}
	send("[DONE]")
}

func (f *fakeServer) complete(w http.ResponseWriter, req fakeRequest, chat bool) {
	time.Sleep(f.cfg.firstTokenDelay)
	w.Header().Set("Content-Type", "application/json")
	if f.cfg.behavior == behaveBadJSON {
		fmt.Fprint(w, `{"choices":[{"message":`)
		return
	}
	text := strings.Repeat("tok ", req.MaxTokens)
	body := map[string]any{"id": "c1"}
	if chat {
		body["choices"] = []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}}}
	} else {
		body["choices"] = []any{map[string]any{"index": 0, "text": text}}
	}
	if f.cfg.behavior != behaveNoUsage {
		body["usage"] = map[string]any{"prompt_tokens": 7, "completion_tokens": req.MaxTokens, "total_tokens": req.MaxTokens + 7}
	}
	_ = json.NewEncoder(w).Encode(body)
}

// closedURL is the base URL of a server that no longer listens.
func closedURL(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.NotFoundHandler())
	u := s.URL + "/v1"
	s.Close()
	require.NotEmpty(t, u)
	return u
}

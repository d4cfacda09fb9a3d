package simserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastEngine makes every simulated duration small, for real-time tests that
// must not wait.
func fastEngine(c *Config) {
	c.Engine.DecodeStepBase = time.Millisecond
	c.Engine.DecodeStepPerRequest = 10 * time.Microsecond
	c.Engine.PrefillTokensPerSec = 1e7
}

// startServer runs a simulator behind a loopback httptest server.
func startServer(t testing.TB, mutate func(*Config)) (*Server, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.TimeScale = 0
	if mutate != nil {
		mutate(&cfg)
	}
	s, err := New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	// Cleanups run last first: close the simulator (releasing every
	// waiting handler) before the test server waits for its handlers.
	t.Cleanup(ts.Close)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s, ts.URL
}

func post(t testing.TB, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func get(t testing.TB, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func decodeBody[T any](t testing.TB, resp *http.Response) T {
	t.Helper()
	var v T
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &v), "body: %s", b)
	return v
}

// response is the union of chat and text completion bodies and chunks.
type response struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// text is the generated text of a non-streamed response or one chunk.
func (r response) text() string {
	if len(r.Choices) == 0 {
		return ""
	}
	c := r.Choices[0]
	switch {
	case c.Message != nil:
		return c.Message.Content
	case c.Delta != nil:
		return c.Delta.Content
	default:
		return c.Text
	}
}

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// stream is a parsed SSE response.
type stream struct {
	chunks []response
	done   bool // ended with data: [DONE]
}

func (s stream) text() string {
	var b strings.Builder
	for _, c := range s.chunks {
		b.WriteString(c.text())
	}
	return b.String()
}

// readStream parses SSE events until [DONE] or the end of the body; err is
// a malformed event or the body's read error (nil at a clean end). It does
// not fail the test itself, so goroutines may call it.
func readStream(body io.Reader) (stream, error) {
	var s stream
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		payload, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			return s, fmt.Errorf("not an SSE data line: %q", line)
		}
		if string(payload) == "[DONE]" {
			s.done = true
			continue
		}
		var c response
		if err := json.Unmarshal(payload, &c); err != nil {
			return s, fmt.Errorf("chunk %s: %w", payload, err)
		}
		s.chunks = append(s.chunks, c)
	}
	return s, sc.Err()
}

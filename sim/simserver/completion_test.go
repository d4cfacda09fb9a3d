package simserver

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// longText is a prompt of many full blocks (64 bytes each by default).
var longText = strings.Repeat("the quick brown fox jumps over the lazy dog. ", 40)

func chatBody(extra string) string {
	return `{"model":"sim","messages":[{"role":"system","content":"` + longText + `"},{"role":"user","content":"hi"}]` + extra + `}`
}

func TestNonStreaming(t *testing.T) {
	cases := []struct {
		name, path, body, object string
		wantTokens               int
	}{
		{"chat", "/v1/chat/completions", chatBody(""), "chat.completion", DefaultMaxTokens},
		{"chat with max_tokens", "/v1/chat/completions", chatBody(`,"max_tokens":5`), "chat.completion", 5},
		{"chat with max_completion_tokens", "/v1/chat/completions", chatBody(`,"max_tokens":9,"max_completion_tokens":3`), "chat.completion", 3},
		{"completions", "/v1/completions", `{"model":"sim","prompt":"` + longText + `","max_tokens":7}`, "text_completion", 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, url := startServer(t, nil)
			resp := post(t, url+tc.path, tc.body)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			r := decodeBody[response](t, resp)

			assert.Equal(t, tc.object, r.Object)
			assert.Equal(t, "sim", r.Model)
			assert.NotEmpty(t, r.ID)
			require.Len(t, r.Choices, 1)
			require.NotNil(t, r.Choices[0].FinishReason)
			assert.Equal(t, "length", *r.Choices[0].FinishReason)
			if r.Choices[0].Message != nil {
				assert.Equal(t, "assistant", r.Choices[0].Message.Role)
			}
			assert.Len(t, strings.Fields(r.text()), tc.wantTokens, "one word a token")
			assert.True(t, strings.HasPrefix(r.text(), " "), "each word has a leading space")

			require.NotNil(t, r.Usage)
			assert.Equal(t, tc.wantTokens, r.Usage.CompletionTokens)
			assert.Positive(t, r.Usage.PromptTokens)
			assert.Equal(t, r.Usage.PromptTokens+r.Usage.CompletionTokens, r.Usage.TotalTokens)
			assert.Zero(t, r.Usage.PromptTokensDetails.CachedTokens, "a cold cache")

			again := decodeBody[response](t, post(t, url+tc.path, tc.body))
			assert.Greater(t, again.Usage.PromptTokensDetails.CachedTokens, r.Usage.PromptTokens/2,
				"the same prompt again hits the prefix cache")
			assert.Less(t, again.Usage.PromptTokensDetails.CachedTokens, again.Usage.PromptTokens)
		})
	}
}

func TestPromptTokens(t *testing.T) {
	cases := []struct {
		name, path, body string
		want             int
	}{
		{"chat roles and contents", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"abcdefgh"}]}`, 3}, // "user"+"abcdefgh" = 12 bytes
		{"chat content parts, images ignored", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"efgh"}]}]}`, 3},
		{"chat null content", "/v1/chat/completions",
			`{"messages":[{"role":"assistant","content":null},{"role":"user","content":"abcd"}]}`, 5}, // 9+4+4 = 17 bytes
		{"completions string", "/v1/completions", `{"prompt":"abcdefghi"}`, 3},
		{"completions strings", "/v1/completions", `{"prompt":["abcd","efgh"]}`, 2},
		{"completions token ids", "/v1/completions", `{"prompt":[1,2,3,4,5]}`, 5},
		{"empty prompt still one token", "/v1/completions", `{"prompt":""}`, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, url := startServer(t, nil)
			resp := post(t, url+tc.path, tc.body)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			r := decodeBody[response](t, resp)
			require.NotNil(t, r.Usage)
			assert.Equal(t, tc.want, r.Usage.PromptTokens)
		})
	}
}

func TestStreaming(t *testing.T) {
	cases := []struct {
		name, path, body, object string
		includeUsage             bool
	}{
		{"chat", "/v1/chat/completions", chatBody(`,"seed":3,"max_tokens":6`), "chat.completion.chunk", false},
		{"chat with usage", "/v1/chat/completions", chatBody(`,"seed":3,"max_tokens":6`), "chat.completion.chunk", true},
		{"completions", "/v1/completions", `{"prompt":"` + longText + `","seed":3,"max_tokens":6}`, "text_completion", false},
		{"completions with usage", "/v1/completions", `{"prompt":"` + longText + `","seed":3,"max_tokens":6}`, "text_completion", true},
	}
	for _, tc := range cases {
		for _, scale := range []float64{0, 0.01} {
			t.Run(fmt.Sprintf("%s at time scale %v", tc.name, scale), func(t *testing.T) {
				_, url := startServer(t, func(c *Config) { c.TimeScale = scale; fastEngine(c) })
				whole := decodeBody[response](t, post(t, url+tc.path, tc.body))

				streamed := strings.TrimSuffix(tc.body, "}") + `,"stream":true`
				if tc.includeUsage {
					streamed += `,"stream_options":{"include_usage":true}`
				}
				resp := post(t, url+tc.path, streamed+"}")
				require.Equal(t, http.StatusOK, resp.StatusCode)
				assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
				s, err := readStream(resp.Body)
				require.NoError(t, err)

				assert.True(t, s.done, "ends with [DONE]")
				assert.Equal(t, whole.text(), s.text(), "the deltas concatenate to the non-streamed text")
				tokens := s.chunks
				if tc.includeUsage {
					require.NotEmpty(t, tokens)
					last := tokens[len(tokens)-1]
					assert.Empty(t, last.Choices, "the usage chunk has no choices")
					require.NotNil(t, last.Usage)
					assert.Equal(t, 6, last.Usage.CompletionTokens)
					assert.Equal(t, whole.Usage.PromptTokens, last.Usage.PromptTokens)
					assert.Positive(t, last.Usage.PromptTokensDetails.CachedTokens, "the second request hits the cache")
					tokens = tokens[:len(tokens)-1]
				}
				require.Len(t, tokens, 6, "one chunk a token")
				for i, c := range tokens {
					assert.Equal(t, tc.object, c.Object)
					assert.Equal(t, tokens[0].ID, c.ID)
					assert.Nil(t, c.Usage)
					require.Len(t, c.Choices, 1)
					if c.Choices[0].Delta != nil {
						wantRole := ""
						if i == 0 {
							wantRole = "assistant"
						}
						assert.Equal(t, wantRole, c.Choices[0].Delta.Role, "chunk %d", i)
					}
					if i < len(tokens)-1 {
						assert.Nil(t, c.Choices[0].FinishReason)
					} else {
						require.NotNil(t, c.Choices[0].FinishReason)
						assert.Equal(t, "length", *c.Choices[0].FinishReason)
					}
				}
			})
		}
	}
}

func TestOutputIsDeterministicAcrossInstances(t *testing.T) {
	_, a := startServer(t, func(c *Config) { c.Seed = 1 })
	_, b := startServer(t, func(c *Config) { c.Seed = 2 })
	_, a2 := startServer(t, func(c *Config) { c.Seed = 1; c.TimeScale = 0.01; fastEngine(c) })
	text := func(url, body string) string {
		return decodeBody[response](t, post(t, url+"/v1/chat/completions", body)).text()
	}

	seeded := chatBody(`,"seed":42,"max_tokens":32`)
	assert.Equal(t, text(a, seeded), text(b, seeded), "the request's seed wins over the server's")

	unseeded := chatBody(`,"max_tokens":32`)
	assert.Equal(t, text(a, unseeded), text(a2, unseeded), "equal server seeds, equal text, whatever the timing")
	assert.NotEqual(t, text(a, unseeded), text(b, unseeded), "another server seed, another text")

	other := `{"messages":[{"role":"user","content":"something else"}],"seed":42,"max_tokens":32}`
	assert.NotEqual(t, text(a, seeded), text(a, other), "another prompt, another text")
}

func TestBadRequests(t *testing.T) {
	cases := []struct {
		name, path, body string
		status           int
		param, code      string
	}{
		{"not JSON", "/v1/chat/completions", `{"messages":`, 400, "", ""},
		{"no messages", "/v1/chat/completions", `{"model":"sim","messages":[]}`, 400, "messages", ""},
		{"message without role", "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role", ""},
		{"content of a wrong type", "/v1/chat/completions", `{"messages":[{"role":"user","content":7}]}`, 400, "messages[0].content", ""},
		{"no prompt", "/v1/completions", `{"model":"sim"}`, 400, "prompt", ""},
		{"prompt of a wrong type", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt", ""},
		{"max_tokens zero", "/v1/chat/completions", chatBody(`,"max_tokens":0`), 400, "max_tokens", ""},
		{"n above one", "/v1/chat/completions", chatBody(`,"n":2`), 400, "n", ""},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, "model", "model_not_found"},
		{"longer than the KV cache", "/v1/completions", `{"prompt":"x","max_tokens":300000}`, 400, "max_tokens", "context_length_exceeded"},
		{"body too large", "/v1/completions", `{"prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, url := startServer(t, func(c *Config) { c.MaxBodyBytes = 4096 })
			resp := post(t, url+tc.path, tc.body)
			assert.Equal(t, tc.status, resp.StatusCode)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			e := decodeBody[errorBody](t, resp)
			assert.NotEmpty(t, e.Error.Message)
			assert.Equal(t, "invalid_request_error", e.Error.Type)
			if tc.param == "" {
				assert.Nil(t, e.Error.Param)
			} else if assert.NotNil(t, e.Error.Param) {
				assert.Equal(t, tc.param, *e.Error.Param)
			}
			if tc.code == "" {
				assert.Nil(t, e.Error.Code)
			} else if assert.NotNil(t, e.Error.Code) {
				assert.Equal(t, tc.code, *e.Error.Code)
			}
			assert.Zero(t, s.Stats().Submitted, "a bad request never reaches the engine")
		})
	}
}

func TestModelsAndHealth(t *testing.T) {
	_, url := startServer(t, func(c *Config) { c.Models = []string{"llama", "qwen"} })

	resp := get(t, url+"/health")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.JSONEq(t, `{}`, string(readAll(t, resp)))

	list := decodeBody[struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		} `json:"data"`
	}](t, get(t, url+"/v1/models"))
	assert.Equal(t, "list", list.Object)
	require.Len(t, list.Data, 2)
	assert.Equal(t, "llama", list.Data[0].ID)
	assert.Equal(t, "qwen", list.Data[1].ID)
	assert.Equal(t, "model", list.Data[0].Object)

	r := decodeBody[response](t, post(t, url+"/v1/completions", `{"model":"qwen","prompt":"x"}`))
	assert.Equal(t, "qwen", r.Model)
	r = decodeBody[response](t, post(t, url+"/v1/completions", `{"prompt":"x"}`))
	assert.Equal(t, "llama", r.Model, "no model means the first one")
}

func TestCancellationReachesTheEngine(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		t.Run(fmt.Sprintf("stream=%v", streaming), func(t *testing.T) {
			s, url := startServer(t, func(c *Config) { c.TimeScale = 1; c.Engine.DecodeStepBase = 20 * time.Millisecond })
			body := fmt.Sprintf(`{"prompt":"x","max_tokens":1000,"stream":%v}`, streaming)
			ctx, cancel := contextWithCancel(t)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
			require.NoError(t, err)
			errc := make(chan error, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					buf := make([]byte, 1)
					_, err = resp.Body.Read(buf) // the stream has begun
					resp.Body.Close()
				}
				errc <- err
			}()
			require.Eventually(t, func() bool { return s.Stats().Running == 1 }, 5*time.Second, 5*time.Millisecond)
			if streaming {
				require.NoError(t, <-errc)
			}
			cancel()
			if !streaming {
				require.Error(t, <-errc)
			}
			require.Eventually(t, func() bool {
				st := s.Stats()
				return st.Cancelled == 1 && st.Running == 0
			}, 5*time.Second, 5*time.Millisecond, "the engine released the request")
			st := s.Stats()
			assert.Equal(t, int64(1), st.Submitted)
			assert.Zero(t, st.Completed)
		})
	}
}

func TestConcurrentStreams(t *testing.T) {
	s, url := startServer(t, func(c *Config) { c.TimeScale = 0.05; fastEngine(c); c.Engine.MaxRunning = 8 })
	const n = 40
	var wg sync.WaitGroup
	texts := make([]string, n)
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"prompt":"%s %d","max_tokens":20,"stream":true}`, longText, i%4)
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			st, err := readStream(resp.Body)
			assert.NoError(t, err)
			assert.True(t, st.done)
			texts[i] = st.text()
		})
	}
	wg.Wait()
	for i := range n {
		assert.Equal(t, texts[i%4], texts[i], "equal prompts, equal text, whatever the batch")
	}
	st := s.Stats()
	assert.Equal(t, int64(n), st.Completed)
	assert.Zero(t, st.Running+st.Waiting)
	snap := s.Snapshot()
	assert.Positive(t, snap.PrefixCacheHits, "requests sharing a prompt hit the cache")
}

func TestTimeScaleStretchesWallTime(t *testing.T) {
	// 10 tokens of 20 ms decode steps: 200 ms simulated.
	for _, scale := range []float64{0.5, 1} {
		t.Run(fmt.Sprint(scale), func(t *testing.T) {
			_, url := startServer(t, func(c *Config) {
				c.TimeScale = scale
				c.Engine.DecodeStepBase = 20 * time.Millisecond
				c.Engine.DecodeStepPerRequest = time.Nanosecond
				c.Engine.PrefillTokensPerSec = 1e9
			})
			start := time.Now()
			resp := post(t, url+"/v1/completions", `{"prompt":"x","max_tokens":10}`)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			readAll(t, resp)
			assert.GreaterOrEqual(t, time.Since(start), time.Duration(float64(200*time.Millisecond)*scale))
		})
	}
}

func readAll(t testing.TB, resp *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return b
}

func contextWithCancel(t testing.TB) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cancel
}

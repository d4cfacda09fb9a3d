package simserver

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodeRequest(t *testing.T) {
	cases := []struct {
		name string
		kind endpoint
		body string
		want completionRequest
	}{
		{"defaults", chatEndpoint, `{"messages":[{"role":"user","content":"hi"}]}`,
			completionRequest{maxTokens: DefaultMaxTokens, prompt: []byte("userhi")}},
		{"stream with usage", chatEndpoint, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`,
			completionRequest{model: "m", stream: true, includeUsage: true, maxTokens: DefaultMaxTokens, prompt: []byte("userhi")}},
		{"max_completion_tokens wins", completionsEndpoint, `{"prompt":"p","max_tokens":4,"max_completion_tokens":2}`,
			completionRequest{maxTokens: 2, prompt: []byte("p")}},
		{"negative seed", completionsEndpoint, `{"prompt":"p","seed":-1}`,
			completionRequest{maxTokens: DefaultMaxTokens, seed: ^uint64(0), hasSeed: true, prompt: []byte("p")}},
		{"n of one", completionsEndpoint, `{"prompt":"p","n":1}`,
			completionRequest{maxTokens: DefaultMaxTokens, prompt: []byte("p")}},
		{"unknown fields ignored", completionsEndpoint, `{"prompt":"p","temperature":0.7,"logit_bias":{"1":2},"user":"u"}`,
			completionRequest{maxTokens: DefaultMaxTokens, prompt: []byte("p")}},
		{"token ids", completionsEndpoint, `{"prompt":[1,256]}`,
			completionRequest{maxTokens: DefaultMaxTokens, prompt: []byte{1, 0, 0, 0, 0, 1, 0, 0}}},
		{"content parts", chatEndpoint, `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]}]}`,
			completionRequest{maxTokens: DefaultMaxTokens, prompt: []byte("userab")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRequest(tc.kind, []byte(tc.body))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestBlockHashes(t *testing.T) {
	text := []byte(longText)
	hs := blockHashes(text, "sim", 16)
	assert.Len(t, hs, len(text)/64, "one hash per full 64-byte block, the tail left out")
	assert.Equal(t, hs, blockHashes(text, "sim", 16))
	assert.NotEqual(t, hs[0], blockHashes(text, "other", 16)[0], "seeded by the model")

	changed := append([]byte(nil), text...)
	changed[0] ^= 1
	other := blockHashes(changed, "sim", 16)
	for i := range hs {
		assert.NotEqual(t, hs[i], other[i], "block %d: a chained hash carries its whole prefix", i)
	}
	assert.Equal(t, hs[:3], blockHashes(text[:3*64+10], "sim", 16), "a prefix has the prefix's hashes")
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"model":"sim","messages":[{"role":"user","content":"hello"}],"stream":true}`))
	f.Add([]byte(`{"prompt":["a","b"],"max_tokens":3}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, kind := range []endpoint{chatEndpoint, completionsEndpoint} {
			req, err := decodeRequest(kind, body)
			if err != nil {
				var bad *badRequest
				require.True(t, errors.As(err, &bad), "every decode error is a client error: %v", err)
				continue
			}
			require.GreaterOrEqual(t, req.maxTokens, 1)
			require.LessOrEqual(t, req.maxTokens, maxTokensLimit)
			require.GreaterOrEqual(t, promptTokens(req.prompt), 1)
			require.Len(t, blockHashes(req.prompt, "sim", 16), len(req.prompt)/64)
		}
	})
}

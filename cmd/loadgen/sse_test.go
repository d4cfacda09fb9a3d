package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHasContent(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		key     []byte
		want    bool
	}{
		{"chat content", `{"choices":[{"delta":{"content":"Hi"}}]}`, chatContentKey, true},
		{"role-only chunk", `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, chatContentKey, false},
		{"null content", `{"choices":[{"delta":{"content":null}}]}`, chatContentKey, false},
		{"no delta", `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, chatContentKey, false},
		{"space after colon", `{"choices":[{"delta":{"content": "Hi"}}]}`, chatContentKey, true},
		{"reasoning is not content", `{"choices":[{"delta":{"reasoning_content":"hmm"}}]}`, chatContentKey, false},
		{"key inside a string value", `{"choices":[{"delta":{"content":"","x":"say \"content\":\"y\""}}]}`, chatContentKey, false},
		{"escaped quote as first char", `{"choices":[{"delta":{"content":"\"q"}}]}`, chatContentKey, true},
		{"completions text", `{"choices":[{"text":"Hi","index":0}]}`, textContentKey, true},
		{"completions empty text", `{"choices":[{"text":"","index":0}]}`, textContentKey, false},
		{"text_offset is not text", `{"choices":[{"logprobs":{"text_offset":[1]},"text":""}]}`, textContentKey, false},
		{"truncated payload", `{"choices":[{"delta":{"content":"`, chatContentKey, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, hasContent([]byte(tt.payload), tt.key))
		})
	}
}

func readStreamString(t testing.TB, stream string, key []byte) (streamOutcome, error) {
	t.Helper()
	return newSSEReader().read(strings.NewReader(stream), key)
}

func TestSSEReader(t *testing.T) {
	role := `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	tok := `data: {"choices":[{"delta":{"content":"tok"}}]}` + "\n\n"
	usage := `data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":42}}` + "\n\n"
	done := "data: [DONE]\n\n"
	long := `data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", 100<<10) + `"}}]}` + "\n\n"

	tests := []struct {
		name       string
		stream     string
		wantDone   bool
		wantError  bool
		wantChunks int
		wantUsage  int
	}{
		{"complete stream", role + tok + tok + usage + done, true, false, 2, 42},
		{"no usage", role + tok + tok + tok + done, true, false, 3, -1},
		{"CRLF line endings", strings.ReplaceAll(role+tok+usage+done, "\n", "\r\n"), true, false, 1, 42},
		{"no space after data:", "data:" + tok[len("data: "):] + "data:[DONE]\n\n", true, false, 1, -1},
		{"comments, event and id lines", ": keep-alive\n\nevent: message\nid: 7\n" + tok + ": ping\n\n" + done, true, false, 1, -1},
		{"DONE without final newline", tok + "data: [DONE]", true, false, 1, -1},
		{"line longer than the buffer", role + long + tok + done, true, false, 2, -1},
		{"EOF before DONE", role + tok, false, false, 1, -1},
		{"empty body", "", false, false, 0, -1},
		{"error event", tok + `data: {"error":{"message":"boom"}}` + "\n\n" + done, false, true, 1, -1},
		{"error null is not an error", `data: {"choices":[{"delta":{"content":"a"}}],"error":null}` + "\n\n" + done, true, false, 1, -1},
		{"usage null then usage", `data: {"choices":[{"delta":{"content":"a"}}],"usage":null}` + "\n\n" + usage + done, true, false, 1, 42},
		{"nothing read after DONE", tok + done + tok + tok, true, false, 1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := readStreamString(t, tt.stream, chatContentKey)
			require.NoError(t, err)
			assert.Equal(t, tt.wantDone, out.done)
			assert.Equal(t, tt.wantError, out.errorEvent)
			assert.Equal(t, tt.wantChunks, out.contentChunks)
			assert.Equal(t, tt.wantUsage, out.completionTokens)
			assert.Equal(t, tt.wantChunks > 0, !out.firstContent.IsZero())
		})
	}
}

func TestSSEReaderBadUsage(t *testing.T) {
	_, err := readStreamString(t, `data: {"usage":{"completion_tokens":`+"\n\ndata: [DONE]\n\n", chatContentKey)
	assert.ErrorIs(t, err, errUsageDecode)
}

// errAfter yields data and then fails like a reset connection.
type errAfter struct {
	r   io.Reader
	err error
}

func (e *errAfter) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err == io.EOF {
		return n, e.err
	}
	return n, err
}

func TestSSEReaderReadError(t *testing.T) {
	boom := io.ErrUnexpectedEOF
	out, err := newSSEReader().read(&errAfter{strings.NewReader(`data: {"choices":[{"delta":{"content":"a"}}]}` + "\n"), boom}, chatContentKey)
	assert.ErrorIs(t, err, boom)
	assert.False(t, out.done)
	assert.Equal(t, 1, out.contentChunks)
}

// A reader reused from the pool must not carry anything over.
func TestSSEReaderReuse(t *testing.T) {
	s := newSSEReader()
	first, err := s.read(strings.NewReader(`data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n"), chatContentKey)
	require.NoError(t, err)
	require.False(t, first.done)
	second, err := s.read(strings.NewReader("data: [DONE]\n\n"), chatContentKey)
	require.NoError(t, err)
	assert.True(t, second.done)
	assert.Zero(t, second.contentChunks)
}

func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"usage\":{\"completion_tokens\":3}}\r\n\r\ndata: [DONE]"))
	f.Add([]byte("data: {\"error\":{\"message\":\"x\"}}\n\n"))
	f.Add([]byte(": ping\n\nevent: x\ndata:\n\n"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		s := newSSEReader()
		out, err := s.read(bytes.NewReader(stream), chatContentKey)
		if err != nil && err != errUsageDecode {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if out.contentChunks < 0 || out.done && out.errorEvent {
			t.Fatalf("inconsistent outcome %+v", out)
		}
		if (out.contentChunks > 0) == out.firstContent.IsZero() {
			t.Fatalf("first content time and chunk count disagree: %+v", out)
		}
	})
}

func BenchmarkSSEReader(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	for range 128 {
		sb.WriteString(`data: {"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"sim","choices":[{"index":0,"delta":{"content":"tok "},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString(`data: {"id":"c1","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":128,"total_tokens":135}}` + "\n\n")
	sb.WriteString("data: [DONE]\n\n")
	stream := []byte(sb.String())
	s := newSSEReader()
	r := bytes.NewReader(stream)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(stream)
		out, err := s.read(r, chatContentKey)
		if err != nil || !out.done || out.completionTokens != 128 {
			b.Fatalf("bad outcome %+v %v", out, err)
		}
	}
}

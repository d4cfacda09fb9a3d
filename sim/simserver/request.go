package simserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goccy/go-json"
)

// endpoint is which OpenAI API a request came through.
type endpoint uint8

const (
	chatEndpoint endpoint = iota + 1
	completionsEndpoint
)

// completionRequest is what the server keeps of an OpenAI request body.
type completionRequest struct {
	model        string // "" when the body named none
	stream       bool
	includeUsage bool
	maxTokens    int
	seed         uint64
	hasSeed      bool
	// prompt is the canonical prompt text: what is counted, hashed and
	// seeds the output.
	prompt []byte
}

// wireRequest is the subset of the OpenAI request body the simulator reads;
// other fields are accepted and ignored, as an engine ignores sampling
// parameters it does not simulate.
type wireRequest struct {
	Model         string          `json:"model"`
	Messages      []wireMessage   `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Stream        *bool           `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int64 `json:"max_tokens"`
	MaxCompletionTokens *int64 `json:"max_completion_tokens"`
	N                   *int64 `json:"n"`
	Seed                *int64 `json:"seed"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type wirePart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// badRequest is a client error naming the offending parameter, mapped to a
// 400 invalid_request_error.
type badRequest struct {
	param string
	msg   string
}

func (e *badRequest) Error() string {
	if e.param == "" {
		return e.msg
	}
	return e.param + ": " + e.msg
}

func invalid(param, format string, args ...any) error {
	return &badRequest{param: param, msg: fmt.Sprintf(format, args...)}
}

// maxTokensLimit keeps absurd max_tokens from overflowing token arithmetic;
// the engine refuses anything near it anyway (it must fit the KV cache).
const maxTokensLimit = 1 << 30

// decodeRequest reads an OpenAI request body of the given endpoint. Every
// error is a *badRequest.
func decodeRequest(kind endpoint, body []byte) (completionRequest, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return completionRequest{}, invalid("", "the body is not a valid JSON request: %v", err)
	}
	req := completionRequest{model: w.Model, maxTokens: DefaultMaxTokens}
	if w.Stream != nil {
		req.stream = *w.Stream
	}
	if w.StreamOptions != nil && w.StreamOptions.IncludeUsage != nil {
		req.includeUsage = *w.StreamOptions.IncludeUsage
	}
	// max_completion_tokens supersedes the deprecated max_tokens.
	limit, param := w.MaxTokens, "max_tokens"
	if w.MaxCompletionTokens != nil {
		limit, param = w.MaxCompletionTokens, "max_completion_tokens"
	}
	if limit != nil {
		if *limit < 1 || *limit > maxTokensLimit {
			return completionRequest{}, invalid(param, "must be between 1 and %d, got %d", maxTokensLimit, *limit)
		}
		req.maxTokens = int(*limit)
	}
	if w.N != nil && *w.N != 1 {
		return completionRequest{}, invalid("n", "only n=1 is supported, got %d", *w.N)
	}
	if w.Seed != nil {
		req.seed, req.hasSeed = uint64(*w.Seed), true
	}

	var err error
	switch kind {
	case chatEndpoint:
		req.prompt, err = chatPrompt(w.Messages)
	case completionsEndpoint:
		req.prompt, err = completionPrompt(w.Prompt)
	default:
		err = errors.New("unknown endpoint")
	}
	if err != nil {
		return completionRequest{}, err
	}
	return req, nil
}

// chatPrompt concatenates each message's role and text content in order.
// Content is a string, null, or an array of parts whose text parts count
// (images and other parts are not simulated).
func chatPrompt(msgs []wireMessage) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, invalid("messages", "at least one message is required")
	}
	size := 0
	for _, m := range msgs {
		size += len(m.Role) + len(m.Content)
	}
	text := make([]byte, 0, size)
	for i, m := range msgs {
		if m.Role == "" {
			return nil, invalid(fmt.Sprintf("messages[%d].role", i), "a role is required")
		}
		text = append(text, m.Role...)
		content := bytes.TrimSpace(m.Content)
		switch {
		case len(content) == 0 || bytes.Equal(content, []byte("null")):
		case content[0] == '"':
			var s string
			if err := json.Unmarshal(content, &s); err != nil {
				return nil, invalid(fmt.Sprintf("messages[%d].content", i), "not a string: %v", err)
			}
			text = append(text, s...)
		case content[0] == '[':
			var parts []wirePart
			if err := json.Unmarshal(content, &parts); err != nil {
				return nil, invalid(fmt.Sprintf("messages[%d].content", i), "not an array of content parts: %v", err)
			}
			for _, p := range parts {
				if p.Type == "text" {
					text = append(text, p.Text...)
				}
			}
		default:
			return nil, invalid(fmt.Sprintf("messages[%d].content", i), "must be a string, an array of parts or null")
		}
	}
	return text, nil
}

// completionPrompt reads a completions prompt: a string, an array of strings
// (concatenated), or an array of token ids (each token id contributes
// BytesPerToken bytes, so it counts as one token).
func completionPrompt(raw json.RawMessage) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, invalid("prompt", "a prompt is required")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalid("prompt", "not a string: %v", err)
		}
		return []byte(s), nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, invalid("prompt", "not an array: %v", err)
		}
		if len(items) == 0 {
			return nil, invalid("prompt", "an empty array")
		}
		if first := bytes.TrimSpace(items[0]); len(first) > 0 && first[0] != '"' {
			var ids []uint32
			if err := json.Unmarshal(raw, &ids); err != nil {
				return nil, invalid("prompt", "must be a string, an array of strings or an array of token ids")
			}
			text := make([]byte, 0, len(ids)*BytesPerToken)
			for _, id := range ids {
				text = binary.LittleEndian.AppendUint32(text, id)
			}
			return text, nil
		}
		var strs []string
		if err := json.Unmarshal(raw, &strs); err != nil {
			return nil, invalid("prompt", "must be a string, an array of strings or an array of token ids")
		}
		var text []byte
		for _, s := range strs {
			text = append(text, s...)
		}
		return text, nil
	default:
		return nil, invalid("prompt", "must be a string, an array of strings or an array of token ids")
	}
}

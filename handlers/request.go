package handlers

import (
	"bytes"
	"errors"
	"strings"

	json "github.com/goccy/go-json"
)

// endpoint is an OpenAI route kvgate proxies.
type endpoint int

const (
	endpointChat endpoint = iota
	endpointCompletions
)

func (e endpoint) path() string {
	if e == endpointChat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// completionRequest is the part of a request body the gateway reads. The
// body itself is forwarded as received; unknown fields pass through.
type completionRequest struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	N                   *int   `json:"n"`
	BestOf              *int   `json:"best_of"`
	// Messages is decoded for its shape only: elements of a zero-size type
	// cost no allocation, and goccy would copy a custom unmarshaler's bytes.
	Messages *[]struct{} `json:"messages"`
	Prompt   jsonSpan    `json:"prompt"`
	// CacheSalt isolates a tenant's prefix cache in vLLM: equal prompts
	// with different salts share no KV, so they must not share a hash.
	CacheSalt string `json:"cache_salt"`
}

// jsonSpan records the shape of a JSON value: its first byte, its length,
// and whether it is an empty array.
type jsonSpan struct {
	first byte
	size  int
	empty bool
}

func (s *jsonSpan) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	s.first, s.size = b[0], len(b)
	if b[0] == '[' {
		s.empty = len(bytes.TrimSpace(b[1:len(b)-1])) == 0
	}
	return nil
}

func (s jsonSpan) present() bool { return s.size > 0 && s.first != 'n' } // null counts as absent

// bytesPerToken is the rule of thumb for English text in BPE vocabularies;
// the prompt's token count is an estimate until the tokenizer arrives.
const bytesPerToken = 4

// parsed is a validated request.
type parsed struct {
	completionRequest
	promptTokens int
}

// singleTarget: one worker, one completion (n and best_of at most 1). Only
// such requests may seed a clean worker.
func (p *parsed) singleTarget() bool {
	return (p.N == nil || *p.N <= 1) && (p.BestOf == nil || *p.BestOf <= 1)
}

func (p *parsed) maxTokens() int {
	switch {
	case p.MaxCompletionTokens != nil:
		return *p.MaxCompletionTokens
	case p.MaxTokens != nil:
		return *p.MaxTokens
	}
	return 0
}

// parseRequest decodes and validates body for ep. It returns an apiError
// naming the offending parameter for anything the worker would reject as
// malformed anyway: failing here saves a round trip and a retry.
func parseRequest(body []byte, ep endpoint) (*parsed, *apiError) {
	var p parsed
	if err := json.Unmarshal(body, &p.completionRequest); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, errBadRequest(te.Field, "Invalid type for `"+te.Field+"`: expected "+te.Type.String()+".")
		}
		return nil, errBadRequest("", "The request body is not valid JSON: "+firstLine(err.Error()))
	}
	if p.Model == "" {
		return nil, errBadRequest("model", "Missing required parameter: `model`.")
	}
	switch ep {
	case endpointChat:
		if p.Messages == nil {
			return nil, errBadRequest("messages", "Missing required parameter: `messages`.")
		}
		if len(*p.Messages) == 0 {
			return nil, errBadRequest("messages", "`messages` must be a non-empty array.")
		}
		// The messages are nearly all of a chat body: its size is the estimate.
		p.promptTokens = len(body) / bytesPerToken
	case endpointCompletions:
		if !p.Prompt.present() {
			return nil, errBadRequest("prompt", "Missing required parameter: `prompt`.")
		}
		if p.Prompt.first != '"' && p.Prompt.first != '[' {
			return nil, errBadRequest("prompt", "`prompt` must be a string or an array.")
		}
		p.promptTokens = p.Prompt.size / bytesPerToken
	}
	if n := p.maxTokens(); n < 0 {
		return nil, errBadRequest("max_tokens", "`max_tokens` must be non-negative.")
	}
	if p.N != nil && *p.N < 1 {
		return nil, errBadRequest("n", "`n` must be at least 1.")
	}
	return &p, nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

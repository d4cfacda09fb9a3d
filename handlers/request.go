package handlers

import (
	"bytes"
	"errors"
	"reflect"
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
//
// It must be read as the engines read it (Python's json, then pydantic): a
// key counts only as written (escapes decoded), the last of a repeated key
// wins, and any other key is ignored. keyCaseVariants keeps goccy from
// reading the others; parseRequest reads a repeated key whose earlier value
// is bad by its last one. One difference remains, as before: a repeated key
// whose last value is null leaves Model, Stream or CacheSalt at the earlier
// value (goccy skips a null there), where Python reads None; finding
// repeated keys would cost a walk of every body.
type completionRequest struct {
	// keyCaseVariants must come first (see its comment).
	keyCaseVariants
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

// keyCaseVariants takes the keys goccy would otherwise decode into a field
// of completionRequest though they are not its key as written. goccy, like
// encoding/json, matches a key (escapes decoded) to the field of exactly
// that name, or else to the first field, in struct order, whose name is the
// same under Unicode case folding: "MODEL", "Max_Tokens", "ſtream" (long s)
// or "MOD\u0045L" would set the gateway's view of the request, or fail it,
// while the engine ignores them. Each field here is named by a case variant
// of a key of completionRequest and comes before it, so any such key lands
// here and is dropped, whatever its value; the exact key, and an escaped
// spelling of it ("mod\u0065l", which Python reads as "model"), still match
// their own field. goccy's key lookup is a little slower with names that
// fold alike (about 0.1µs for BenchmarkParseRequest), far less than a second
// walk of the body to find such keys. Every key of completionRequest needs
// its variant here (TestKeyCaseVariantsCoverEveryKey).
type keyCaseVariants struct {
	ModelVariant               ignoredValue `json:"MODEL"`
	StreamVariant              ignoredValue `json:"STREAM"`
	MaxTokensVariant           ignoredValue `json:"MAX_TOKENS"`
	MaxCompletionTokensVariant ignoredValue `json:"MAX_COMPLETION_TOKENS"`
	NVariant                   ignoredValue `json:"N"`
	BestOfVariant              ignoredValue `json:"BEST_OF"`
	MessagesVariant            ignoredValue `json:"MESSAGES"`
	PromptVariant              ignoredValue `json:"PROMPT"`
	CacheSaltVariant           ignoredValue `json:"CACHE_SALT"`
}

// ignoredValue accepts any JSON value and keeps nothing.
type ignoredValue struct{}

func (*ignoredValue) UnmarshalJSON([]byte) error { return nil }

// jsonSpan records the shape of a JSON value: its first byte, its length,
// and whether it is an empty array.
type jsonSpan struct {
	first byte
	size  int
	empty bool
}

func (s *jsonSpan) UnmarshalJSON(b []byte) error {
	*s = jsonSpan{} // a repeated key: only the last value counts
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
		var se *json.SyntaxError
		if !errors.As(err, &se) {
			// goccy reports a syntax error anywhere before any type error, so
			// the body is JSON. But goccy reports a bad value of a repeated
			// key too, which the engine never reads: decode the last of each.
			if last, ok := lastKeysOnly(body); ok {
				p.completionRequest = completionRequest{}
				err = json.Unmarshal(last, &p.completionRequest)
			}
		}
		if err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				return nil, errBadRequest(te.Field, "Invalid type for `"+te.Field+"`: expected "+te.Type.String()+".")
			}
			return nil, errBadRequest("", "The request body is not valid JSON: "+firstLine(err.Error()))
		}
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

// requestKeys are the JSON names of completionRequest's own fields, in order.
var requestKeys = func() []string {
	var keys []string
	for f := range reflect.TypeFor[completionRequest]().Fields() {
		if !f.Anonymous {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			keys = append(keys, name)
		}
	}
	return keys
}()

// requestKey returns the index in requestKeys of key, or -1.
func requestKey(key []byte) int {
	for i, k := range requestKeys {
		if string(key) == k {
			return i
		}
	}
	return -1
}

// lastKeysOnly returns a copy of body, a JSON object, in which every
// top-level member of a key of completionRequest but the last (by the key as
// Python reads it, escapes decoded) has its key overwritten with
// underscores: a key of no field, which keeps the copy valid JSON, so that
// goccy decodes the members the engine reads and reports their errors as it
// would for a body without the others. ok is false if the body cannot be
// walked (not an object, which has no keys to drop).
func lastKeysOnly(body []byte) (last []byte, ok bool) {
	b := bytes.Clone(body)
	s := scanner{b: b}
	s.ws()
	if !s.consume('{') {
		return nil, false
	}
	seen := make([][]byte, len(requestKeys))
	ok = s.object(func(key []byte, _ span) {
		i := requestKey(key)
		if i < 0 && bytes.IndexByte(key, '\\') >= 0 {
			i = requestKey(unescapeKey(key))
		}
		if i < 0 {
			return
		}
		if seen[i] != nil {
			for j := range seen[i] {
				seen[i][j] = '_'
			}
		}
		seen[i] = key
	})
	return b, ok
}

// unescapeKey decodes the escapes of a raw key, or returns nil if it does
// not decode: then it is no field's key.
func unescapeKey(key []byte) []byte {
	quoted := make([]byte, 0, len(key)+2)
	quoted = append(append(append(quoted, '"'), key...), '"')
	var k string
	if json.Unmarshal(quoted, &k) != nil {
		return nil
	}
	return []byte(k)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

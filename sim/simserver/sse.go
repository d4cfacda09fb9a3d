package simserver

import (
	"strconv"
)

// chunkEncoder writes the SSE events of one streamed response by appending
// bytes: every variable part is a number, a vocabulary word or a model id
// encoded once, so no JSON encoder runs per token. The layout is vLLM's: the
// role rides on the first delta, finish_reason on the last token's chunk,
// then an optional usage chunk with no choices, then [DONE].
type chunkEncoder struct {
	chat   bool
	prefix []byte // data: {"id":…,"object":…,"created":…,"model":…,"choices":[
}

func newChunkEncoder(kind endpoint, id string, created int64, quotedModel []byte) chunkEncoder {
	object := "text_completion"
	if kind == chatEndpoint {
		object = "chat.completion.chunk"
	}
	p := make([]byte, 0, 96+len(id)+len(quotedModel))
	p = append(p, `data: {"id":"`...)
	p = append(p, id...)
	p = append(p, `","object":"`...)
	p = append(p, object...)
	p = append(p, `","created":`...)
	p = strconv.AppendInt(p, created, 10)
	p = append(p, `,"model":`...)
	p = append(p, quotedModel...)
	p = append(p, `,"choices":[`...)
	return chunkEncoder{chat: kind == chatEndpoint, prefix: p}
}

// appendToken appends the event carrying token i.
func (c *chunkEncoder) appendToken(dst []byte, i int, word string, last bool) []byte {
	dst = append(dst, c.prefix...)
	if c.chat {
		dst = append(dst, `{"index":0,"delta":{`...)
		if i == 0 {
			dst = append(dst, `"role":"assistant",`...)
		}
		dst = append(dst, `"content":"`...)
		dst = append(dst, word...)
		dst = append(dst, `"},"logprobs":null,"finish_reason":`...)
	} else {
		dst = append(dst, `{"index":0,"text":"`...)
		dst = append(dst, word...)
		dst = append(dst, `","logprobs":null,"finish_reason":`...)
	}
	if last {
		dst = append(dst, `"length"`...)
	} else {
		dst = append(dst, `null`...)
	}
	return append(dst, "}]}\n\n"...)
}

// appendUsage appends the include_usage event: no choices, the usage.
func (c *chunkEncoder) appendUsage(dst []byte, u wireUsage) []byte {
	dst = append(dst, c.prefix...)
	dst = append(dst, `],"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.TotalTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokensDetails.CachedTokens), 10)
	return append(dst, "}}}\n\n"...)
}

var sseDone = []byte("data: [DONE]\n\n")

package handlers

import (
	"bytes"
	"errors"
	"unicode/utf8"

	"github.com/kvgate/kvgate/routing"
)

// The routing text is what an engine's prompt would start with, in order,
// so that equal prompt prefixes give equal block hashes:
//
//	chat:        [tools] then each message: role, name, content, tool calls, tool call id
//	completions: the prompt string, or each element of the prompt array
//
// Strings are unescaped (a prompt written by two JSON encoders hashes the
// same), content parts contribute their text (other parts, images, as
// compact JSON), and fields are written in this fixed order whatever the
// order of the keys. Separator bytes that text cannot contain keep
// ("ab","c") and ("a","bc") apart.
const (
	sepMessage = 0x1e // starts a message
	sepField   = 0x1f // between a message's fields
	sepTools   = 0x1d // starts the tool definitions
	sepTokens  = 0x1c // starts a prompt given as token ids
)

var errRoutingText = errors.New("malformed request body")

// writeRoutingText feeds the routing text of body (already validated as
// JSON by parseRequest) to h. It allocates nothing, and on malformed input
// returns an error instead of guessing; the request is then routed without
// prefix affinity.
func writeRoutingText(h *routing.BlockHasher, body []byte, ep endpoint) error {
	s := scanner{b: body}
	s.ws()
	if !s.consume('{') {
		return errRoutingText
	}
	var tools, messages, prompt span
	ok := s.object(func(key []byte, v span) {
		if bytes.IndexByte(key, '\\') >= 0 {
			key = unescapeKey(key) // as the engine reads it (rare: allocates)
		}
		switch string(key) { // no allocation: compiler-optimised comparison
		case "tools":
			tools = v
		case "messages":
			messages = v
		case "prompt":
			prompt = v
		}
	})
	if !ok {
		return errRoutingText
	}
	if ep == endpointCompletions {
		return writePrompt(h, body, prompt)
	}
	if tools.end > tools.start && body[tools.start] == '[' {
		_ = h.WriteByte(sepTools)
		writeCompact(h, body[tools.start:tools.end])
	}
	return writeMessages(h, body, messages)
}

func writePrompt(h *routing.BlockHasher, body []byte, v span) error {
	if v.end <= v.start {
		return errRoutingText
	}
	switch body[v.start] {
	case '"':
		writeUnescaped(h, body[v.start+1:v.end-1])
		return nil
	case '[':
		s := scanner{b: body[:v.end], i: v.start + 1}
		for {
			s.ws()
			if s.consume(']') {
				return nil
			}
			e, ok := s.value()
			if !ok {
				return errRoutingText
			}
			_ = h.WriteByte(sepMessage)
			if body[e.start] == '"' {
				writeUnescaped(h, body[e.start+1:e.end-1])
			} else {
				_ = h.WriteByte(sepTokens) // token ids, never confused with text
				writeCompact(h, body[e.start:e.end])
			}
			s.ws()
			s.consume(',')
		}
	}
	return errRoutingText
}

// message holds the spans of the fields of one chat message that route.
type message struct {
	role, name, content, toolCalls, toolCallID span
}

func writeMessages(h *routing.BlockHasher, body []byte, v span) error {
	if v.end <= v.start || body[v.start] != '[' {
		return errRoutingText
	}
	s := scanner{b: body[:v.end], i: v.start + 1}
	for {
		s.ws()
		if s.consume(']') {
			return nil
		}
		if !s.consume('{') {
			return errRoutingText
		}
		var m message
		ok := s.object(func(key []byte, val span) {
			switch string(key) {
			case "role":
				m.role = val
			case "name":
				m.name = val
			case "content":
				m.content = val
			case "tool_calls":
				m.toolCalls = val
			case "tool_call_id":
				m.toolCallID = val
			}
		})
		if !ok {
			return errRoutingText
		}
		_ = h.WriteByte(sepMessage)
		writeString(h, body, m.role)
		_ = h.WriteByte(sepField)
		writeString(h, body, m.name)
		_ = h.WriteByte(sepField)
		writeContent(h, body, m.content)
		_ = h.WriteByte(sepField)
		if m.toolCalls.end > m.toolCalls.start {
			writeCompact(h, body[m.toolCalls.start:m.toolCalls.end])
		}
		_ = h.WriteByte(sepField)
		writeString(h, body, m.toolCallID)
		s.ws()
		s.consume(',')
	}
}

// writeContent writes a message's content: a string, or an array of parts
// whose text parts count as text and whose other parts count as compact JSON.
func writeContent(h *routing.BlockHasher, body []byte, v span) {
	if v.end <= v.start {
		return
	}
	switch body[v.start] {
	case '"':
		writeUnescaped(h, body[v.start+1:v.end-1])
	case '[':
		s := scanner{b: body[:v.end], i: v.start + 1}
		for {
			s.ws()
			if s.consume(']') || s.i >= len(s.b) {
				return
			}
			part, ok := s.value()
			if !ok {
				return
			}
			if text, isText := textOfPart(body, part); isText {
				writeUnescaped(h, body[text.start+1:text.end-1])
			} else {
				writeCompact(h, body[part.start:part.end])
			}
			s.ws()
			s.consume(',')
		}
	}
}

// textOfPart returns the "text" string of a {"type":"text","text":...} part.
func textOfPart(body []byte, part span) (span, bool) {
	if body[part.start] != '{' {
		return span{}, false
	}
	s := scanner{b: body[:part.end], i: part.start + 1}
	var typ, text span
	ok := s.object(func(key []byte, val span) {
		switch string(key) {
		case "type":
			typ = val
		case "text":
			text = val
		}
	})
	if !ok {
		return span{}, false
	}
	isText := typ.end-typ.start == len(`"text"`) && string(body[typ.start:typ.end]) == `"text"`
	return text, isText && text.end > text.start && body[text.start] == '"'
}

// writeString writes a JSON string value unescaped; other values are skipped.
func writeString(h *routing.BlockHasher, body []byte, v span) {
	if v.end-v.start >= 2 && body[v.start] == '"' {
		writeUnescaped(h, body[v.start+1:v.end-1])
	}
}

// writeUnescaped writes the contents of a JSON string (without its quotes)
// with escapes decoded, in runs: plain text goes through untouched.
func writeUnescaped(h *routing.BlockHasher, s []byte) {
	for len(s) > 0 {
		i := indexByte(s, '\\')
		if i < 0 {
			_, _ = h.Write(s)
			return
		}
		_, _ = h.Write(s[:i])
		s = s[i:]
		if len(s) < 2 {
			return
		}
		switch c := s[1]; c {
		case 'n':
			_ = h.WriteByte('\n')
		case 't':
			_ = h.WriteByte('\t')
		case 'r':
			_ = h.WriteByte('\r')
		case 'b':
			_ = h.WriteByte('\b')
		case 'f':
			_ = h.WriteByte('\f')
		case 'u':
			r, n := decodeUnicodeEscape(s)
			var buf [utf8.UTFMax]byte
			for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
				_ = h.WriteByte(c) // byte by byte: a slice of buf would escape
			}
			s = s[n:]
			continue
		default: // \" \\ \/ and anything else stands for itself
			_ = h.WriteByte(c)
		}
		s = s[2:]
	}
}

// decodeUnicodeEscape decodes \uXXXX (and a following low surrogate) at the
// start of s, returning the rune and the bytes consumed.
func decodeUnicodeEscape(s []byte) (rune, int) {
	r, ok := hex4(s, 2)
	if !ok {
		return utf8.RuneError, min(len(s), 2)
	}
	if r >= 0xd800 && r < 0xdc00 && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
		if lo, ok := hex4(s, 8); ok && lo >= 0xdc00 && lo < 0xe000 {
			return (r-0xd800)<<10 | (lo - 0xdc00) + 0x10000, 12
		}
	}
	if r >= 0xd800 && r < 0xe000 {
		return utf8.RuneError, 6
	}
	return r, 6
}

func hex4(s []byte, at int) (rune, bool) {
	if len(s) < at+4 {
		return 0, false
	}
	var r rune
	for _, c := range s[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// writeCompact writes a JSON value without insignificant whitespace and
// with its strings unescaped, so that two encoders of the same tool list
// ("caf\u00e9" or "café") give the same routing text: the engine decodes
// the JSON before rendering it into the prompt.
func writeCompact(h *routing.BlockHasher, v []byte) {
	for i := 0; i < len(v); {
		c := v[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			end := stringEnd(v, i+1)
			_ = h.WriteByte('"')
			writeUnescaped(h, v[i+1:end])
			_ = h.WriteByte('"')
			i = end + 1
		default:
			j := i + 1
			for j < len(v) && !isStructural(v[j]) {
				j++
			}
			_, _ = h.Write(v[i:j])
			i = j
		}
	}
}

// stringEnd returns the index of the quote closing the string whose
// contents start at i (len(v) if it is unterminated).
func stringEnd(v []byte, i int) int {
	for i < len(v) {
		j := indexAny2(v[i:], '"', '\\')
		if j < 0 {
			return len(v)
		}
		i += j
		if v[i] == '\\' {
			i += 2
			continue
		}
		return i
	}
	return len(v)
}

func isStructural(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '"':
		return true
	}
	return false
}

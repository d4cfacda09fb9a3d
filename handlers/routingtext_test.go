package handlers

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/routing"
)

const testBlock = 16

func routingHashes(t testing.TB, body string, ep endpoint) []uint64 {
	t.Helper()
	h := routing.NewBlockHasher(testBlock)
	h.Reset("m")
	require.NoError(t, writeRoutingText(h, []byte(body), ep))
	return append([]uint64(nil), h.Hashes()...)
}

var system = strings.Repeat("You are a careful assistant. ", 8)

func TestRoutingTextEquivalences(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"key order within a message",
			`{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"hi"}]}`,
			`{"messages":[{"content":"` + system + `","role":"system"},{"content":"hi","role":"user"}],"model":"m"}`},
		{"escapes decode",
			`{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \u0022quoted\" \ud83d\ude00 tab\u0009end \/ ` + system + `"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"café \"quoted\" 😀 tab\tend / ` + system + `"}]}`},
		{"escapes decode inside tools and tool calls",
			`{"model":"m","tools":[{"type":"function","function":{"name":"f","description":"caf\u00e9 \u003cb\u003e"}}],"messages":[{"role":"user","content":"` + system + `"}]}`,
			`{"model":"m","tools":[{"type":"function","function":{"name":"f","description":"café <b>"}}],"messages":[{"role":"user","content":"` + system + `"}]}`},
		{"text parts read as text",
			`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + system + `"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"` + system + `"}]}`},
		{"whitespace between tokens",
			`{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"` + system + `"}]}`,
			"{ \"model\" : \"m\" ,\n \"tools\" : [ { \"type\" : \"function\", \"function\" : { \"name\" : \"f\" } } ],\n\"messages\":[ {\"role\":\"user\", \"content\":\"" + system + "\"} ] }"},
		{"escaped keys read as the engine reads them",
			`{"model":"m","mess\u0061ges":[{"role":"user","content":"` + system + `"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"` + system + `"}]}`},
		{"the last of a repeated key",
			`{"model":"m","messages":[{"role":"user","content":"other"}],"mess\u0061ges":[{"role":"user","content":"` + system + `"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"` + system + `"}]}`},
		{"fields routing ignores",
			`{"model":"m","temperature":0.2,"stream":true,"messages":[{"role":"user","content":"` + system + `"}]}`,
			`{"model":"m","messages":[{"role":"user","content":"` + system + `"}],"max_tokens":9}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := routingHashes(t, tc.a, endpointChat)
			require.NotEmpty(t, a)
			assert.Equal(t, a, routingHashes(t, tc.b, endpointChat))
		})
	}
}

func TestRoutingTextDifferences(t *testing.T) {
	base := `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"first question, long enough to fill a block"}]}`
	other := `{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"second question, long enough to fill a block"}]}`
	a, b := routingHashes(t, base, endpointChat), routingHashes(t, other, endpointChat)
	shared := len(system) / testBlock
	assert.Equal(t, a[:shared], b[:shared], "a shared system prompt shares its blocks")
	assert.NotEqual(t, a[len(a)-1], b[len(b)-1])

	withTools := `{"model":"m","tools":[{"type":"function","function":{"name":"lookup"}}],"messages":[{"role":"system","content":"` + system + `"}]}`
	noTools := `{"model":"m","messages":[{"role":"system","content":"` + system + `"}]}`
	assert.NotEqual(t, routingHashes(t, withTools, endpointChat)[0], routingHashes(t, noTools, endpointChat)[0],
		"tool definitions lead the prompt")

	split1 := `{"model":"m","messages":[{"role":"user","content":"` + system + `ab"},{"role":"user","content":"c` + system + `"}]}`
	split2 := `{"model":"m","messages":[{"role":"user","content":"` + system + `a"},{"role":"user","content":"bc` + system + `"}]}`
	assert.NotEqual(t, routingHashes(t, split1, endpointChat), routingHashes(t, split2, endpointChat), "message boundaries count")

	roles1 := `{"model":"m","messages":[{"role":"user","content":"` + system + `"}]}`
	roles2 := `{"model":"m","messages":[{"role":"system","content":"` + system + `"}]}`
	assert.NotEqual(t, routingHashes(t, roles1, endpointChat)[0], routingHashes(t, roles2, endpointChat)[0], "roles count")

	call1 := `{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"q\":1}"}}]},{"role":"tool","tool_call_id":"1","content":"` + system + `"}]}`
	call2 := strings.Replace(call1, `\"q\":1`, `\"q\":2`, 1)
	assert.NotEqual(t, routingHashes(t, call1, endpointChat), routingHashes(t, call2, endpointChat), "tool calls count")
}

func TestRoutingTextCompletions(t *testing.T) {
	s := routingHashes(t, `{"model":"m","prompt":"`+system+`"}`, endpointCompletions)
	require.NotEmpty(t, s)
	arr := routingHashes(t, `{"model":"m","prompt":["`+system+`","x"]}`, endpointCompletions)
	require.NotEmpty(t, arr)
	tokens := routingHashes(t, `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46]}`, endpointCompletions)
	assert.NotEmpty(t, tokens, "token-id prompts route too")
	asText := routingHashes(t, `{"model":"m","prompt":["123456789012345678901234567890"]}`, endpointCompletions)
	asIDs := routingHashes(t, `{"model":"m","prompt":[123456789012345678901234567890]}`, endpointCompletions)
	assert.NotEqual(t, asText, asIDs, "digits as text and as token ids differ")
}

func TestRoutingTextRejectsWhatItCannotRead(t *testing.T) {
	h := routing.NewBlockHasher(testBlock)
	for _, body := range []string{`[]`, `{"model":"m","messages":"x"}`, `{"model":"m","messages":[1]}`, `{"model":"m","prompt":5}`, `{"model":`, ``} {
		h.Reset("m")
		ep := endpointChat
		if strings.Contains(body, "prompt") {
			ep = endpointCompletions
		}
		assert.Error(t, writeRoutingText(h, []byte(body), ep), body)
	}
}

func TestRoutingTextAllocatesNothing(t *testing.T) {
	body := []byte(`{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"system","content":"` + system +
		`"},{"role":"user","content":[{"type":"text","text":"caf\u00e9 ` + system + `"},{"type":"image_url","image_url":{"url":"x"}}]}]}`)
	h := routing.NewBlockHasher(testBlock)
	h.Reset("m")
	_ = writeRoutingText(h, body, endpointChat) // grow the hash slice once
	allocs := testing.AllocsPerRun(100, func() {
		h.Reset("m")
		_ = writeRoutingText(h, body, endpointChat)
	})
	assert.Zero(t, allocs)
}

// FuzzRoutingText: any body parseRequest accepts is walked without a
// panic, and its hashes depend only on the body, not on what the pooled
// hasher hashed before.
func FuzzRoutingText(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi \u00e9"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}],"tools":[{}]}`))
	f.Add([]byte(`{"model":"m","prompt":["a","b",[1,2]]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"\ud800\u"}]}`))
	h := routing.NewBlockHasher(8)
	other := routing.NewBlockHasher(8)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []endpoint{endpointChat, endpointCompletions} {
			if _, aerr := parseRequest(body, ep); aerr != nil {
				continue
			}
			h.Reset("m")
			if writeRoutingText(h, body, ep) != nil {
				continue
			}
			other.Reset("m")
			_ = writeRoutingText(other, []byte(`{"model":"x","messages":[{"role":"user","content":"history"}]}`), endpointChat)
			other.Reset("m")
			_ = writeRoutingText(other, body, ep)
			if !slices.Equal(h.Hashes(), other.Hashes()) {
				t.Fatal("hashes depend on the hasher's history")
			}
		}
	})
}

func BenchmarkRoutingText(b *testing.B) {
	for _, size := range []int{4 << 10, 128 << 10} {
		content := strings.Repeat("The quick brown fox jumps over the lazy dog. ", size/45)
		body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + content + `"},{"role":"user","content":"hi"}]}`)
		b.Run(fmt.Sprintf("prompt=%dKB", size>>10), func(b *testing.B) {
			h := routing.NewBlockHasher(256)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				h.Reset("m")
				if err := writeRoutingText(h, body, endpointChat); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

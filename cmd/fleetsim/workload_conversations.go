package main

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// conversationShape describes traffic made of conversations whose prompt
// grows turn after turn: each turn's prompt is the previous turn's prompt,
// its answer and the new input (a user message, a tool result). Chat
// sessions and agent trajectories are both this shape, with different sizes.
type conversationShape struct {
	// prompts are the shared leading prompts (system prompts, tool
	// definitions); a conversation opens with one, chosen uniformly.
	prompts     int
	promptSize  span
	first       span // the first input after the shared prompt
	input       span // the input added before every later turn
	output      span // the tokens each turn generates
	turns       span
	gapMin      time.Duration // between a conversation's arrivals: gapMin + Exp(gapMean − gapMin)
	gapMean     time.Duration
	description string
}

// meanLength is how long a conversation lasts on average.
func (c conversationShape) meanLength() time.Duration {
	return time.Duration((c.turns.mean() - 1) * float64(c.gapMean))
}

// Defaults. Chat: 30 requests/s of conversations of 1 to 12 turns, a turn
// every 15 s on average, opening with one of 8 system prompts.
const defaultChatRate = 30

func defaultChatShape() conversationShape {
	return conversationShape{
		prompts:     8,
		promptSize:  span{256, 2048},
		first:       span{64, 1024},
		input:       span{32, 512},
		output:      span{32, 512},
		turns:       span{1, 12},
		gapMin:      2 * time.Second,
		gapMean:     15 * time.Second,
		description: "chat-sessions",
	}
}

// Agentic: 12 requests/s of trajectories of 8 to 48 steps, a step every 3 s
// on average, each appending a tool call and its result, opening with one
// of 4 agent prompts (system and tool definitions): about 50 agents at once,
// with contexts growing to tens of thousands of tokens.
const defaultAgenticRate = 12

func defaultAgenticShape() conversationShape {
	return conversationShape{
		prompts:     4,
		promptSize:  span{2048, 6144},
		first:       span{256, 2048},
		input:       span{64, 2048},
		output:      span{32, 384},
		turns:       span{8, 48},
		gapMin:      time.Second,
		gapMean:     3 * time.Second,
		description: "agentic",
	}
}

// conversations generates conversationShape traffic: conversations open as
// a Poisson process at rate/turns, and the arrivals of all open
// conversations interleave. The process starts two mean conversation
// lengths before time 0, so that arrivals from time 0 on see the steady
// state (many conversations already under way) at the requested rate.
type conversations struct {
	shape   conversationShape
	model   string
	bt      int
	ids     *idSpace
	rng     *rand.Rand
	prompts []segment
	opens   poisson
	open    turnQueue
}

var _ source = (*conversations)(nil)

func newConversations(shape conversationShape, model string, bt int, rate float64, seed uint64, ids *idSpace) *conversations {
	rng := newRand(seed, shape.description)
	c := &conversations{shape: shape, model: model, bt: bt, ids: ids, rng: rng}
	for range shape.prompts {
		c.prompts = append(c.prompts, segment{base: ids.newRange(), tokens: shape.promptSize.draw(rng)})
	}
	c.opens = poisson{rng: rng, rate: rate / shape.turns.mean(), t: -2 * shape.meanLength()}
	c.opens.advance()
	return c
}

// conversation is one open conversation: its text so far and its next turn.
type conversation struct {
	text      *stream
	next      time.Duration
	seq       uint64 // opening order, to break ties deterministically
	turnsLeft int
	answer    int // tokens of the previous turn's answer, not yet in text
}

func (c *conversations) peek() time.Duration {
	if len(c.open) > 0 && c.open[0].next < c.opens.t {
		return c.open[0].next
	}
	return c.opens.t
}

func (c *conversations) pop() Request {
	if len(c.open) == 0 || c.open[0].next >= c.opens.t {
		c.start(c.opens.t)
		c.opens.advance()
	}
	conv := c.open[0]
	if conv.answer > 0 {
		conv.text.extend(conv.answer + c.shape.input.draw(c.rng))
	}
	conv.answer = c.shape.output.draw(c.rng)
	r := conv.text.request(conv.next, conv.answer)
	conv.turnsLeft--
	if conv.turnsLeft == 0 {
		heap.Pop(&c.open)
	} else {
		gap := c.shape.gapMin + time.Duration(c.rng.ExpFloat64()*float64(c.shape.gapMean-c.shape.gapMin))
		conv.next += gap
		heap.Fix(&c.open, 0)
	}
	return r
}

// start opens a conversation whose first turn arrives at t.
func (c *conversations) start(t time.Duration) {
	prompt := c.prompts[c.rng.IntN(len(c.prompts))]
	text := newStream(c.model, c.bt, prompt, c.ids)
	text.extend(prompt.tokens + c.shape.first.draw(c.rng))
	conv := &conversation{text: text, next: t, seq: c.ids.next, turnsLeft: c.shape.turns.draw(c.rng)}
	heap.Push(&c.open, conv)
}

// turnQueue orders open conversations by their next arrival.
type turnQueue []*conversation

func (q turnQueue) Len() int { return len(q) }
func (q turnQueue) Less(i, j int) bool {
	if q[i].next != q[j].next {
		return q[i].next < q[j].next
	}
	return q[i].seq < q[j].seq
}
func (q turnQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *turnQueue) Push(x any)   { *q = append(*q, x.(*conversation)) }
func (q *turnQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return x
}

package main

import "time"

// blendPart is one generator of a blend and its share of the arrivals.
type blendPart struct {
	share float64
	make  func(rate float64) source
}

// Mixed: 36 requests/s, 40% chat sessions, 30% hot-prefix traffic, 30% agent
// steps, each part with its own default shape; block ids never collide
// between parts.
const defaultMixedRate = 36

func mixedParts(model string, bt int, seed uint64, ids *idSpace) []blendPart {
	return []blendPart{
		{0.4, func(rate float64) source {
			return newConversations(defaultChatShape(), model, bt, rate, seed, ids)
		}},
		{0.3, func(rate float64) source {
			return newHotPrefix(defaultHotPrefixShape(), model, bt, rate, seed, ids)
		}},
		{0.3, func(rate float64) source {
			return newConversations(defaultAgenticShape(), model, bt, rate, seed, ids)
		}},
	}
}

// blend interleaves several sources by arrival time; on a tie the earlier
// part goes first.
type blend []source

var _ source = blend(nil)

func newBlend(parts []blendPart, rate float64) blend {
	b := make(blend, len(parts))
	for i, p := range parts {
		b[i] = p.make(rate * p.share)
	}
	return b
}

func (b blend) first() int {
	best := 0
	for i := 1; i < len(b); i++ {
		if b[i].peek() < b[best].peek() {
			best = i
		}
	}
	return best
}

func (b blend) peek() time.Duration { return b[b.first()].peek() }

func (b blend) pop() Request { return b[b.first()].pop() }

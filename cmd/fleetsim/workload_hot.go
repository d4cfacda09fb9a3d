package main

import "time"

// hotPrefixShape is the incident's traffic: one long system prompt carried by
// most requests, each with a short suffix of its own, arriving faster than
// one worker can serve them. Pure affinity piles all of it on one worker
// (38 running, 64–102 waiting, peers idle); pure balance recomputes the
// system prompt everywhere.
type hotPrefixShape struct {
	name         string  // salts the generator's random stream
	systemTokens int     // the shared prompt
	hotShare     float64 // share of requests that carry it
	suffix       span    // a hot request's own tokens after the shared prompt
	cold         span    // a cold request's prompt, shared with nobody
	output       span
}

// Defaults: at 60 requests/s, 48/s carry the 8k prompt; one default engine
// decodes about 3,600 tokens/s with a full batch, under 20 such requests/s,
// so the hot prefix needs about three workers.
const defaultHotPrefixRate = 60

func defaultHotPrefixShape() hotPrefixShape {
	return hotPrefixShape{
		name:         "hot-prefix",
		systemTokens: 8192,
		hotShare:     0.8,
		suffix:       span{64, 512},
		cold:         span{512, 4096},
		output:       span{64, 320},
	}
}

// hotPrefix generates hotPrefixShape traffic as Poisson arrivals.
type hotPrefix struct {
	shape  hotPrefixShape
	model  string
	bt     int
	ids    *idSpace
	system segment
	clock  poisson
}

var _ source = (*hotPrefix)(nil)

func newHotPrefix(shape hotPrefixShape, model string, bt int, rate float64, seed uint64, ids *idSpace) *hotPrefix {
	h := &hotPrefix{
		shape:  shape,
		model:  model,
		bt:     bt,
		ids:    ids,
		system: segment{base: ids.newRange(), tokens: shape.systemTokens},
		clock:  poisson{rng: newRand(seed, shape.name), rate: rate},
	}
	h.clock.advance()
	return h
}

func (h *hotPrefix) peek() time.Duration { return h.clock.t }

func (h *hotPrefix) pop() Request {
	rng := h.clock.rng
	var s *stream
	if rng.Float64() < h.shape.hotShare {
		s = newStream(h.model, h.bt, h.system, h.ids)
		s.extend(h.system.tokens + h.shape.suffix.draw(rng))
	} else {
		s = newStream(h.model, h.bt, segment{}, h.ids)
		s.extend(h.shape.cold.draw(rng))
	}
	r := s.request(h.clock.t, h.shape.output.draw(rng))
	h.clock.advance()
	return r
}

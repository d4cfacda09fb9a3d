package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// generated names a built-in workload and its default arrival rate.
type generated struct {
	name string
	rate float64 // requests a second
	make func(model string, bt int, rate float64, seed uint64, ids *idSpace) source
}

var workloads = []generated{
	{"chat-sessions", defaultChatRate, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return newConversations(defaultChatShape(), model, bt, rate, seed, ids)
	}},
	{"hot-prefix", defaultHotPrefixRate, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return newHotPrefix(defaultHotPrefixShape(), model, bt, rate, seed, ids)
	}},
	{"agentic", defaultAgenticRate, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return newConversations(defaultAgenticShape(), model, bt, rate, seed, ids)
	}},
	{"mixed", defaultMixedRate, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return newBlend(mixedParts(model, bt, seed, ids), rate)
	}},
}

func workloadNames() string {
	names := make([]string, len(workloads))
	for i, w := range workloads {
		names[i] = w.name
	}
	return strings.Join(names, ", ")
}

func workloadRates() string {
	rates := make([]string, len(workloads))
	for i, w := range workloads {
		rates[i] = fmt.Sprintf("%s %g", w.name, w.rate)
	}
	return strings.Join(rates, ", ")
}

// generateParams are the knobs every generated workload takes.
type generateParams struct {
	name        string
	model       string
	blockTokens int
	requests    int
	rate        float64       // 0: the workload's default
	duration    time.Duration // 0: no limit
	seed        uint64
}

// generate builds a named workload deterministically from its seed.
func generate(p generateParams) (*Workload, error) {
	i := slices.IndexFunc(workloads, func(g generated) bool { return g.name == p.name })
	if i < 0 {
		return nil, fmt.Errorf("unknown workload %q (have %s)", p.name, workloadNames())
	}
	g := workloads[i]
	rate := p.rate
	if rate <= 0 {
		rate = g.rate
	}
	src := g.make(p.model, p.blockTokens, rate, p.seed, &idSpace{})
	reqs := drain(src, p.requests, p.duration)
	if len(reqs) == 0 {
		return nil, fmt.Errorf("workload %s: no arrival within %v", p.name, p.duration)
	}
	return &Workload{Name: p.name, Model: p.model, BlockTokens: p.blockTokens, Requests: reqs}, nil
}

package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvgate/kvgate/admission"
)

// generated names a built-in workload and its default arrival rate.
type generated struct {
	name string
	rate float64 // requests a second
	make func(model string, bt int, rate float64, seed uint64, ids *idSpace) source
	// requests is the default length of the run; 0: defaultRequests.
	requests int
	// partitions the workload's requests come from; nil when they carry no
	// tenant of their own and --partition-by assigns them.
	partitions []partitionSpec
	// admission is the gate the workload runs behind unless flags say
	// otherwise; the zero value is the gateway's default, off.
	admission admissionConfig
	// maxCachedOwners: Workload.MaxCachedOwners.
	maxCachedOwners int
}

var workloads = []generated{
	{name: "chat-sessions", rate: defaultChatRate, make: func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return newConversations(defaultChatShape(), model, bt, rate, seed, ids)
	}},
	{name: "hot-prefix", rate: defaultHotPrefixRate, make: func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return newHotPrefix(defaultHotPrefixShape(), model, bt, rate, seed, ids)
	}},
	{name: "agentic", rate: defaultAgenticRate, make: func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return newConversations(defaultAgenticShape(), model, bt, rate, seed, ids)
	}},
	{name: "mixed", rate: defaultMixedRate, make: func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return newBlend(mixedParts(model, bt, seed, ids), rate)
	}},
	{name: "incident", rate: defaultIncidentRate, make: func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return tenantBlend(defaultIncidentTraffic(), model, bt, rate, seed, ids)
	}, partitions: tenantPartitions(defaultIncidentTraffic()), admission: defaultIncidentAdmission,
		maxCachedOwners: 1},
	{name: "two-tenants", rate: defaultTwoTenantsRate, make: func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
		return tenantBlend(defaultTwoTenantsTraffic(), model, bt, rate, seed, ids)
	}, requests: defaultTwoTenantsRequests, partitions: tenantPartitions(defaultTwoTenantsTraffic()), admission: defaultTwoTenantsAdmission},
}

func workloadNames() string {
	names := make([]string, len(workloads))
	for i, w := range workloads {
		names[i] = w.name
	}
	return strings.Join(names, ", ")
}

func workloadRequests() string {
	var out []string
	for _, w := range workloads {
		if w.requests > 0 {
			out = append(out, fmt.Sprintf("%s %d", w.name, w.requests))
		}
	}
	return strings.Join(append(out, fmt.Sprintf("others %d", defaultRequests)), ", ")
}

// workloadModes lists the workloads whose admission mode is not off.
func workloadModes() string {
	var out []string
	for _, w := range workloads {
		if w.admission.Mode != admission.ModeOff {
			out = append(out, fmt.Sprintf("%s %s", w.name, w.admission.Mode))
		}
	}
	return strings.Join(out, ", ")
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
	requests    int           // 0: the workload's default
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
	requests := p.requests
	if requests <= 0 {
		requests = cmp.Or(g.requests, defaultRequests)
	}
	src := g.make(p.model, p.blockTokens, rate, p.seed, &idSpace{})
	reqs := drain(src, requests, p.duration)
	if len(reqs) == 0 {
		return nil, fmt.Errorf("workload %s: no arrival within %v", p.name, p.duration)
	}
	return &Workload{Name: p.name, Model: p.model, BlockTokens: p.blockTokens, Requests: reqs,
		Partitions: slices.Clone(g.partitions), Admission: g.admission, MaxCachedOwners: g.maxCachedOwners}, nil
}

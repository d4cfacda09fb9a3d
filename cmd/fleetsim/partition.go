package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// partitionSpec is one tenant of a run: its name and its fair-share weight.
type partitionSpec struct {
	Name   string  `json:"name"`
	Weight float64 `json:"weight"`
}

// defaultPartitions is a run without tenants: every request in one
// partition, as the gateway's admission.default_partition.
func defaultPartitions() []partitionSpec { return []partitionSpec{{Name: "default", Weight: 1}} }

// parsePartitions reads --partitions: name:weight pairs (a bare name weighs
// 1), in the order given, which is the scheduler's configuration order.
func parsePartitions(items []string) ([]partitionSpec, error) {
	var out []partitionSpec
	for _, item := range items {
		name, w, hasWeight := strings.Cut(strings.TrimSpace(item), ":")
		p := partitionSpec{Name: name, Weight: 1}
		if hasWeight {
			weight, err := strconv.ParseFloat(w, 64)
			if err != nil {
				return nil, fmt.Errorf("--partitions %q: weight: %w", item, err)
			}
			p.Weight = weight
		}
		switch {
		case p.Name == "":
			return nil, fmt.Errorf("--partitions %q: empty name", item)
		case !(p.Weight > 0) || math.IsInf(p.Weight, 0):
			return nil, fmt.Errorf("--partitions %q: weight must be a finite number > 0", item)
		case slices.ContainsFunc(out, func(q partitionSpec) bool { return q.Name == p.Name }):
			return nil, fmt.Errorf("--partitions names %s twice", p.Name)
		}
		out = append(out, p)
	}
	return out, nil
}

func partitionNames(parts []partitionSpec) []string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.Name
	}
	return names
}

// Partition assignment rules of workloads whose requests carry no tenant of
// their own (--partition-by).
const (
	// partitionByRequest draws each request's partition independently, in
	// proportion to the weights: tenants that share every prompt.
	partitionByRequest = "request"
	// partitionByPrefix picks the partition from the request's first prompt
	// block, in proportion to the weights over the distinct blocks: every
	// request that opens with the same text (a system prompt, a
	// conversation) belongs to one tenant.
	partitionByPrefix = "prefix"
)

var partitionRules = []string{partitionByRequest, partitionByPrefix}

// assignPartitions gives every request of wl a partition of parts by rule,
// deterministically from seed. A request without a full prompt block has no
// text to go by and is drawn as under partitionByRequest.
func assignPartitions(wl *Workload, parts []partitionSpec, rule string, seed uint64) error {
	if !slices.Contains(partitionRules, rule) {
		return fmt.Errorf("--partition-by %q: want %s", rule, strings.Join(partitionRules, " or "))
	}
	wl.Partitions = parts
	if len(parts) == 1 {
		for i := range wl.Requests {
			wl.Requests[i].Partition = parts[0].Name
		}
		return nil
	}
	total := 0.0
	for _, p := range parts {
		total += p.Weight
	}
	pick := func(u float64) string {
		x := u * total
		for _, p := range parts[:len(parts)-1] {
			if x < p.Weight {
				return p.Name
			}
			x -= p.Weight
		}
		return parts[len(parts)-1].Name
	}
	rng := newRand(seed, "partitions")
	for i := range wl.Requests {
		r := &wl.Requests[i]
		if rule == partitionByPrefix && len(r.Prefix) > 0 {
			r.Partition = pick(unitFloat(r.Prefix[0], seed))
			continue
		}
		r.Partition = pick(rng.Float64())
	}
	return nil
}

// unitFloat maps a block hash and the run's seed to [0, 1): the same block
// always lands in the same place, another --seed moves it (splitmix64's
// finaliser over both).
func unitFloat(block, seed uint64) float64 {
	x := block ^ (seed * 0x9e3779b97f4a7c15)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// overrideWeights replaces the weights of a workload that names its own
// partitions with those of --partitions, which must name every partition the
// workload's requests use; it may add partitions that send nothing.
func overrideWeights(wl *Workload, parts []partitionSpec) error {
	for _, p := range wl.Partitions {
		if !slices.ContainsFunc(parts, func(q partitionSpec) bool { return q.Name == p.Name }) {
			return fmt.Errorf("--partitions: workload %s sends requests in partition %q; name it (have %s)",
				wl.Name, p.Name, strings.Join(partitionNames(parts), ","))
		}
	}
	wl.Partitions = parts
	return nil
}

package main

import "github.com/kvgate/kvgate/admission"

// tenantTraffic is one partition's part of a multi-tenant workload: its
// name and weight, its share of the arrivals and the traffic it sends.
type tenantTraffic struct {
	partition partitionSpec
	share     float64
	make      func(model string, bt int, rate float64, seed uint64, ids *idSpace) source
}

// tenantBlend interleaves the tenants' traffic at rate in all, each arrival
// tagged with its partition.
func tenantBlend(traffic []tenantTraffic, model string, bt int, rate float64, seed uint64, ids *idSpace) blend {
	parts := make([]blendPart, len(traffic))
	for i, t := range traffic {
		parts[i] = blendPart{t.share, func(rate float64) source {
			return tagged{t.make(model, bt, rate, seed, ids), t.partition.Name}
		}}
	}
	return newBlend(parts, rate)
}

func tenantPartitions(traffic []tenantTraffic) []partitionSpec {
	out := make([]partitionSpec, len(traffic))
	for i, t := range traffic {
		out[i] = t.partition
	}
	return out
}

// The incident (DESIGN.md): partition "hot" sends one 8k-token system prompt
// with short distinct suffixes at 30 requests/s, about twice what one
// default engine serves (~3,600 decode tokens/s at a full batch, less the
// prefill of each suffix); "bg1" holds chat sessions at 8/s and "bg2" agent
// trajectories at 4/s, each opening with prompts of their own. On 8 workers
// the fleet runs well under half full, so there is room everywhere but on
// the hot prefix's owner: with max_cached_owners_per_prefix 1, pure affinity
// piles the hot partition on one worker while its peers idle. Weights are 1
// each; admission never has to queue, it issues the proofs seeding needs.
const defaultIncidentRate = 42

// The incident runs behind enforcing admission, as a deployment that seeds
// must (seeding redeems admission's proofs); the fleet never fills, so
// nothing waits.
var defaultIncidentAdmission = admissionConfig{Mode: admission.ModeEnforce}

func defaultIncidentTraffic() []tenantTraffic {
	return []tenantTraffic{
		{partitionSpec{"hot", 1}, 30.0 / defaultIncidentRate, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
			return newHotPrefix(incidentHotShape(), model, bt, rate, seed, ids)
		}},
		{partitionSpec{"bg1", 1}, 8.0 / defaultIncidentRate, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
			return newConversations(defaultChatShape(), model, bt, rate, seed, ids)
		}},
		{partitionSpec{"bg2", 1}, 4.0 / defaultIncidentRate, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
			return newConversations(defaultAgenticShape(), model, bt, rate, seed, ids)
		}},
	}
}

// incidentHotShape: every request carries the 8k system prompt.
func incidentHotShape() hotPrefixShape {
	return hotPrefixShape{
		name:         "incident-hot",
		systemTokens: 8192,
		hotShare:     1,
		suffix:       span{64, 512},
		output:       span{64, 320},
	}
}

// Two tenants saturating the fleet, for the fairness goal: partitions "a"
// (weight 1) and "b" (weight 3) each send 45 requests/s, together twice what
// 8 default engines serve. The requests are decode-bound (short prompts,
// 256–1,024 output tokens: a full batch of 64 steps in ~18 ms, so a slot
// turns over every ~11 s and the fleet serves ~45 requests/s), which makes
// batch slots, the capacity admission counts, the fleet's real bottleneck:
// the backlog waits in admission's queues, where the fair share orders it,
// not in the engines' FIFO queues. Half the prompts open with a 512-token
// system prompt of the tenant's own, so the cache barely matters: served
// tokens should divide 1:3. The run is long (defaultTwoTenantsRequests) so
// that its edges weigh little: at the start an empty fleet admits whoever
// comes first, at the end the last queued requests drain.
const (
	defaultTwoTenantsRate     = 90
	defaultTwoTenantsRequests = 48000
)

// Two tenants run behind enforcing admission with short queues: what does
// not fit is refused at once (429), as a gateway that must not let queues
// grow without bound does. Short queues also keep the run's end fair: the
// requests still queued when arrivals stop, served whatever their weight,
// are few.
var defaultTwoTenantsAdmission = admissionConfig{Mode: admission.ModeEnforce, MaxQueue: 128}

func defaultTwoTenantsTraffic() []tenantTraffic {
	shape := func(name string) hotPrefixShape {
		return hotPrefixShape{
			name:         name,
			systemTokens: 512,
			hotShare:     0.5,
			suffix:       span{64, 512},
			cold:         span{256, 1024},
			output:       span{256, 1024},
		}
	}
	return []tenantTraffic{
		{partitionSpec{"a", 1}, 0.5, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
			return newHotPrefix(shape("two-tenants-a"), model, bt, rate, seed, ids)
		}},
		{partitionSpec{"b", 3}, 0.5, func(model string, bt int, rate float64, seed uint64, ids *idSpace) source {
			return newHotPrefix(shape("two-tenants-b"), model, bt, rate, seed, ids)
		}},
	}
}

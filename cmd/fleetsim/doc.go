// Command fleetsim replays one workload against a simulated fleet once per
// routing policy, in virtual time, and prints the policies side by side: the
// prefix-cache hit rate, TTFT and end-to-end latency percentiles, throughput,
// the longest waiting queue any worker had, and how unevenly the batches were
// filled.
//
// What it models. Each worker is a sim.Engine (batch slots, FIFO waiting
// queue, prefix cache with LRU eviction, prefill time on uncached tokens,
// decode steps that grow with the batch). Each policy gets its own fleet and
// the real routing.Router from the routing package, driven by a virtual
// clock, so the decisions are exactly the gateway's. The router sees worker
// load as the gateway does: running, waiting and KV usage from a telemetry
// poll every --telemetry-interval (stale in between), plus its own live
// in-flight count and reservations. A request's prompt is a chain of block
// hashes (routing.ChainIDs, seeded by the model), the same hashes the router
// routes on and the engine caches under.
//
// Workloads come from a Mooncake trace (--trace; its hash_ids are blocks of
// 512 tokens) or are generated from --seed (--workload chat-sessions,
// hot-prefix, agentic, mixed, and the multi-tenant incident and two-tenants).
// Arrivals are open loop: they follow the trace or the generator's clock
// whatever the fleet does.
//
// Every arrival goes through the real admission.Scheduler first, on the same
// virtual clock (its queue timeouts are events of the loop), over the fleet's
// issuable headroom as the gateway computes it: --admission off and shadow
// dispatch at once, enforce queues while the fleet is full. Each request
// belongs to a partition (tenant): its own for incident and two-tenants, else
// from --partitions split by --partition-by, else "default". A dispatched
// request's credit is redeemed into the proof distribution seeding claims
// (policy cache_aware+seeding), handed to routing once routed, and released
// when the request ends, as in the gateway.
//
// What it refuses to model. Clients do not react to latency (a conversation's
// next turn may arrive before the previous answer finished; nobody retries or
// gives up). Workers never fail, restart or change capacity, so generations
// and revisions never move, and a seed never fails. Requests are never
// streamed and ask for one completion each. A request counts as rejected when
// admission refuses it (queue full or timed out), the router refuses it, or
// the engine cannot ever hold it (sim.ErrTooLarge). The network
// and the gateway cost nothing. The engine's own limits apply as sim documents
// them: no preemption, and generated tokens are not cached, so a conversation's
// next turn reuses its previous prompt but not the previous answer.
//
// Every policy replays the same requests, and everything random derives from
// --seed, so equal flags give byte-identical JSON.
package main

// Package sim models one LLM engine worker with continuous batching, so that
// kvgate's routing and admission can be tested against something that behaves
// like vLLM or SGLang under load: a full batch makes requests wait, a cold
// prefix makes the first token slow, a warm one makes it fast.
//
// The model decides:
//   - admission: a FIFO waiting queue enters free batch slots (Config.MaxRunning)
//     in order, each only when all the KV blocks it will ever need (prompt and
//     output) fit; the head of the queue blocks those behind it, as in vLLM;
//   - the prefix cache: blocks named by the caller's chained block hashes, kept
//     after their request ends and evicted least recently used first; blocks of
//     running requests are pinned and never evicted;
//   - time: a step lasts the prefill of the prompt tokens it schedules (only the
//     tokens past the longest cached prefix) plus a decode step that grows with
//     the batch; every running request that has finished its prefill emits one
//     token at the end of each step;
//   - telemetry, as an engine reports it: running, waiting, KV usage, prefix
//     cache hit and query counters.
//
// It refuses to read the wall clock, start goroutines, do I/O or draw random
// numbers: the caller passes the time, so the same Engine runs in real time
// behind enginesim's HTTP server and in virtual time inside fleetsim, and the
// same inputs always give the same events. It does not tokenize or hash text
// either: a request arrives as a token count and a slice of block hashes.
//
// It does not model preemption (admission reserves every block a request will
// need, so a running request never runs out), sampling, stop strings, or
// speculative decoding: a request generates exactly its OutputTokens unless
// cancelled.
package sim

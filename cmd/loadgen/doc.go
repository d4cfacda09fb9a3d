// Command loadgen drives an OpenAI-compatible endpoint (kvgate, an engine
// directly, or nginx in front of one) and reports throughput, TTFT and
// end-to-end latency, so the three can be compared under the same load.
//
// Arrivals are either open-loop (Poisson at --rate; arrivals never wait for
// completions, and an arrival that finds --max-inflight requests outstanding
// is counted as the error kind "dropped" instead of queueing inside the load
// generator), closed-loop (--concurrency workers, each sending its next
// request when the previous one ends), or the timestamps of a Mooncake trace
// (--trace, divided by --time-scale). Everything random derives from --seed,
// and request i has the same prompt whatever the arrival order.
//
// Measurements, per completed request, from the moment the request is handed
// to the HTTP client:
//
//   - TTFT: streaming, until the first SSE chunk whose delta content (chat)
//     or text (completions) is non-empty; a role-only first chunk does not
//     count. Non-streaming responses have no first token, so TTFT is the
//     end-to-end latency. A stream that completes without any content
//     contributes no TTFT sample.
//   - E2E: streaming, until "data: [DONE]"; non-streaming, until the whole
//     body is read.
//   - Output tokens: usage.completion_tokens when the server reports it
//     (streaming requests ask for it with stream_options.include_usage),
//     otherwise the number of content chunks (streaming) or the content
//     length / 4 (non-streaming).
//
// Counts: sent is the requests handed to the HTTP client; a dropped arrival
// is never sent, so sent + dropped is the number of arrivals, and completed
// plus the other error kinds is sent. --requests counts arrivals.
//
// Requests per second and output tokens per second divide by the whole run,
// from the first arrival until the last in-flight request ends: the tail is
// part of the cost, as in vegeta.
//
// Error kinds: http_<status> (non-2xx), connect (the request could not be
// sent or its response not read, before the body for streaming and at any
// point for non-streaming), timeout (--timeout elapsed), stream_error (stream
// ended without [DONE], broke off mid-way, or carried a data: {"error":...}
// event), decode (a body or usage object that is not the expected JSON),
// dropped (open-loop arrival over --max-inflight) and canceled (the run was
// interrupted while the request was in flight).
//
// loadgen refuses to become the bottleneck it measures: request bodies are
// assembled by appending pre-marshalled fragments into pooled buffers,
// prompts are JSON-safe by construction so nothing is escaped, SSE is read
// line by line from a pooled bufio.Reader and chunks are classified by byte
// search, with a JSON decode only for the usage and error objects.
package main

// Package simserver serves one sim.Engine over HTTP in real time, speaking
// what kvgate meets in production: the OpenAI completions and chat
// completions API (streaming or not), vLLM's /metrics, SGLang's /get_load and
// /v1/loads, /health and /v1/models.
//
// It decides how a request becomes engine work, and how engine events become
// bytes:
//   - the prompt is a canonical text (chat: each message's role then content,
//     in order; completions: the prompt strings); about 4 bytes make a token,
//     and consecutive blocks of Config.Engine.BlockTokens×4 bytes are hashed
//     in a chain seeded by the model name, so equal prefixes hit the engine's
//     prefix cache as they would on a real worker;
//   - the output is exactly max_tokens words (default 16), each chosen from a
//     small vocabulary by the seed (the request's, else Config.Seed), the
//     prompt text and the token index alone: two servers given the same
//     seeded request answer the same bytes, and the streamed deltas
//     concatenate to the non-streamed text;
//   - wall time is simulated time × Config.TimeScale; 0 answers at once;
//   - a client that goes away cancels its request in the engine, and
//     /sim/stats counts it, so a gateway test can see cancellation arrive;
//   - faults (/sim/faults) and a telemetry override (/sim/load) let tests
//     make a worker fail, stall or look full.
//
// It refuses what a gateway test does not need: n > 1, logprobs, tools,
// stop strings, and any tokenizer. Every error is an OpenAI error object.
package simserver

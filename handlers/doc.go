// Package handlers is kvgate's HTTP face: the OpenAI-compatible routes, the
// middleware around them, and the proxy that carries each request to the
// worker routing chose.
//
// It decides how a request is read, retried and relayed, and how every
// failure is spelled to the client. Errors become OpenAI error objects in
// exactly one place (errors.go). It never decides placement (routing does)
// or routability (workers does).
//
// The proxy forwards the body as received and relays the worker's answer:
// non-streaming bodies whole, server-sent events one event at a time with a
// flush after each. Nothing reaches the client before the worker produced
// its first complete event, so every failure before that point is retried on
// another worker; after it, a failure ends the stream with an error event.
package handlers

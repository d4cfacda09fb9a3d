package handlers

import (
	"net/http"
	"runtime/debug"
)

// recoverer turns a panic in a handler into a 500 with an OpenAI error and a
// log line, so one bad request never takes the process down. Deferred
// releases (in-flight counts, reservations) run while the panic unwinds.
func (g *Gateway) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v) // the deliberate way to abort a response
			}
			g.opts.Logger.Error("panic serving request", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			writeError(w, errInternal())
		}()
		next.ServeHTTP(w, r)
	})
}

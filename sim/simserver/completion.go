package simserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/goccy/go-json"

	"github.com/kvgate/kvgate/sim"
)

// exchange is one completion request in flight.
type exchange struct {
	kind         endpoint
	req          completionRequest
	model        string
	quotedModel  []byte
	ticket       *ticket
	promptTokens int
	outputSeed   uint64
	// firstAfter holds the first token back (the slow_first_token fault).
	firstAfter time.Time
	// dieAt is the token count at which the connection is dropped; 0 never.
	dieAt   int
	id      string
	created int64
}

func (s *Server) serveCompletion(kind endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
					msg: "request body larger than " + strconv.FormatInt(tooBig.Limit, 10) + " bytes"})
				return
			}
			writeError(w, apiError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: "reading the body: " + err.Error()})
			return
		}
		req, err := decodeRequest(kind, body)
		if err != nil {
			writeError(w, requestError(err))
			return
		}
		model := req.model
		if model == "" {
			model = s.cfg.Models[0]
		}
		quoted, ok := s.quotedModels[model]
		if !ok {
			writeError(w, modelNotFound(model))
			return
		}

		faults := s.faults.Load()
		if faults.ForceStatus != 0 {
			s.faulted.Add(1)
			writeError(w, forcedError(faults.ForceStatus))
			return
		}
		if faults.ErrorRate > 0 && s.draw() < faults.ErrorRate {
			s.faulted.Add(1)
			writeError(w, forcedError(http.StatusInternalServerError))
			return
		}
		if faults.Hang {
			s.hang(r.Context())
			return
		}

		x := exchange{
			kind:         kind,
			req:          req,
			model:        model,
			quotedModel:  quoted,
			promptTokens: promptTokens(req.prompt),
			firstAfter:   arrived.Add(faults.SlowFirstToken),
			created:      arrived.Unix(),
		}
		if faults.DieAfterTokens > 0 && faults.DieAfterTokens <= req.maxTokens {
			x.dieAt = faults.DieAfterTokens
		}
		seed := s.cfg.Seed
		if req.hasSeed {
			seed = req.seed
		}
		x.outputSeed = outputSeed(seed, req.prompt)
		x.ticket, err = s.submit(sim.Request{
			BlockHashes:  blockHashes(req.prompt, model, s.cfg.Engine.BlockTokens),
			PromptTokens: x.promptTokens,
			OutputTokens: req.maxTokens,
			// Only a stream, or a request set to die mid-way, needs to see
			// each token.
			TokenEvents: req.stream || x.dieAt > 0,
		})
		if err != nil {
			writeError(w, requestError(err))
			return
		}
		x.id = s.responseID(kind, x.ticket.id)
		if req.stream {
			s.stream(w, r.Context(), &x)
		} else {
			s.respond(w, r.Context(), &x)
		}
	}
}

func (s *Server) responseID(kind endpoint, id uint64) string {
	prefix := "cmpl-"
	if kind == chatEndpoint {
		prefix = "chatcmpl-"
	}
	return prefix + strconv.FormatUint(uint64(s.instanceTag), 16) + "-" + strconv.FormatUint(id, 10)
}

// respond answers a non-streaming request once its last token is out.
func (s *Server) respond(w http.ResponseWriter, ctx context.Context, x *exchange) {
	t := x.ticket
	if x.dieAt > 0 {
		if !s.waitTokens(ctx, t, x.dieAt) {
			s.abandon(t)
			return
		}
		s.die(t)
	}
	if !s.waitTokens(ctx, t, x.req.maxTokens) || !s.waitUntil(ctx, x.firstAfter) {
		s.abandon(t)
		return
	}
	usage := usageOf(x.promptTokens, x.req.maxTokens, int(t.cached.Load()))
	text := string(outputText(x.outputSeed, x.req.maxTokens))
	var resp any
	if x.kind == chatEndpoint {
		resp = chatResponse{
			ID: x.id, Object: "chat.completion", Created: x.created, Model: x.model, Usage: usage,
			Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: text}, FinishReason: finishLength}},
		}
	} else {
		resp = textResponse{
			ID: x.id, Object: "text_completion", Created: x.created, Model: x.model, Usage: usage,
			Choices: []textChoice{{Text: text, FinishReason: finishLength}},
		}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		writeError(w, apiError{status: http.StatusInternalServerError, typ: "server_error", msg: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(b); err != nil {
		s.cancelled.Add(1)
		return
	}
	s.completed.Add(1)
}

// stream answers a streaming request token by token, flushing each batch of
// tokens the engine produced since the last write.
func (s *Server) stream(w http.ResponseWriter, ctx context.Context, x *exchange) {
	t := x.ticket
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	// Headers go out at once, as uvicorn sends them before the first chunk.
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		s.abandon(t)
		return
	}

	enc := newChunkEncoder(x.kind, x.id, x.created, x.quotedModel)
	total := x.req.maxTokens
	buf := make([]byte, 0, 1024)
	for sent := 0; sent < total; {
		if !s.waitTokens(ctx, t, sent+1) || (sent == 0 && !s.waitUntil(ctx, x.firstAfter)) {
			s.abandon(t)
			return
		}
		buf = buf[:0]
		for n := int(t.generated.Load()); sent < n; {
			buf = enc.appendToken(buf, sent, outputWord(x.outputSeed, sent), sent == total-1)
			sent++
			if sent == x.dieAt {
				_, _ = w.Write(buf)
				_ = rc.Flush()
				s.die(t)
			}
		}
		if _, err := w.Write(buf); err != nil {
			s.abandon(t)
			return
		}
		if err := rc.Flush(); err != nil {
			s.abandon(t)
			return
		}
	}
	buf = buf[:0]
	if x.req.includeUsage {
		buf = enc.appendUsage(buf, usageOf(x.promptTokens, total, int(t.cached.Load())))
	}
	buf = append(buf, sseDone...)
	if _, err := w.Write(buf); err != nil {
		s.cancelled.Add(1)
		return
	}
	if err := rc.Flush(); err != nil {
		s.cancelled.Add(1)
		return
	}
	s.completed.Add(1)
}

// waitTokens waits until the request has generated n tokens; false when the
// client left or the server is closing first.
func (s *Server) waitTokens(ctx context.Context, t *ticket, n int) bool {
	for int(t.generated.Load()) < n {
		select {
		case <-t.notify:
		case <-ctx.Done():
			return false
		case <-s.done:
			return false
		}
	}
	return true
}

// waitUntil waits for the wall clock to reach at.
func (s *Server) waitUntil(ctx context.Context, at time.Time) bool {
	d := time.Until(at)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

// abandon withdraws a request whose client went away, or that the server
// is closing on. A closing server aborts the connection rather than let
// net/http finish an empty 200: a killed engine resets its connections, and
// a clean empty answer would look like success to the client.
func (s *Server) abandon(t *ticket) {
	s.withdraw(t)
	s.cancelled.Add(1)
	select {
	case <-s.done:
		panic(http.ErrAbortHandler)
	default:
	}
}

// die drops the connection: the die_after_tokens fault. net/http closes the
// connection without finishing the response when a handler panics with
// ErrAbortHandler, and logs nothing.
func (s *Server) die(t *ticket) {
	s.withdraw(t)
	s.faulted.Add(1)
	panic(http.ErrAbortHandler)
}

// hang holds a request without answering until the client goes away.
func (s *Server) hang(ctx context.Context) {
	s.faulted.Add(1)
	select {
	case <-ctx.Done():
		s.cancelled.Add(1)
	case <-s.done:
	}
}

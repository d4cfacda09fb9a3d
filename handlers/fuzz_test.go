package handlers

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvgate/kvgate/workers"
)

// FuzzParseRequest: no body, however malformed, makes the parser panic, and
// whatever it accepts has a model and the field its endpoint requires.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		chatBody, streamBody,
		`{"model":"m","prompt":"x","max_tokens":5}`,
		`{"model":"m","prompt":["a","b"],"n":2}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"tools":[]}`,
		`{"model":"m","messages":null}`, `{"model":1}`, `{}`, `[]`, `null`, `"x"`, `{"model":"m","messages":[`,
		"{\"model\":\"m\",\"messages\":[{}],\"max_tokens\":1e400}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, ep := range []endpoint{endpointChat, endpointCompletions} {
			p, aerr := parseRequest(body, ep)
			if aerr != nil {
				if aerr.Status != http.StatusBadRequest || aerr.Type != typeInvalidRequest {
					t.Fatalf("parse error %d %s", aerr.Status, aerr.Type)
				}
				continue
			}
			if p.Model == "" || p.promptTokens < 0 {
				t.Fatalf("accepted %q without a model", body)
			}
		}
	})
}

// FuzzCompletionHandler drives the whole handler with arbitrary bodies: it
// never panics, and every error is an OpenAI error object.
func FuzzCompletionHandler(f *testing.F) {
	f.Add([]byte(chatBody))
	f.Add([]byte(`{"model":"unknown","messages":[{"role":"user","content":"x"}]}`))
	f.Add([]byte(`{"model":"m","messages":[]}`))
	f.Add([]byte("\x00\xff{"))
	gw := New(Options{Registry: emptyRegistry(f), MaxBodyBytes: 1 << 16})
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			rec := httptest.NewRecorder()
			gw.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(body))))
			if rec.Code < 400 {
				t.Fatalf("no worker, yet status %d", rec.Code)
			}
			if rec.Code == http.StatusInternalServerError {
				t.Fatalf("the handler panicked on %q", body)
			}
			var e openAIError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("status %d without an OpenAI error object: %q", rec.Code, rec.Body.String())
			}
		}
	})
}

// Any body POSTed to /admin/workers gets 201, or an OpenAI error with a
// client status, never a 500 or a panic. Workers the fuzzer manages to add
// are held to loopback addresses, so their health checks stay on the
// machine.
func FuzzAdminAddWorker(f *testing.F) {
	for _, seed := range []string{
		`{"id":"a","url":"http://127.0.0.1:9"}`,
		`{"id":"b","url":"http://127.0.0.1:9","models":["m"],"engine":"sglang","max_running":4,"dp_ranks":2}`,
		`{"id":"","url":"x"}`, `{"id":1}`, `[]`, `null`, `{"url":"http://127.0.0.1:9","extra":true}`,
		`{"id":"c","url":"http://127.0.0.1:9","models":[""]}`, `{`,
	} {
		f.Add([]byte(seed))
	}
	reg := workers.NewRegistry(workers.Options{HealthInterval: time.Hour, TelemetryInterval: time.Hour})
	f.Cleanup(reg.Close)
	loopbackOnly := func(e *WorkerEntry) []FieldProblem {
		if problems := configRules(e); len(problems) > 0 {
			return problems
		}
		if u, err := url.Parse(e.URL); err != nil || u.Hostname() != "127.0.0.1" {
			return []FieldProblem{{Path: "url", Reason: "the fuzzer adds loopback workers only"}}
		}
		return nil
	}
	h := NewAdmin(AdminOptions{Registry: reg, Listen: "127.0.0.1:8080", CheckWorker: loopbackOnly})
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/workers", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusCreated:
			return
		case http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Fatalf("not an OpenAI error object: %s", rec.Body)
		}
	})
}

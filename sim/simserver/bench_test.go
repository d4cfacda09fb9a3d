package simserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkInstantRequest pushes requests through the handler at TimeScale 0,
// the path a gateway overhead benchmark leans on: its cost is the
// simulator's share of every measured request.
func BenchmarkInstantRequest(b *testing.B) {
	cases := []struct {
		name, path, body string
	}{
		{"chat", "/v1/chat/completions", `{"model":"sim","messages":[{"role":"system","content":"` + longText + `"},{"role":"user","content":"hi"}],"max_tokens":16}`},
		{"chat_stream", "/v1/chat/completions", `{"model":"sim","messages":[{"role":"system","content":"` + longText + `"},{"role":"user","content":"hi"}],"max_tokens":16,"stream":true}`},
		{"completions", "/v1/completions", `{"model":"sim","prompt":"` + longText + `","max_tokens":16}`},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.TimeScale = 0
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			h := s.Handler()
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(tc.body))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkInstantParallel is the same under concurrency, where every request
// contends for the engine lock.
func BenchmarkInstantParallel(b *testing.B) {
	cfg := DefaultConfig()
	cfg.TimeScale = 0
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	body := `{"model":"sim","messages":[{"role":"user","content":"` + longText + `"}],"max_tokens":16}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("status %d", rec.Code)
				return
			}
		}
	})
}

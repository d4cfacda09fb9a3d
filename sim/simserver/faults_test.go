package simserver

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const shortChat = `{"messages":[{"role":"user","content":"hello"}],"max_tokens":5}`

func TestForceStatus(t *testing.T) {
	cases := []struct {
		status     int
		typ        string
		retryAfter bool
	}{
		{http.StatusServiceUnavailable, "server_error", true},
		{http.StatusTooManyRequests, "rate_limit_error", true},
		{http.StatusInternalServerError, "server_error", false},
		{http.StatusBadGateway, "server_error", false},
		{http.StatusBadRequest, "invalid_request_error", false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			s, url := startServer(t, func(c *Config) { c.Faults.ForceStatus = tc.status })
			for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
				resp := post(t, url+path, `{"prompt":"x","messages":[{"role":"user","content":"x"}]}`)
				assert.Equal(t, tc.status, resp.StatusCode)
				assert.Equal(t, tc.retryAfter, resp.Header.Get("Retry-After") != "")
				e := decodeBody[errorBody](t, resp)
				assert.Equal(t, tc.typ, e.Error.Type)
				require.NotNil(t, e.Error.Code)
				assert.Equal(t, "injected_fault", *e.Error.Code)
			}
			st := s.Stats()
			assert.Equal(t, int64(2), st.Faulted)
			assert.Zero(t, st.Submitted)
		})
	}
}

func TestErrorRate(t *testing.T) {
	statuses := func(rate float64) []int {
		_, url := startServer(t, func(c *Config) { c.Seed = 11; c.Faults.ErrorRate = rate })
		var out []int
		for range 40 {
			resp := post(t, url+"/v1/chat/completions", shortChat)
			readAll(t, resp)
			out = append(out, resp.StatusCode)
		}
		return out
	}
	count := func(codes []int, want int) int {
		n := 0
		for _, c := range codes {
			if c == want {
				n++
			}
		}
		return n
	}

	assert.Equal(t, 40, count(statuses(1), 500), "rate 1 fails every request")
	assert.Equal(t, 40, count(statuses(0), 200), "rate 0 fails none")
	half := statuses(0.5)
	assert.Equal(t, half, statuses(0.5), "the failures follow the seed")
	assert.InDelta(t, 20, count(half, 500), 12)
	assert.Equal(t, 40, count(half, 500)+count(half, 200))
}

func TestSlowFirstToken(t *testing.T) {
	const delay = 150 * time.Millisecond
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", streaming), func(t *testing.T) {
			_, url := startServer(t, func(c *Config) { c.Faults.SlowFirstToken = delay })
			start := time.Now()
			body := fmt.Sprintf(`{"prompt":"x","max_tokens":3,"stream":%v}`, streaming)
			resp := post(t, url+"/v1/completions", body)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			buf := make([]byte, 1)
			_, err := resp.Body.Read(buf)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, time.Since(start), delay, "no token before the delay")
		})
	}
}

func TestDieAfterTokens(t *testing.T) {
	t.Run("a stream stops mid-way without [DONE]", func(t *testing.T) {
		s, url := startServer(t, func(c *Config) { c.Faults.DieAfterTokens = 3 })
		resp := post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":10,"stream":true}`)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		st, err := readStream(resp.Body)
		assert.Error(t, err, "the connection breaks")
		assert.False(t, st.done)
		assert.Len(t, st.chunks, 3)
		stats := s.Stats()
		assert.Equal(t, int64(1), stats.Faulted)
		assert.Zero(t, stats.Completed)
		assert.Zero(t, stats.Running)
	})
	t.Run("a non-streaming request gets no response", func(t *testing.T) {
		s, url := startServer(t, func(c *Config) { c.Faults.DieAfterTokens = 1 })
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
		if err == nil {
			resp.Body.Close()
		}
		require.Error(t, err)
		assert.Equal(t, int64(1), s.Stats().Faulted)
	})
	t.Run("a request shorter than the limit completes", func(t *testing.T) {
		_, url := startServer(t, func(c *Config) { c.Faults.DieAfterTokens = 10 })
		resp := post(t, url+"/v1/completions", `{"prompt":"x","max_tokens":4,"stream":true}`)
		st, err := readStream(resp.Body)
		require.NoError(t, err)
		assert.True(t, st.done)
	})
}

func TestHang(t *testing.T) {
	s, url := startServer(t, func(c *Config) { c.Faults.Hang = true })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(shortChat))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, context.DeadlineExceeded, "no answer")
	require.Eventually(t, func() bool { return s.Stats().Cancelled == 1 }, 5*time.Second, 5*time.Millisecond,
		"the server saw the client go away")
	assert.Equal(t, int64(1), s.Stats().Faulted)
	assert.Zero(t, s.Stats().Submitted)
}

func TestFailHealth(t *testing.T) {
	_, url := startServer(t, func(c *Config) { c.Faults.FailHealth = true })
	resp := get(t, url+"/health")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	decodeBody[errorBody](t, resp)

	post(t, url+"/sim/faults", `{"fail_health":false}`)
	assert.Equal(t, http.StatusOK, get(t, url+"/health").StatusCode)
}

func TestFaultsEndpoint(t *testing.T) {
	_, url := startServer(t, nil)
	current := func() faultsJSON { return decodeBody[faultsJSON](t, get(t, url+"/sim/faults")) }
	assert.Equal(t, Faults{}.wire(), current())

	steps := []struct {
		name, body string
		status     int
		want       faultsJSON
	}{
		{"set one field", `{"error_rate":0.25}`, 200,
			faultsJSON{ErrorRate: 0.25, SlowFirstToken: "0s"}},
		{"another field keeps the first", `{"hang":true,"die_after_tokens":4}`, 200,
			faultsJSON{ErrorRate: 0.25, Hang: true, DieAfterTokens: 4, SlowFirstToken: "0s"}},
		{"a duration string", `{"slow_first_token":"250ms"}`, 200,
			faultsJSON{ErrorRate: 0.25, Hang: true, DieAfterTokens: 4, SlowFirstToken: "250ms"}},
		{"a duration in seconds", `{"slow_first_token":0.5,"hang":false}`, 200,
			faultsJSON{ErrorRate: 0.25, DieAfterTokens: 4, SlowFirstToken: "500ms"}},
		{"an invalid value changes nothing", `{"error_rate":2,"hang":true}`, 400,
			faultsJSON{ErrorRate: 0.25, DieAfterTokens: 4, SlowFirstToken: "500ms"}},
		{"a status that is no error", `{"force_status":200}`, 400,
			faultsJSON{ErrorRate: 0.25, DieAfterTokens: 4, SlowFirstToken: "500ms"}},
		{"not JSON", `{"hang":`, 400,
			faultsJSON{ErrorRate: 0.25, DieAfterTokens: 4, SlowFirstToken: "500ms"}},
		{"clear", `{"error_rate":0,"die_after_tokens":0,"slow_first_token":"0s","force_status":503}`, 200,
			faultsJSON{ForceStatus: 503, SlowFirstToken: "0s"}},
	}
	for _, step := range steps {
		resp := post(t, url+"/sim/faults", step.body)
		readAll(t, resp)
		assert.Equal(t, step.status, resp.StatusCode, step.name)
		assert.Equal(t, step.want, current(), step.name)
	}
}

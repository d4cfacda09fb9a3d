package simserver

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/sim"
)

func TestStartServesOnLoopback(t *testing.T) {
	// As the gateway's demo does: several workers on ephemeral ports.
	addrs := map[string]bool{}
	for range 4 {
		s, err := New(Config{Models: []string{"demo"}, TimeScale: 0.01})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
		addr, err := s.Start("127.0.0.1:0")
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(addr, "127.0.0.1:"), addr)
		addrs[addr] = true

		resp := post(t, "http://"+addr+"/v1/chat/completions", `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		readAll(t, resp)
	}
	assert.Len(t, addrs, 4)
}

func TestCloseReleasesWaitingRequests(t *testing.T) {
	for _, fault := range []string{"hang", "long stream"} {
		t.Run(fault, func(t *testing.T) {
			cfg := Config{TimeScale: 1}
			body := `{"prompt":"x","max_tokens":100000,"stream":true}`
			if fault == "hang" {
				cfg.Faults.Hang = true
			}
			s, err := New(cfg)
			require.NoError(t, err)
			addr, err := s.Start("127.0.0.1:0")
			require.NoError(t, err)

			errc := make(chan error, 1)
			go func() {
				resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(body))
				if err == nil {
					_, err = readStream(resp.Body)
					resp.Body.Close()
				}
				errc <- err
			}()
			require.Eventually(t, func() bool {
				st := s.Stats()
				return st.Faulted+st.Submitted == 1
			}, 5*time.Second, 5*time.Millisecond)
			require.NoError(t, s.Close())
			select {
			case <-errc:
			case <-time.After(5 * time.Second):
				t.Fatal("the client was never released")
			}
		})
	}
}

func TestShutdownWaitsForRequestsInFlight(t *testing.T) {
	s, err := New(Config{TimeScale: 1, Engine: sim.Config{DecodeStepBase: 10 * time.Millisecond}})
	require.NoError(t, err)
	addr, err := s.Start("127.0.0.1:0")
	require.NoError(t, err)

	type result struct {
		st  stream
		err error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.Post("http://"+addr+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"x","max_tokens":20,"stream":true}`))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer resp.Body.Close()
		st, err := readStream(resp.Body)
		done <- result{st, err}
	}()
	require.Eventually(t, func() bool { return s.Stats().Running == 1 }, 5*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))
	r := <-done
	require.NoError(t, r.err)
	assert.True(t, r.st.done, "the stream in flight completed")
	assert.Equal(t, int64(1), s.Stats().Completed)
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"defaults", func(*Config) {}, true},
		{"zero value fills defaults", func(c *Config) { *c = Config{} }, true},
		{"empty model id", func(c *Config) { c.Models = []string{"a", ""} }, false},
		{"duplicate model", func(c *Config) { c.Models = []string{"a", "a"} }, false},
		{"negative time scale", func(c *Config) { c.TimeScale = -1 }, false},
		{"bad engine", func(c *Config) { c.Engine.MaxRunning = -1 }, false},
		{"bad fault", func(c *Config) { c.Faults.ErrorRate = 1.5 }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			s, err := New(cfg)
			if !tc.ok {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.NoError(t, s.Close())
		})
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/sim/simserver"
)

// fleet is a gateway in front of enginesim workers, all on loopback, wired
// by run() exactly as the binary is.
type fleet struct {
	url    string // gateway base, http://127.0.0.1:port
	sims   []*simserver.Server
	simURL []string
	stop   context.CancelFunc
	done   chan error
}

type fleetConfig struct {
	workers    int
	maxRunning int // each worker's slots (engine and config hint); 0 = 8
	timeScale  float64
	faults     simserver.Faults // applied to worker 0
	args       []string
	yaml       string // extra YAML appended to the generated config
}

func startFleet(t *testing.T, fc fleetConfig) *fleet {
	t.Helper()
	f := &fleet{}
	slots := fc.maxRunning
	if slots == 0 {
		slots = 8
	}
	var ws strings.Builder
	f.startSims(t, &ws, fc.workers, slots, fc.timeScale, fc.faults)
	conf := "listen: 127.0.0.1:0\nshutdown_grace: 5s\nworkers:\n" + ws.String() + `
health:
  interval: 50ms
  timeout: 1s
  unhealthy_threshold: 1
telemetry:
  interval: 100ms
  max_age: 1s
  timeout: 100ms
retry:
  backoff_base: 1ms
  backoff_max: 10ms
log:
  level: warn
` + fc.yaml
	f.launch(t, conf, fc.args...)
	require.Eventually(t, func() bool {
		resp, err := http.Get(f.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 && f.allHealthy(t, fc.workers)
	}, 5*time.Second, 10*time.Millisecond, "gateway ready with every worker healthy")
	return f
}

// startSims starts n enginesim workers w0… of slots slots on loopback,
// faults on w0, and writes their workers: entries to ws.
func (f *fleet) startSims(t *testing.T, ws *strings.Builder, n, slots int, timeScale float64, faults simserver.Faults) {
	t.Helper()
	for i := range n {
		cfg := simserver.DefaultConfig()
		cfg.TimeScale = timeScale
		cfg.Seed = uint64(100 + i)
		cfg.Engine.MaxRunning = slots
		if i == 0 {
			cfg.Faults = faults
		}
		s, err := simserver.New(cfg)
		require.NoError(t, err)
		addr, err := s.Start("127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		f.sims = append(f.sims, s)
		f.simURL = append(f.simURL, "http://"+addr)
		fmt.Fprintf(ws, "  - id: w%d\n    url: http://%s\n    engine: vllm\n    max_running: %d\n", i, addr, slots)
	}
}

// launch starts the gateway as the binary runs it, on config conf written
// to a file, and stops it when the test ends.
func (f *fleet) launch(t *testing.T, conf string, args ...string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "kvgate.yaml")
	require.NoError(t, os.WriteFile(file, []byte(conf), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	f.done, f.stop = make(chan error, 1), cancel
	go func() {
		f.done <- run(ctx, append([]string{"--config", file}, args...), nil, io.Discard, io.Discard, started)
	}()
	select {
	case addr := <-started:
		f.url = "http://" + addr
	case err := <-f.done:
		cancel()
		t.Fatalf("gateway did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		<-f.done
	})
}

func (f *fleet) allHealthy(t *testing.T, n int) bool {
	m := f.metrics(t)
	for i := range n {
		if !strings.Contains(m, fmt.Sprintf(`kvgate_worker_healthy{worker="w%d"} 1`, i)) {
			return false
		}
	}
	return true
}

func (f *fleet) client() openai.Client {
	return openai.NewClient(option.WithBaseURL(f.url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

func (f *fleet) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(f.url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// metricSum adds every sample of a metric family in the exposition text.
func metricSum(text, name string) float64 {
	var total float64
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var v float64
		fields := strings.Fields(line)
		fmt.Sscan(fields[len(fields)-1], &v)
		total += v
	}
	return total
}

func (f *fleet) inflight(t *testing.T) float64 {
	return metricSum(f.metrics(t), "kvgate_worker_inflight")
}

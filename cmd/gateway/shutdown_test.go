package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/config"
	"github.com/kvgate/kvgate/sim/simserver"
)

// The shutdown sequence (docs/deployment.md): ctx ends (SIGTERM or SIGINT
// through signal.NotifyContext in main) → /readyz answers 503 → after
// shutdown_delay the listener closes → requests and streams in flight run
// for up to shutdown_grace → run returns nil, so the process exits 0.

// streamTokens is the length of the stream held in flight across a
// shutdown: at slowTimeScale it lasts well over a second.
const (
	streamTokens  = 20
	slowTimeScale = 10 // 80 ms a decode step with sim's defaults
)

func TestShutdownLetsAStreamInFlightFinish(t *testing.T) {
	t.Parallel()
	g := startDrainingGateway(t, 10*time.Second, 0)
	s := openStream(t, g.url, streamTokens)
	events := []string{s.next(t)} // the stream is under way
	g.stop()
	events = append(events, s.next(t), s.next(t))
	select {
	case <-g.exited:
		t.Fatal("run returned while a stream still had tokens to send")
	default:
	}
	events = append(events, s.rest(t)...)
	assertCompleteStream(t, events, streamTokens)
	require.NoError(t, g.wait(t), "a drained shutdown is a clean exit")
}

func TestShutdownRefusesNewConnectionsOnceTheListenerCloses(t *testing.T) {
	t.Parallel()
	g := startDrainingGateway(t, 10*time.Second, 0)
	s := openStream(t, g.url, streamTokens)
	events := []string{s.next(t)}
	g.stop()
	require.Eventually(t, func() bool { return refused(g.addr) }, 5*time.Second, 5*time.Millisecond,
		"the listener closes while the stream still drains")
	events = append(events, s.rest(t)...)
	assertCompleteStream(t, events, streamTokens)
	require.NoError(t, g.wait(t))
}

// With shutdown_delay, a load balancer probing /readyz sees 503 while the
// gateway still answers: it stops sending before connections are refused.
func TestReadyzIs503WhileTheGatewayDrains(t *testing.T) {
	t.Parallel()
	g := startDrainingGateway(t, 10*time.Second, 2*time.Second)
	s := openStream(t, g.url, streamTokens)
	events := []string{s.next(t)}
	status, _ := get(t, g.url+"/readyz")
	require.Equal(t, http.StatusOK, status, "ready before shutdown")

	g.stop()
	require.Eventually(t, func() bool {
		status, _ := get(t, g.url+"/readyz")
		return status == http.StatusServiceUnavailable
	}, 2*time.Second, 5*time.Millisecond, "/readyz turns 503 at once")
	_, body := get(t, g.url+"/readyz")
	assert.Contains(t, body, "shutting_down")

	status, _ = get(t, g.url+"/health")
	assert.Equal(t, http.StatusOK, status, "still alive: the liveness probe must not restart a draining pod")
	resp, err := http.Post(g.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim","max_tokens":2,"messages":[{"role":"user","content":"late but welcome"}]}`))
	require.NoError(t, err, "during shutdown_delay requests are still served")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, resp.Close, "Connection: close sends keep-alive clients to the replicas still ready")

	require.Eventually(t, func() bool { return refused(g.addr) }, 10*time.Second, 10*time.Millisecond,
		"the listener closes once shutdown_delay is over")
	events = append(events, s.rest(t)...)
	assertCompleteStream(t, events, streamTokens)
	require.NoError(t, g.wait(t))
}

// shutdown_grace bounds the drain: a stream that outlasts it is cut, and the
// process still exits cleanly.
func TestShutdownGraceCutsWhatOutlastsIt(t *testing.T) {
	t.Parallel()
	g := startDrainingGateway(t, 200*time.Millisecond, 0)
	s := openStream(t, g.url, 500) // 40 s at slowTimeScale
	events := []string{s.next(t)}
	g.stop()
	require.NoError(t, g.wait(t))
	events = append(events, s.rest(t)...)
	assert.NotContains(t, events, "[DONE]", "the stream was cut short")
}

func TestNegativeShutdownDelayIsRejected(t *testing.T) {
	err := run(t.Context(), []string{"--shutdown_delay=-1s"}, nil, io.Discard, io.Discard, nil)
	require.True(t, config.IsValidation(err), "%v", err)
	assert.Contains(t, err.Error(), "shutdown_delay")
}

// The real thing: the built binary, a real SIGTERM, a slow stream in flight.
func TestSIGTERMDrainsTheGatewayBinary(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("SIGTERM is a Unix signal")
	}
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "go test puts the go command on PATH")
	bin := filepath.Join(t.TempDir(), "gateway")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	conf := writeGatewayConfig(t, startSlowWorker(t), 10*time.Second, 0, "info")
	logs := newLogWatch()
	cmd := exec.Command(bin, "--config", conf)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, config.EnvPrefix) })
	cmd.Stdout = io.Discard
	cmd.Stderr = logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a no-op once it has exited
		<-exited
	})

	var addr string
	select {
	case addr = <-logs.listening:
	case err := <-exited:
		t.Fatalf("gateway exited before listening: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway never logged its address:\n%s", logs)
	}
	url := "http://" + addr
	waitReady(t, url)

	// SIGHUP reloads the config (unchanged here) while the gateway serves.
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"config reloaded"`) },
		10*time.Second, 20*time.Millisecond, "SIGHUP reloads:\n%s", logs)

	s := openStream(t, url, streamTokens)
	events := []string{s.next(t)}
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	// A SIGHUP during the drain (a config watcher, an operator) neither
	// reloads nor, by its default action, kills the process.
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	events = append(events, s.rest(t)...)
	assertCompleteStream(t, events, streamTokens)

	select {
	case err := <-exited:
		exited <- err // for the cleanup
		require.NoError(t, err, "exit status\n%s", logs)
		assert.Equal(t, 0, cmd.ProcessState.ExitCode())
	case <-time.After(15 * time.Second):
		t.Fatalf("gateway still running after SIGTERM and a drained stream:\n%s", logs)
	}
	assert.Contains(t, logs.String(), `"msg":"shutting down"`)
}

// drainingGateway is a gateway run by run(), as main runs it, in front of
// one slow simulated worker. stop does what SIGTERM does through main's
// signal.NotifyContext: it ends run's context.
type drainingGateway struct {
	url, addr string
	stop      context.CancelFunc
	exited    chan struct{} // closed when run returned; err holds its result
	err       error
}

func startDrainingGateway(t *testing.T, grace, delay time.Duration) *drainingGateway {
	t.Helper()
	conf := writeGatewayConfig(t, startSlowWorker(t), grace, delay, "warn")
	ctx, cancel := context.WithCancel(context.Background())
	g := &drainingGateway{stop: cancel, exited: make(chan struct{})}
	started := make(chan string, 1)
	go func() {
		defer close(g.exited)
		g.err = run(ctx, []string{"--config", conf}, nil, io.Discard, io.Discard, started)
	}()
	t.Cleanup(func() {
		cancel()
		<-g.exited
	})
	select {
	case g.addr = <-started:
	case <-g.exited:
		t.Fatalf("gateway did not start: %v", g.err)
	}
	g.url = "http://" + g.addr
	waitReady(t, g.url)
	return g
}

// wait returns run's result once it has returned.
func (g *drainingGateway) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-g.exited:
		return g.err
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
		return nil
	}
}

// startSlowWorker starts an enginesim worker whose decode steps take
// slowTimeScale times their simulated time, and returns its URL.
func startSlowWorker(t *testing.T) string {
	t.Helper()
	cfg := simserver.DefaultConfig()
	cfg.TimeScale = slowTimeScale
	cfg.Engine.MaxRunning = 8
	s, err := simserver.New(cfg)
	require.NoError(t, err)
	addr, err := s.Start("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return "http://" + addr
}

func writeGatewayConfig(t *testing.T, workerURL string, grace, delay time.Duration, level string) string {
	t.Helper()
	conf := fmt.Sprintf(`listen: 127.0.0.1:0
shutdown_grace: %s
shutdown_delay: %s
workers:
  - id: w0
    url: %s
    models: [sim]
    engine: vllm
    max_running: 8
health:
  interval: 50ms
  timeout: 1s
telemetry:
  interval: 100ms
  max_age: 1s
  timeout: 100ms
log:
  level: %s
  format: json
  requests: false
`, grace, delay, workerURL, level)
	file := filepath.Join(t.TempDir(), "kvgate.yaml")
	require.NoError(t, os.WriteFile(file, []byte(conf), 0o600))
	return file
}

func waitReady(t *testing.T, url string) {
	t.Helper()
	require.Eventually(t, func() bool {
		status, _ := get(t, url+"/readyz")
		return status == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "gateway ready")
}

// get fetches url on a fresh connection; status 0 when it could not connect.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// refused reports whether a new connection to addr is refused.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		return false
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// sseStream reads a streamed chat completion event by event.
type sseStream struct {
	body io.ReadCloser
	rd   *bufio.Reader
}

func openStream(t *testing.T, url string, maxTokens int) *sseStream {
	t.Helper()
	body := fmt.Sprintf(`{"model":"sim","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,`+
		`"messages":[{"role":"user","content":"Tell me how a gateway drains."}]}`, maxTokens)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/event-stream")
	return &sseStream{body: resp.Body, rd: bufio.NewReader(resp.Body)}
}

// next returns the data of the next event, failing the test at the end of
// the stream.
func (s *sseStream) next(t *testing.T) string {
	t.Helper()
	data, err := s.read()
	require.NoError(t, err)
	return data
}

// rest reads the events left until the stream ends, cleanly or not.
func (s *sseStream) rest(t *testing.T) []string {
	t.Helper()
	var events []string
	for {
		data, err := s.read()
		if err != nil {
			return events
		}
		events = append(events, data)
	}
}

func (s *sseStream) read() (string, error) {
	var data []string
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if len(data) > 0 {
				return strings.Join(data, "\n"), nil
			}
			continue
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
}

// assertCompleteStream checks a chat stream came whole: one event a token,
// the last one finished, the usage event counting them all, then [DONE].
func assertCompleteStream(t *testing.T, events []string, tokens int) {
	t.Helper()
	require.NotEmpty(t, events)
	require.Equal(t, "[DONE]", events[len(events)-1], "the stream ends with [DONE]")
	var content, finished, completion int
	for _, e := range events[:len(events)-1] {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal([]byte(e), &chunk), e)
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" {
				content++
			}
			if c.FinishReason != nil {
				finished++
			}
		}
		if chunk.Usage != nil {
			completion = chunk.Usage.CompletionTokens
		}
	}
	assert.Equal(t, tokens, content, "one event a token, none lost")
	assert.Equal(t, 1, finished, "the last token's event carries finish_reason")
	assert.Equal(t, tokens, completion, "the usage event arrived")
}

// logWatch collects the gateway's JSON log lines and sends the address of
// its "kvgate listening" line on listening.
type logWatch struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	scanned   int
	listening chan string
}

func newLogWatch() *logWatch { return &logWatch{listening: make(chan string, 1)} }

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		rest := w.buf.Bytes()[w.scanned:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.scanned += i + 1
		var line struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(rest[:i], &line) == nil && line.Msg == "kvgate listening" {
			select {
			case w.listening <- line.Addr:
			default:
			}
		}
	}
}

func (w *logWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

package main

import (
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/sim/simserver"
)

// chromiumPath is Debian's chromium, which `make test` installs.
const chromiumPath = "/usr/bin/chromium"

// Worker-provided strings that are markup: the page must show them as text.
const (
	hostileWorkerID = "<i>evil"
	hostileModel    = `<img src=x onerror="document.title='pwned'">`
)

// TestStatusPageInChromium opens the status page of a gateway in front of
// enginesim workers in headless Chromium, and checks what a person would
// see: every worker listed with its live telemetry, decision counts that
// follow the requests sent, the load chart drawn, hostile strings shown as
// text, and a layout that turns tables into cards on a phone.
func TestStatusPageInChromium(t *testing.T) {
	if os.Getenv("KVGATE_SKIP_BROWSER") == "1" {
		t.Skip("KVGATE_SKIP_BROWSER=1: the status page's browser test is skipped")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the status page's browser test needs Chromium at %s (%v): run `make test`, which installs it "+
			"(apt-get install chromium), or set KVGATE_SKIP_BROWSER=1 to skip this test", chromiumPath, err)
	}
	f := startStatusFleet(t)
	// w1 reports a load of its own: the page must show these numbers.
	running, waiting, kv := 5, 2, 0.5
	require.NoError(t, f.sims[1].SetLoadOverride(&simserver.LoadOverride{Running: &running, Waiting: &waiting, KVUsage: &kv}))

	ctx := newHeadlessChromium(t)
	page, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(page, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(f.url+"/")))

	title, err := chromedp.Run(page, chromedp.Title())
	require.NoError(t, err)
	assert.Equal(t, "kvgate status", title)

	t.Run("workers table lists every worker with live telemetry", func(t *testing.T) {
		waitFor(t, page, `document.querySelector('#workers tr[data-key="w1"] td[data-col="running"]')?.textContent === '5'`)
		rows := workerRows(t, page)
		require.Len(t, rows, 3)
		w0, w1, evil := rows["w0"], rows["w1"], rows[hostileWorkerID]
		assert.Equal(t, "healthy", w0["health"])
		assert.Equal(t, "closed", w0["circuit"])
		assert.Equal(t, "sim", w0["models"])
		assert.Equal(t, f.simURL[0], w0["url"])
		assert.Regexp(t, `^\d+(\.\d)? s$`, w0["age"], "a fresh sample's age")
		assert.Equal(t, "0", w0["running"])
		assert.Equal(t, "5", w1["running"])
		assert.Equal(t, "2", w1["waiting"])
		assert.Equal(t, "50%", w1["kv"])
		assert.Equal(t, "0.88", w1["pressure"], "(5+2)/8 beats KV 0.5")
		assert.Equal(t, "none", evil["age"], "the stub reports no telemetry")
		assert.Equal(t, "–", evil["pressure"], "unknown, not zero")
		assert.Equal(t, "live", text(t, page, "#conn"))
	})

	t.Run("worker-provided strings stay text", func(t *testing.T) {
		rows := workerRows(t, page)
		require.Contains(t, rows, hostileWorkerID)
		assert.Equal(t, hostileModel, rows[hostileWorkerID]["models"])
		markup, err := chromedp.Run(page, chromedp.Evaluate[int](`document.querySelectorAll('main img, main i').length`))
		require.NoError(t, err)
		assert.Zero(t, markup, "no element made from a worker's strings")
		title, err := chromedp.Run(page, chromedp.Title())
		require.NoError(t, err)
		assert.Equal(t, "kvgate status", title)
	})

	t.Run("decision counts follow the requests", func(t *testing.T) {
		before := decisionTotal(t, page)
		const n = 6
		c := f.client()
		system := strings.Repeat("You are the assistant of a status page test. ", 20)
		for i := range n {
			_, err := c.Chat.Completions.New(page, chatParams(system+"question "+strconv.Itoa(i), 4))
			require.NoError(t, err)
		}
		waitFor(t, page, fmt.Sprintf(`(() => {
			let sum = 0;
			for (const td of document.querySelectorAll('#decisions td[data-col="total"]')) sum += Number(td.textContent.replace(/,/g, ''));
			return sum >= %d;
		})()`, before+n))
		assert.Equal(t, before+n, decisionTotal(t, page), "one decision a request, none twice")
		minute, err := chromedp.Run(page, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('#decisions td[data-col="minute"]'), td => td.textContent)`))
		require.NoError(t, err)
		require.NotEmpty(t, minute)
		rows := workerRows(t, page)
		owned := 0
		for _, id := range []string{"w0", "w1"} {
			blocks, err := strconv.Atoi(strings.ReplaceAll(rows[id]["blocks"], ",", ""))
			require.NoError(t, err, "prefix blocks of %s: %q", id, rows[id]["blocks"])
			owned += blocks
		}
		assert.Positive(t, owned, "the routing index holds the prompts' blocks")
		assert.Regexp(t, `^\d+(\.\d)?%$`, text(t, page, "#hit-total"))
		assert.Equal(t, "cache_aware", text(t, page, "#policy"))
	})

	t.Run("load chart draws a line per reporting worker", func(t *testing.T) {
		waitFor(t, page, `document.querySelectorAll('#chart polyline[data-worker]').length >= 2`)
		lines, err := chromedp.Run(page, chromedp.Evaluate[[]string](
			`Array.from(document.querySelectorAll('#chart polyline'), p => p.dataset.worker)`))
		require.NoError(t, err)
		assert.Contains(t, lines, "w0")
		assert.Contains(t, lines, "w1")
		assert.NotContains(t, lines, hostileWorkerID, "no telemetry: nothing to draw")
		legend := text(t, page, "#chart-legend")
		assert.Contains(t, legend, hostileWorkerID)
	})

	t.Run("screenshot is a PNG", func(t *testing.T) {
		shot, err := chromedp.Run(page, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "status.png")
		require.NoError(t, os.WriteFile(file, shot, 0o600))
		saved, err := os.Open(file)
		require.NoError(t, err)
		defer saved.Close()
		img, err := png.Decode(saved)
		require.NoError(t, err)
		assert.Equal(t, 1280, img.Bounds().Dx())
		assert.Equal(t, 900, img.Bounds().Dy())
	})

	t.Run("light and dark follow the system", func(t *testing.T) {
		colors := func(scheme string) [2]string {
			_, err := chromedp.Call(page, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
			})
			require.NoError(t, err)
			c, err := chromedp.Run(page, chromedp.Evaluate[[2]string](
				`[getComputedStyle(document.body).backgroundColor, getComputedStyle(document.body).color]`))
			require.NoError(t, err)
			return c
		}
		light, dark := colors("light"), colors("dark")
		assert.NotEqual(t, light[0], dark[0], "background")
		assert.NotEqual(t, light[1], dark[1], "text")
		assert.Equal(t, "rgb(15, 17, 21)", dark[0], "the dark palette's background")
		colors("light")
	})

	t.Run("on a phone the tables become cards", func(t *testing.T) {
		require.NoError(t, chromedp.Do(page, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)))
		waitFor(t, page, `getComputedStyle(document.querySelector('#workers thead')).display === 'none'`)
		overflow, err := chromedp.Run(page, chromedp.Evaluate[bool](
			`document.documentElement.scrollWidth > document.documentElement.clientWidth`))
		require.NoError(t, err)
		assert.False(t, overflow, "nothing wider than the phone's screen")
	})
}

// newHeadlessChromium starts Debian's chromium with a fresh profile; it
// stops, and its goroutines end, when the test does.
func newHeadlessChromium(t *testing.T) context.Context {
	t.Helper()
	var output syncBuffer // logwriter_test.go
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox, // root in a container: Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		// Belt and braces for "no traffic but loopback": any host name the
		// browser might look up for itself resolves to nothing.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
		chromedp.CombinedOutput(&output),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc) // runs last: waits for the browser process to exit
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	t.Cleanup(func() {
		if t.Failed() {
			text, _ := output.snapshot()
			t.Logf("chromium output:\n%s", text)
		}
	})
	// The first Run starts the browser; it must have no deadline of its own.
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	return ctx
}

// startStatusFleet is a gateway in front of two enginesim workers (w0, w1)
// and a stub worker whose id and model name are markup, wired by run() as
// the binary is; it polls telemetry often so the page has live numbers.
func startStatusFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{}
	var ws strings.Builder
	f.startSims(t, &ws, 2, 8, 0, simserver.Faults{})
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(http.StatusOK)
		case "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			b, _ := json.Marshal(map[string]any{"object": "list", "data": []map[string]string{{"id": hostileModel, "object": "model"}}})
			_, _ = w.Write(b)
		default:
			http.NotFound(w, r) // no telemetry, no completions
		}
	}))
	t.Cleanup(stub.Close)
	id, _ := json.Marshal(hostileWorkerID)
	fmt.Fprintf(&ws, "  - id: %s\n    url: %s\n    engine: vllm\n", id, stub.URL)

	conf := "listen: 127.0.0.1:0\nshutdown_grace: 5s\nworkers:\n" + ws.String() + `
health:
  interval: 50ms
  timeout: 1s
  unhealthy_threshold: 1
telemetry:
  interval: 100ms
  max_age: 2s
  timeout: 100ms
log:
  level: warn
`
	f.launch(t, conf)
	require.Eventually(t, func() bool { return everyWorkerHealthy(f.url, 3) }, 5*time.Second, 20*time.Millisecond,
		"gateway up with every worker healthy")
	return f
}

// everyWorkerHealthy asks /api/status whether n workers are healthy and
// have learned their models.
func everyWorkerHealthy(base string, n int) bool {
	resp, err := http.Get(base + "/api/status")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Workers []struct {
			Health string   `json:"health"`
			Models []string `json:"models"`
		} `json:"workers"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Workers) != n {
		return false
	}
	for _, w := range st.Workers {
		if w.Health != "healthy" || len(w.Models) == 0 {
			return false
		}
	}
	return true
}

// waitFor polls a JavaScript predicate on the page until it holds.
func waitFor(t *testing.T, ctx context.Context, predicate string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](predicate,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second)))
	require.NoError(t, err, "waiting for %s", predicate)
}

func text(t *testing.T, ctx context.Context, selector string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(`+strconv.Quote(selector)+`).textContent`))
	require.NoError(t, err)
	return s
}

// workerRows reads the workers table: row key → column name → cell text.
func workerRows(t *testing.T, ctx context.Context) map[string]map[string]string {
	t.Helper()
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]map[string]string](`Object.fromEntries(
		Array.from(document.querySelectorAll('#workers tbody tr'), tr =>
			[tr.dataset.key, Object.fromEntries(Array.from(tr.cells, td => [td.dataset.col, td.textContent]))]))`))
	require.NoError(t, err)
	return rows
}

// decisionTotal adds the page's since-start decision counts.
func decisionTotal(t *testing.T, ctx context.Context) int {
	t.Helper()
	cells, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('#decisions td[data-col="total"]'), td => td.textContent)`))
	require.NoError(t, err)
	sum := 0
	for _, c := range cells {
		n, err := strconv.Atoi(strings.ReplaceAll(c, ",", ""))
		require.NoError(t, err, "decision count %q", c)
		sum += n
	}
	return sum
}

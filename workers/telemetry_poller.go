package workers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// telemetryEndpoint is one place a worker may report its load.
type telemetryEndpoint struct {
	source string
	path   string
	accept string
	parse  func(body []byte, expectedRanks int) (Sample, error)
}

const (
	// Prometheus text, never OpenMetrics or protobuf: the parser reads 0.0.4.
	telemetryAcceptText = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
	telemetryAcceptJSON = "application/json"

	// telemetryMaxBody bounds what a poll reads; a vLLM /metrics page with
	// every histogram is a few hundred KiB.
	telemetryMaxBody = 8 << 20

	// telemetryRedetectAfter consecutive failed polls make the fetcher forget
	// what it detected and probe again: the worker may have been replaced by
	// another engine or version on the same address.
	telemetryRedetectAfter = 3
)

var (
	telemetryVLLM = telemetryEndpoint{SourceVLLMMetrics, "/metrics", telemetryAcceptText, ParseVLLMMetrics}
	// SGLang's endpoints in the order they are tried. Many stock images
	// answer 404 to /v1/loads; /get_load is older; /metrics needs
	// --enable-metrics.
	telemetrySGLang = []telemetryEndpoint{
		{SourceSGLangLoads, "/v1/loads?include=core", telemetryAcceptJSON, ParseSGLangLoads},
		{SourceSGLangGetLoad, "/get_load", telemetryAcceptJSON, ParseSGLangGetLoad},
		{SourceSGLangMetrics, "/metrics", telemetryAcceptText, ParseSGLangMetrics},
	}
)

// TelemetryFetcher polls one worker's load. For SGLang (and auto) it finds
// which endpoint answers and remembers it; an endpoint that disappears (404)
// is replaced at once, and telemetryRedetectAfter consecutive failures make it
// probe from the start again. Fetch is safe for concurrent use.
type TelemetryFetcher struct {
	client        *http.Client
	baseURL       string
	engine        Engine
	expectedRanks int
	auth          []string // Authorization header value; nil: none

	mu       sync.Mutex
	endpoint *telemetryEndpoint // the endpoint that last answered; nil: probe
	failures int                // consecutive failed fetches
}

// NewTelemetryFetcher returns a fetcher for the worker at baseURL. A nil
// client is http.DefaultClient; an empty engine is EngineAuto. expectedRanks
// > 0 is the data-parallel size a sample must cover to be complete.
// SetAPIKey adds the key a worker behind authentication needs.
func NewTelemetryFetcher(client *http.Client, baseURL string, engine Engine, expectedRanks int) *TelemetryFetcher {
	if client == nil {
		client = http.DefaultClient
	}
	if engine == "" {
		engine = EngineAuto
	}
	return &TelemetryFetcher{
		client:        client,
		baseURL:       strings.TrimRight(baseURL, "/"),
		engine:        engine,
		expectedRanks: expectedRanks,
	}
}

// Fetch polls the worker once. The sample's At is now() after the poll
// completed (time.Now when now is nil). ctx bounds the whole poll, probing
// included.
func (f *TelemetryFetcher) Fetch(ctx context.Context, now func() time.Time) (Sample, error) {
	if now == nil {
		now = time.Now
	}
	f.mu.Lock()
	known := f.endpoint
	f.mu.Unlock()

	var (
		s   Sample
		ep  *telemetryEndpoint
		err error
	)
	switch {
	case f.engine != EngineVLLM && f.engine != EngineSGLang && f.engine != EngineAuto:
		return Sample{}, fmt.Errorf("telemetry %s: unknown engine %q", f.baseURL, f.engine)
	case known != nil:
		s, err = f.get(ctx, known)
		ep = known
		if err != nil && telemetryGone(err) && f.engine != EngineVLLM {
			// The endpoint vanished (an upgrade, a downgrade or another
			// engine on the address): look again now rather than after more
			// failures. vLLM has nowhere else to look.
			s, ep, err = f.probe(ctx, f.engine)
		}
	default:
		s, ep, err = f.probe(ctx, f.engine)
	}
	if err == nil {
		s.At = now()
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		// Shutting down is not the worker's failure.
		if !errors.Is(err, context.Canceled) {
			f.failures++
			if f.failures >= telemetryRedetectAfter {
				f.failures, f.endpoint = 0, nil
			}
		}
		return Sample{}, err
	}
	f.failures, f.endpoint = 0, ep
	return s, nil
}

// probe finds the endpoint that answers for engine: for auto, vLLM's
// /metrics first, then SGLang's endpoints. It moves on only when an endpoint
// is missing or speaks another format; a worker that is down, slow or
// failing (5xx) ends the probe, since it says nothing about the format.
func (f *TelemetryFetcher) probe(ctx context.Context, engine Engine) (Sample, *telemetryEndpoint, error) {
	var candidates []*telemetryEndpoint
	if engine == EngineVLLM || engine == EngineAuto {
		candidates = append(candidates, &telemetryVLLM)
	}
	if engine == EngineSGLang || engine == EngineAuto {
		for i := range telemetrySGLang {
			candidates = append(candidates, &telemetrySGLang[i])
		}
	}
	var errs []error
	for _, ep := range candidates {
		s, err := f.get(ctx, ep)
		if err == nil {
			return s, ep, nil
		}
		errs = append(errs, err)
		if !telemetryGone(err) && !errors.Is(err, ErrTelemetryFormat) {
			break
		}
	}
	if len(errs) == 1 {
		return Sample{}, nil, errs[0]
	}
	return Sample{}, nil, fmt.Errorf("telemetry %s: no %s load endpoint answered: %w", f.baseURL, engine, errors.Join(errs...))
}

// telemetryStatusError is a poll answered with a status other than 200.
type telemetryStatusError struct {
	url    string
	status int
}

func (e *telemetryStatusError) Error() string {
	return fmt.Sprintf("telemetry %s: status %d", e.url, e.status)
}

// telemetryGone reports whether err says the endpoint does not exist here
// (as opposed to existing and failing).
func telemetryGone(err error) bool {
	var se *telemetryStatusError
	if !errors.As(err, &se) {
		return false
	}
	switch se.status {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

// SetAPIKey makes the fetcher send "Authorization: Bearer key" (a worker
// started with --api-key); call it before the first Fetch.
func (f *TelemetryFetcher) SetAPIKey(key string) {
	f.auth = nil
	if key != "" {
		f.auth = []string{"Bearer " + key}
	}
}

// get polls one endpoint and parses its body.
func (f *TelemetryFetcher) get(ctx context.Context, ep *telemetryEndpoint) (Sample, error) {
	url := f.baseURL + ep.path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, fmt.Errorf("telemetry %s: %w", url, err)
	}
	req.Header.Set("Accept", ep.accept)
	if f.auth != nil {
		req.Header["Authorization"] = f.auth
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("telemetry %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Drain a little so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return Sample{}, &telemetryStatusError{url: url, status: resp.StatusCode}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, telemetryMaxBody+1))
	if err != nil {
		return Sample{}, fmt.Errorf("telemetry %s: reading body: %w", url, err)
	}
	if len(body) > telemetryMaxBody {
		return Sample{}, fmt.Errorf("telemetry %s: body larger than %d bytes", url, telemetryMaxBody)
	}
	s, err := ep.parse(body, f.expectedRanks)
	if err != nil {
		return Sample{}, fmt.Errorf("telemetry %s: %w", url, err)
	}
	return s, nil
}

// RunTelemetryPoller polls f every interval until ctx is done, handing each
// result to publish (a failed poll as a zero Sample and its error). The first
// poll waits a random part of an interval so a fleet's pollers do not fire in
// step; each poll may take at most one interval. It returns once ctx is done,
// after any poll in progress, and never publishes the error of a poll that
// shutdown cut short. interval must be positive.
func RunTelemetryPoller(ctx context.Context, f *TelemetryFetcher, interval, timeout time.Duration, now func() time.Time, publish func(Sample, error)) {
	if interval <= 0 {
		panic("workers: RunTelemetryPoller needs a positive interval")
	}
	if timeout <= 0 || timeout > interval {
		timeout = interval
	}
	if now == nil {
		now = time.Now
	}
	start := time.NewTimer(rand.N(interval))
	defer start.Stop()
	select {
	case <-ctx.Done():
		return
	case <-start.C:
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		pollCtx, cancel := context.WithTimeout(ctx, timeout)
		s, err := f.Fetch(pollCtx, now)
		cancel()
		if ctx.Err() != nil {
			return
		}
		publish(s, err)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

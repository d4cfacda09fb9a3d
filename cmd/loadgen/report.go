package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"text/tabwriter"
	"time"
)

// writeTable prints the human summary: rates, counts, errors by kind and
// latency percentiles in milliseconds.
func writeTable(w io.Writer, s summary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "duration\t%.2f s\n", s.duration.Seconds())
	fmt.Fprintf(tw, "sent\t%d\n", s.sent)
	fmt.Fprintf(tw, "completed\t%d\n", s.completed)
	fmt.Fprintf(tw, "errors\t%d\n", s.errorCount())
	for _, kind := range slices.Sorted(maps.Keys(s.errors)) {
		fmt.Fprintf(tw, "  %s\t%d\n", kind, s.errors[kind])
	}
	fmt.Fprintf(tw, "requests/s\t%.2f\n", s.requestsPerSecond())
	fmt.Fprintf(tw, "output tokens/s\t%.2f\n", s.outputTokensPerSecond())
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "latency (ms)\tp50\tp90\tp99\n")
	fmt.Fprintf(tw, "TTFT\t%s\t%s\t%s\n", ms(s.ttft.p50), ms(s.ttft.p90), ms(s.ttft.p99))
	fmt.Fprintf(tw, "E2E\t%s\t%s\t%s\n", ms(s.e2e.p50), ms(s.e2e.p90), ms(s.e2e.p99))
	return tw.Flush()
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

// jsonReport is the machine-readable summary written by --json. Times are
// seconds; errors always holds an object, empty when there were none.
type jsonReport struct {
	RequestsPerS     float64          `json:"requests_per_s"`
	OutputTokensPerS float64          `json:"output_tokens_per_s"`
	TTFTP50          float64          `json:"ttft_p50"`
	TTFTP90          float64          `json:"ttft_p90"`
	TTFTP99          float64          `json:"ttft_p99"`
	E2EP50           float64          `json:"e2e_p50"`
	E2EP90           float64          `json:"e2e_p90"`
	E2EP99           float64          `json:"e2e_p99"`
	Completed        int64            `json:"completed"`
	Errors           map[string]int64 `json:"errors"`
	DurationS        float64          `json:"duration_s"`
	Sent             int64            `json:"sent"`
}

func newJSONReport(s summary) jsonReport {
	errs := s.errors
	if errs == nil {
		errs = map[string]int64{}
	}
	return jsonReport{
		RequestsPerS:     s.requestsPerSecond(),
		OutputTokensPerS: s.outputTokensPerSecond(),
		TTFTP50:          s.ttft.p50.Seconds(),
		TTFTP90:          s.ttft.p90.Seconds(),
		TTFTP99:          s.ttft.p99.Seconds(),
		E2EP50:           s.e2e.p50.Seconds(),
		E2EP90:           s.e2e.p90.Seconds(),
		E2EP99:           s.e2e.p99.Seconds(),
		Completed:        s.completed,
		Errors:           errs,
		DurationS:        s.duration.Seconds(),
		Sent:             s.sent,
	}
}

// writeJSONFile writes the report to path, replacing it.
func writeJSONFile(path string, s summary) error {
	b, err := json.MarshalIndent(newJSONReport(s), "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write --json: %w", err)
	}
	return nil
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/kvgate/kvgate/sim"
)

// report is the whole run: what was replayed on what, and one result a
// policy. encoding/json sorts map keys, so equal runs give equal bytes.
type report struct {
	Workload           string          `json:"workload"`
	Workers            int             `json:"workers"`
	Replicas           int             `json:"replicas"` // gateway replicas, each with its own index
	Requests           int             `json:"requests"`
	DurationS          float64         `json:"duration_s"` // first to last arrival
	Seed               uint64          `json:"seed"`
	TimeScale          float64         `json:"time_scale"`
	TelemetryIntervalS float64         `json:"telemetry_interval_s"`
	Engine             engineReport    `json:"engine"`
	Admission          admissionReport `json:"admission"`
	Results            []policyResult  `json:"results"`
}

// engineReport is every worker's engine configuration.
type engineReport struct {
	MaxRunning           int     `json:"max_running"`
	KVCapacityTokens     int     `json:"kv_capacity_tokens"`
	BlockTokens          int     `json:"block_tokens"`
	PrefillTokensPerSec  float64 `json:"prefill_tokens_per_s"`
	PrefillChunkTokens   int     `json:"prefill_chunk_tokens"`
	DecodeStepBaseS      float64 `json:"decode_step_base_s"`
	DecodeStepPerRequest float64 `json:"decode_step_per_request_s"`
}

// admissionReport is the gate every policy ran behind.
type admissionReport struct {
	Mode          string  `json:"mode"`
	MaxQueue      int     `json:"max_queue"` // per partition; 0: unbounded
	QueueTimeoutS float64 `json:"queue_timeout_s"`
}

func (a admissionReport) String() string {
	s := a.Mode
	if a.MaxQueue > 0 {
		s += fmt.Sprintf(", queues of %d", a.MaxQueue)
	}
	if a.QueueTimeoutS > 0 {
		s += fmt.Sprintf(", queue timeout %gs", a.QueueTimeoutS)
	}
	return s
}

func newAdmissionReport(c admissionConfig) admissionReport {
	return admissionReport{Mode: c.Mode.String(), MaxQueue: c.MaxQueue, QueueTimeoutS: round(c.QueueTimeout.Seconds())}
}

func newEngineReport(c sim.Config) engineReport {
	return engineReport{
		MaxRunning:           c.MaxRunning,
		KVCapacityTokens:     c.KVCapacityTokens,
		BlockTokens:          c.BlockTokens,
		PrefillTokensPerSec:  c.PrefillTokensPerSec,
		PrefillChunkTokens:   c.PrefillChunkTokens,
		DecodeStepBaseS:      round(c.DecodeStepBase.Seconds()),
		DecodeStepPerRequest: round(c.DecodeStepPerRequest.Seconds()),
	}
}

func writeJSONFile(path string, r *report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// writeTable prints the report as a table, one row a policy.
func writeTable(w io.Writer, r *report) error {
	behind := ""
	if r.Replicas > 1 {
		behind = fmt.Sprintf(" behind %d gateway replicas", r.Replicas)
	}
	fmt.Fprintf(w, "workload %s: %d requests over %.1fs on %d workers%s (seed %d, telemetry every %gs)\n\n",
		r.Workload, r.Requests, r.DurationS, r.Workers, behind, r.Seed, r.TelemetryIntervalS)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\thit %\tttft p50\tp90\tp99\te2e p50\tp99\tout tok/s\tmax wait\timbalance\tcompleted\trejected\t")
	for _, p := range r.Results {
		fmt.Fprintf(tw, "%s\t%.1f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f\t%d\t%.2f\t%d\t%d\t\n",
			p.Policy, 100*p.HitRate, p.TTFTP50, p.TTFTP90, p.TTFTP99, p.E2EP50, p.E2EP99,
			p.ThroughputTokensPerS, p.MaxWaiting, p.Imbalance, p.Completed, p.Rejected)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Results) > 0 && len(r.Results[0].Partitions) > 1 {
		if err := writePartitions(w, r); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\ndecisions:")
	for _, p := range r.Results {
		fmt.Fprintf(w, "  %-20s %s\n", p.Policy, formatDecisions(p.Decisions))
	}
	_, err := fmt.Fprintln(w, "\ntimes in seconds; imbalance = time-averaged max/mean running across workers (1 is even)")
	return err
}

// writePartitions prints each policy's figures per partition.
func writePartitions(w io.Writer, r *report) error {
	fmt.Fprintf(w, "\npartitions (admission %s):\n", r.Admission)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tpartition\tweight\tserved tok\tshare %\tttft p99\tcompleted\trejected\t")
	for _, p := range r.Results {
		for _, q := range p.Partitions {
			fmt.Fprintf(tw, "%s\t%s\t%g\t%d\t%.1f\t%.3f\t%d\t%d\t\n",
				p.Policy, q.Name, q.Weight, q.ServedTokens, 100*q.ServedShare, q.TTFTP99, q.Completed, q.Rejected)
		}
	}
	return tw.Flush()
}

// formatDecisions lists labels by count, most frequent first.
func formatDecisions(d map[string]int) string {
	labels := make([]string, 0, len(d))
	for l := range d {
		labels = append(labels, l)
	}
	slices.SortFunc(labels, func(a, b string) int {
		if d[a] != d[b] {
			return d[b] - d[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = fmt.Sprintf("%s=%d", l, d[l])
	}
	return strings.Join(parts, " ")
}

package admission

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// decision is an outcome of kvgate_admission_decisions_total. The set is
// bounded: it is a metric label.
type decision int

const (
	// decisionAdmitted: a credit was issued (at once or after waiting).
	decisionAdmitted decision = iota
	// decisionQueued: the request had to wait (counted when it began to).
	decisionQueued
	decisionRejectedQueueFull
	decisionTimeout
	// decisionCancelled: the caller gave up while the request waited.
	decisionCancelled
	// shadow mode: what enforce would have done instead of admitting.
	decisionShadowWouldQueue
	decisionShadowWouldReject
	numDecisions
)

var decisionNames = [numDecisions]string{
	decisionAdmitted:          "admitted",
	decisionQueued:            "queued",
	decisionRejectedQueueFull: "rejected_queue_full",
	decisionTimeout:           "timeout",
	decisionCancelled:         "cancelled",
	decisionShadowWouldQueue:  "shadow_would_queue",
	decisionShadowWouldReject: "shadow_would_reject",
}

// waitBuckets span the fast path (0) to a long queue timeout.
var waitBuckets = []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// metrics are the scheduler's series; the partition label takes only
// configured partition names.
type metrics struct {
	queueDepth *prometheus.GaugeVec
	wait       *prometheus.HistogramVec
	decisions  *prometheus.CounterVec
	inflight   *prometheus.GaugeVec
	served     *prometheus.CounterVec
}

// partitionMetrics are one partition's series, resolved once so the hot path
// does no label lookup.
type partitionMetrics struct {
	queueDepth prometheus.Gauge
	wait       prometheus.Observer
	decisions  [numDecisions]prometheus.Counter
	inflight   prometheus.Gauge
	served     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvgate_admission_queue_depth",
			Help: "Requests waiting for a capacity credit, by partition.",
		}, []string{"partition"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_admission_wait_seconds",
			Help:    "Time from admission to dispatch (0 when a slot was free), by partition.",
			Buckets: waitBuckets,
		}, []string{"partition"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_admission_decisions_total",
			Help: "Admission decisions, by partition and outcome.",
		}, []string{"partition", "outcome"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvgate_partition_inflight",
			Help: "Requests holding a capacity credit (admitted, not yet finished), by partition.",
		}, []string{"partition"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_partition_served_tokens_total",
			Help: "Estimated tokens (prompt + capped output) of requests that succeeded, by partition.",
		}, []string{"partition"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.queueDepth, m.wait, m.decisions, m.inflight, m.served} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("admission: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}

// forPartition creates (so they read 0 from the start) and resolves a
// partition's series.
func (m *metrics) forPartition(name string) partitionMetrics {
	pm := partitionMetrics{
		queueDepth: m.queueDepth.WithLabelValues(name),
		wait:       m.wait.WithLabelValues(name),
		inflight:   m.inflight.WithLabelValues(name),
		served:     m.served.WithLabelValues(name),
	}
	for d := range numDecisions {
		pm.decisions[d] = m.decisions.WithLabelValues(name, decisionNames[d])
	}
	return pm
}

// dropPartition removes a partition's series once Reconfigure removed it.
// Credits still in flight keep updating their (now unexported) series.
func (m *metrics) dropPartition(name string) {
	l := prometheus.Labels{"partition": name}
	m.queueDepth.Delete(l)
	m.wait.Delete(l)
	m.inflight.Delete(l)
	m.served.Delete(l)
	m.decisions.DeletePartialMatch(l)
}

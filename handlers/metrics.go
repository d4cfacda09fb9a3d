package handlers

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the request-path series. Labels are bounded: model is a model
// some worker serves (else "unknown"), status an HTTP status code, decision
// a routing label.
type metrics struct {
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	ttft      *prometheus.HistogramVec
	retries   prometheus.Counter
	decisions *prometheus.CounterVec
	match     *prometheus.HistogramVec
	seeds     *prometheus.GaugeVec
}

// latencyBuckets span a cached short answer (5 ms) to a long generation (5 min).
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_requests_total",
			Help: "Requests answered, by model and HTTP status.",
		}, []string{"model", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_request_duration_seconds",
			Help:    "Time from receiving a request to the end of its response.",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_ttft_seconds",
			Help:    "Time from receiving a request to its first byte reaching the client (the first event when streaming).",
			Buckets: latencyBuckets,
		}, []string{"model"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvgate_retries_total",
			Help: "Attempts re-routed to another worker after a failure before the first byte.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_routing_decisions_total",
			Help: "Routing decisions, by model and decision label.",
		}, []string{"model", "decision"}),
		match: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvgate_prefix_match_ratio",
			Help:    "Share of a routed request's prefix blocks found in the ownership index.",
			Buckets: []float64{0, .1, .2, .3, .4, .5, .6, .7, .8, .9, .95, 1},
		}, []string{"model"}),
	}
	m.seeds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kvgate_seeds_inflight",
		Help: "Distribution seeds in flight, by partition.",
	}, []string{"partition"})
	reg.MustRegister(m.requests, m.duration, m.ttft, m.retries, m.decisions, m.match, m.seeds)
	return m
}

package workers

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the per-worker series. Gauges are read from the registry at
// scrape time, so a removed worker's series disappear with it.
type Metrics struct {
	UpstreamErrors *prometheus.CounterVec
}

func newMetrics() *Metrics {
	return &Metrics{
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvgate_upstream_errors_total",
			Help: "Failed attempts to workers, by worker and kind (connect, timeout, status_5xx, status_429, stream).",
		}, []string{"worker", "kind"}),
	}
}

func (m *Metrics) forget(id string) {
	m.UpstreamErrors.DeletePartialMatch(prometheus.Labels{"worker": id})
}

var (
	inflightDesc = prometheus.NewDesc("kvgate_worker_inflight",
		"Requests this gateway has in flight on each worker.", []string{"worker"}, nil)
	healthyDesc = prometheus.NewDesc("kvgate_worker_healthy",
		"1 when the worker passes its health checks, else 0.", []string{"worker"}, nil)
	circuitDesc = prometheus.NewDesc("kvgate_worker_circuit_state",
		"Circuit breaker state: 0 closed, 1 open, 2 half-open.", []string{"worker"}, nil)
	generationDesc = prometheus.NewDesc("kvgate_worker_generation",
		"The worker's generation: bumped when it may have lost its state.", []string{"worker"}, nil)
	telemetryAgeDesc = prometheus.NewDesc("kvgate_worker_telemetry_age_seconds",
		"Age of the worker's last telemetry sample.", []string{"worker"}, nil)
)

// Describe implements prometheus.Collector.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	ch <- inflightDesc
	ch <- healthyDesc
	ch <- circuitDesc
	ch <- generationDesc
	ch <- telemetryAgeDesc
	r.Metrics.UpstreamErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	now := r.opts.Now()
	for _, w := range r.Workers() {
		healthy := 0.0
		if w.Healthy() {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(w.Inflight()), w.id)
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, healthy, w.id)
		ch <- prometheus.MustNewConstMetric(circuitDesc, prometheus.GaugeValue, float64(w.CircuitState(now)), w.id)
		ch <- prometheus.MustNewConstMetric(generationDesc, prometheus.GaugeValue, float64(w.generation.Load()), w.id)
		if s, ok := w.Sample(); ok {
			ch <- prometheus.MustNewConstMetric(telemetryAgeDesc, prometheus.GaugeValue, now.Sub(s.At).Seconds(), w.id)
		}
	}
	r.Metrics.UpstreamErrors.Collect(ch)
}

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
			Help: "Failed attempts to workers, by worker and kind (connect, timeout, transport, status_5xx, status_429, auth, stream).",
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
	runningDesc = prometheus.NewDesc("kvgate_worker_running",
		"Requests the worker runs, from its last telemetry sample (summed over ranks).", []string{"worker"}, nil)
	waitingDesc = prometheus.NewDesc("kvgate_worker_waiting",
		"Requests waiting in the worker's queue, from its last telemetry sample (summed over ranks).", []string{"worker"}, nil)
	kvUsageDesc = prometheus.NewDesc("kvgate_worker_kv_usage",
		"KV cache usage, 0 to 1, of the worker's fullest rank, from its last telemetry sample; absent when unreported.", []string{"worker"}, nil)
	drainingDesc = prometheus.NewDesc("kvgate_workers_draining",
		"Workers taking no new requests while their in-flight ones finish: drained, leaving, or the old incarnation of a replaced worker.", nil, nil)
)

// Describe implements prometheus.Collector.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	ch <- inflightDesc
	ch <- healthyDesc
	ch <- circuitDesc
	ch <- generationDesc
	ch <- telemetryAgeDesc
	ch <- runningDesc
	ch <- waitingDesc
	ch <- kvUsageDesc
	ch <- drainingDesc
	r.Metrics.UpstreamErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	now := r.opts.Now()
	draining := len(r.Replaced())
	for _, w := range r.Workers() {
		if w.Draining() {
			draining++
		}
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
			ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(s.Running), w.id)
			ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(s.Waiting), w.id)
			if s.KVUsage >= 0 {
				ch <- prometheus.MustNewConstMetric(kvUsageDesc, prometheus.GaugeValue, s.KVUsage, w.id)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(drainingDesc, prometheus.GaugeValue, float64(draining))
	r.Metrics.UpstreamErrors.Collect(ch)
}

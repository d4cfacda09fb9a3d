package handlers

import (
	"strconv"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// BenchmarkStatusReport is the cost of one /api/status answer (assembling and
// encoding it) for 64 workers with telemetry and a full five-minute history:
// a page's first load (the whole history) and its once-a-second poll (only
// the newest sample).
func BenchmarkStatusReport(b *testing.B) {
	reg := workers.NewRegistry(workers.Options{HealthInterval: time.Hour})
	b.Cleanup(reg.Close)
	index := routing.NewIndex(1<<16, time.Hour)
	router := routing.NewRouter(routing.NewCacheAware(routing.DefaultPolicyConfig(), index), routing.Options{})
	now := time.Now()
	for i := range 64 {
		id := "worker-" + strconv.Itoa(i)
		w, err := reg.Add(workers.Spec{ID: id, URL: "http://127.0.0.1:1", Models: []string{"m"}, Engine: workers.EngineVLLM})
		if err != nil {
			b.Fatal(err)
		}
		w.StoreSample(workers.Sample{At: now, Running: i % 8, Waiting: i % 3, KVUsage: 0.4, Complete: true}, nil)
		index.Record([]uint64{uint64(i), uint64(i) << 8}, id, routing.KindApproximate, now, 0)
	}
	g := New(Options{Registry: reg, Router: router, TelemetryMaxAge: time.Hour})
	for range statusHistoryLen {
		g.recordStatus()
	}
	newest := g.opts.Now().UnixMilli() - 1
	for _, c := range []struct {
		name  string
		since int64
	}{{"first_load", 0}, {"poll", newest}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			size := 0
			for b.Loop() {
				body, err := json.Marshal(g.statusReport(time.Now(), c.since))
				if err != nil {
					b.Fatal(err)
				}
				size = len(body)
			}
			b.ReportMetric(float64(size), "bytes/answer")
		})
	}
}

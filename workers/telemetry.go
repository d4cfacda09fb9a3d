package workers

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Engine names which telemetry format a worker speaks.
type Engine string

const (
	EngineVLLM   Engine = "vllm"
	EngineSGLang Engine = "sglang"
	// EngineAuto probes: vLLM /metrics names first, then SGLang's endpoints;
	// what worked is remembered until it keeps failing.
	EngineAuto Engine = "auto"
)

// Where a Sample came from (Sample.Source).
const (
	SourceVLLMMetrics   = "vllm_metrics"
	SourceSGLangLoads   = "sglang_loads"
	SourceSGLangGetLoad = "sglang_get_load"
	SourceSGLangMetrics = "sglang_metrics"
)

// ErrTelemetryFormat wraps every parser error: the body is not the load
// report it was supposed to be (garbage, another engine's format, required
// values missing or out of range).
var ErrTelemetryFormat = errors.New("unrecognised telemetry")

// RankLoad is one data-parallel rank's load.
type RankLoad struct {
	Rank       int
	Running    int
	Waiting    int
	KVUsage    float64 // 0..1; -1 when not reported
	MaxRunning int     // 0 when not reported
}

// Sample is one poll of a worker's load telemetry.
type Sample struct {
	At         time.Time // when the poll completed (gateway clock); zero from the parsers
	Running    int       // summed over ranks
	Waiting    int       // summed over ranks
	KVUsage    float64   // max over ranks: the fullest rank decides pressure; -1 unknown
	MaxRunning int       // summed over ranks when every rank reports it, else 0
	Ranks      []RankLoad
	// Complete: every expected rank reported. Expected is the configured
	// count when > 0, else what the source itself says it has.
	Complete bool
	// vLLM's cumulative prefix-cache counters (tokens), summed over ranks; 0
	// when absent.
	PrefixCacheHits, PrefixCacheQueries float64
	Source                              string // one of the Source… constants
}

// Fresh reports whether the sample is at most maxAge old at now. A sample
// from the parsers (zero At) is never fresh. A sample stamped slightly after
// now is fresh: the poll completed after the caller read its clock.
func (s Sample) Fresh(now time.Time, maxAge time.Duration) bool {
	return !s.At.IsZero() && now.Sub(s.At) <= maxAge
}

// Bounds past which a value is garbage rather than load: no engine runs a
// billion requests or thousands of data-parallel ranks behind one address.
const (
	telemetryMaxCount = 1 << 30
	telemetryMaxRank  = 1 << 12
)

func telemetryErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTelemetryFormat, fmt.Sprintf(format, args...))
}

// telemetryCount turns a reported number into a request count.
func telemetryCount(what string, v float64) (int, error) {
	if math.IsNaN(v) || v < 0 || v > telemetryMaxCount {
		return 0, telemetryErrorf("%s = %v is not a count", what, v)
	}
	return int(math.Round(v)), nil
}

// telemetryUsage turns a reported fraction into a KV usage in 0..1. Engines
// round to slightly above 1 when full; that is full, not garbage.
func telemetryUsage(what string, v float64) (float64, error) {
	if math.IsNaN(v) || v < 0 || v > 2 {
		return 0, telemetryErrorf("%s = %v is not a usage fraction", what, v)
	}
	return min(v, 1), nil
}

func telemetryRank(what string, v int64) (int, error) {
	if v < 0 || v >= telemetryMaxRank {
		return 0, telemetryErrorf("%s = %d is not a rank", what, v)
	}
	return int(v), nil
}

// telemetrySample assembles a Sample from per-rank loads. expected is the
// rank count that makes the sample complete (0: whatever was reported).
func telemetrySample(ranks map[int]RankLoad, expected int, source string) (Sample, error) {
	if len(ranks) == 0 {
		return Sample{}, telemetryErrorf("%s: no rank reported", source)
	}
	s := Sample{
		KVUsage:  -1,
		Ranks:    make([]RankLoad, 0, len(ranks)),
		Complete: expected <= 0 || len(ranks) >= expected,
		Source:   source,
	}
	everyMax := true
	for _, id := range slices.Sorted(maps.Keys(ranks)) {
		r := ranks[id]
		s.Ranks = append(s.Ranks, r)
		s.Running += r.Running
		s.Waiting += r.Waiting
		s.KVUsage = max(s.KVUsage, r.KVUsage)
		s.MaxRunning += r.MaxRunning
		everyMax = everyMax && r.MaxRunning > 0
	}
	// A capacity summed over only some ranks would overstate headroom on the
	// others' behalf: unknown for one is unknown for all.
	if !everyMax {
		s.MaxRunning = 0
	}
	return s, nil
}

// telemetryParseText parses Prometheus text exposition with the real parser. A
// body that does not parse is rejected whole: a truncated body would
// otherwise read as a rank with no load.
func telemetryParseText(body []byte) (telemetryText, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, telemetryErrorf("metrics text: %v", err)
	}
	out := telemetryText{}
	for name, mf := range fams {
		switch mf.GetType().String() {
		case "GAUGE", "COUNTER", "UNTYPED":
			vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, mf)
			if err != nil {
				return nil, telemetryErrorf("metric %s: %v", name, err)
			}
			out[name] = vec
		default:
			// Histograms and summaries are never load; keep the name so a
			// load family of the wrong type is reported as such.
			out[name] = nil
		}
	}
	return out, nil
}

// telemetryText holds the scalar families of one exposition by name; a nil
// vector marks a family of a type the telemetry does not read.
type telemetryText map[string]model.Vector

// has reports whether the exposition carries the family at all.
func (p telemetryText) has(name string) bool {
	_, ok := p[name]
	return ok
}

// byRank folds a family's series into one value per rank.
//
// The rank comes from rankLabel (absent: rank 0). Series of one rank that
// differ in other labels are replicas of the same scheduler state (SGLang's
// tensor-parallel schedulers with metrics on all of them, duplicated lines),
// so they are folded by max, never summed. SGLang with priority scheduling
// also exports per-priority buckets beside an aggregate series whose
// `priority` label is empty; the aggregate wins, and buckets are summed only
// when no aggregate is present.
func (p telemetryText) byRank(name, rankLabel string) (map[int]float64, error) {
	vec, ok := p[name]
	if !ok {
		return nil, nil
	}
	if vec == nil {
		return nil, telemetryErrorf("metric %s is not a gauge or counter", name)
	}
	type replica struct {
		rank int
		key  string
	}
	type fold struct {
		agg, buckets float64
		hasAgg       bool
	}
	folds := map[replica]*fold{}
	for _, smp := range vec {
		v := float64(smp.Value)
		// Every family the telemetry reads is a count, a fraction or a
		// cumulative counter: nothing negative or infinite is load.
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return nil, telemetryErrorf("metric %s = %v", name, v)
		}
		rank := 0
		if lv, ok := smp.Metric[model.LabelName(rankLabel)]; ok && lv != "" {
			n, err := strconv.ParseInt(string(lv), 10, 64)
			if err != nil {
				return nil, telemetryErrorf("metric %s: label %s=%q is not a rank", name, rankLabel, lv)
			}
			if rank, err = telemetryRank(rankLabel, n); err != nil {
				return nil, err
			}
		}
		k := replica{rank: rank, key: telemetryReplicaKey(smp.Metric, rankLabel)}
		f := folds[k]
		if f == nil {
			f = &fold{}
			folds[k] = f
		}
		if smp.Metric["priority"] == "" {
			f.agg = max(f.agg, v) // a duplicated line is the same reading twice
			f.hasAgg = true
		} else {
			f.buckets += v
		}
	}
	out := map[int]float64{}
	for k, f := range folds {
		v := f.buckets
		if f.hasAgg {
			v = f.agg
		}
		if prev, seen := out[k.rank]; !seen || v > prev {
			out[k.rank] = v
		}
	}
	return out, nil
}

// telemetryReplicaKey names the series among those of its rank: every label
// but the name, the rank and the priority bucket.
func telemetryReplicaKey(m model.Metric, rankLabel string) string {
	names := make([]string, 0, len(m))
	for n := range m {
		switch n {
		case model.MetricNameLabel, "priority", model.LabelName(rankLabel):
		default:
			names = append(names, string(n))
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte(0)
		b.WriteString(string(m[model.LabelName(n)]))
		b.WriteByte(0)
	}
	return b.String()
}

// telemetryTextLoad reads one engine's running, waiting, KV usage and
// max-running families into rank loads. running and waiting are required; kv
// and maxRunning may be empty names or absent families.
func telemetryTextLoad(p telemetryText, rankLabel, running, waiting, kv, maxRunning string) (map[int]RankLoad, error) {
	for _, name := range []string{running, waiting} {
		if !p.has(name) {
			return nil, telemetryErrorf("metric %s missing", name)
		}
	}
	run, err := p.byRank(running, rankLabel)
	if err != nil {
		return nil, err
	}
	wait, err := p.byRank(waiting, rankLabel)
	if err != nil {
		return nil, err
	}
	usage, err := p.byRank(kv, rankLabel)
	if err != nil {
		return nil, err
	}
	limit, err := p.byRank(maxRunning, rankLabel)
	if err != nil {
		return nil, err
	}
	ranks := map[int]RankLoad{}
	for _, id := range slices.Concat(slices.Collect(maps.Keys(run)), slices.Collect(maps.Keys(wait))) {
		if _, done := ranks[id]; done {
			continue
		}
		r := RankLoad{Rank: id, KVUsage: -1}
		if r.Running, err = telemetryCount(running, run[id]); err != nil {
			return nil, err
		}
		if r.Waiting, err = telemetryCount(waiting, wait[id]); err != nil {
			return nil, err
		}
		if v, ok := usage[id]; ok {
			if r.KVUsage, err = telemetryUsage(kv, v); err != nil {
				return nil, err
			}
		}
		if v, ok := limit[id]; ok {
			if r.MaxRunning, err = telemetryCount(maxRunning, v); err != nil {
				return nil, err
			}
		}
		ranks[id] = r
	}
	return ranks, nil
}

package handlers

import (
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// requestLine is one request's log line in the layout of slog's
// JSONHandler with default options (no source, no ReplaceAttr, no
// attributes added by With), byte for byte, written without slog's generic
// encoder: with
// one line per request, that encoder (a json.Marshal per float among its
// costs) took a fifth of the handler's time. Only the JSON format has this
// path; the text format goes through slog.
type requestLine struct {
	time     time.Time
	level    slog.Level
	rec      *requestRecord
	duration time.Duration
}

var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeRequestLine encodes l and hands it to w in one Write, so that lines
// of concurrent requests never interleave.
func writeRequestLine(w io.Writer, l requestLine) {
	bp := lineBuffers.Get().(*[]byte)
	b := l.append((*bp)[:0])
	_, _ = w.Write(b)
	if cap(b) <= maxPooledLine { // a client's huge model name is not kept
		*bp = b
		lineBuffers.Put(bp)
	}
}

// maxPooledLine bounds the buffers kept for reuse, as slog bounds its own.
const maxPooledLine = 16 << 10

// append writes the line: the attributes of Gateway.finish, in its order.
func (l requestLine) append(b []byte) []byte {
	r := l.rec
	b = append(b, `{"time":"`...)
	b = l.time.AppendFormat(b, time.RFC3339Nano) // as slog's JSON handler writes its time
	b = append(b, `","level":"`...)
	b = append(b, l.level.String()...)
	b = append(b, `","msg":"request","request_id":`...)
	b = appendJSONString(b, r.id)
	b = append(b, `,"partition":`...)
	b = appendJSONString(b, r.partition)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, r.model)
	b = append(b, `,"worker":`...)
	b = appendJSONString(b, r.worker)
	b = append(b, `,"decision":`...)
	b = appendJSONString(b, r.decision)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.status), 10)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, r.stream)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.attempts), 10)
	b = append(b, `,"duration_ms":`...)
	b = appendJSONFloat(b, millis(l.duration))
	if r.ttft > 0 {
		b = append(b, `,"ttft_ms":`...)
		b = appendJSONFloat(b, millis(r.ttft))
	}
	if r.err != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, r.err)
	}
	return append(b, "}\n"...)
}

// millis is d in milliseconds with microsecond resolution, as logged.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// appendJSONFloat formats f as encoding/json does (which slog calls for
// floats): 'f' notation, 'e' for very small or large magnitudes with a
// short exponent.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		// Unlike slog, which writes an !ERROR string; never reached:
		// durations are finite.
		return append(b, `null`...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as slog's JSON handler does: `"` and `\`
// escaped, control characters as \n, \r, \t or \u00XX, invalid UTF-8 as
// \ufffd, U+2028 and U+2029 escaped; everything else as it is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

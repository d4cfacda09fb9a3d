package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"time"
)

// Plot geometry, in SVG user units.
const (
	plotWidth    = 760
	plotHeight   = 440
	plotLeft     = 64
	plotRight    = 180 // room for the legend
	plotTop      = 36
	plotBottom   = 52
	plotMaxSteps = 400 // points a curve is drawn with at most
)

var plotColours = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// writePlot draws the TTFT CDF of every policy on a log-scale time axis.
func writePlot(path string, r *report) error {
	if err := os.WriteFile(path, plotSVG(r), 0o644); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

func plotSVG(r *report) []byte {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range r.Results {
		if n := len(p.ttft); n > 0 {
			lo = min(lo, clampSeconds(p.ttft[0]))
			hi = max(hi, clampSeconds(p.ttft[n-1]))
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1e-3, 1
	}
	// Whole decades on the axis.
	xmin := math.Floor(math.Log10(lo))
	xmax := math.Max(math.Ceil(math.Log10(hi)), xmin+1)
	w := float64(plotWidth - plotLeft - plotRight)
	h := float64(plotHeight - plotTop - plotBottom)
	x := func(sec float64) float64 { return plotLeft + (math.Log10(sec)-xmin)/(xmax-xmin)*w }
	y := func(frac float64) float64 { return plotTop + (1-frac)*h }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, plotHeight, plotWidth, plotHeight)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">TTFT CDF — %s, %d workers</text>`+"\n", plotLeft, html.EscapeString(r.Workload), r.Workers)

	// Grid and ticks: decades on x, tenths on y.
	for d := xmin; d <= xmax; d++ {
		px := x(math.Pow(10, d))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", px, plotTop, px, plotHeight-plotBottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px, plotHeight-plotBottom+16, decadeLabel(d))
	}
	for i := 0; i <= 10; i++ {
		py := y(float64(i) / 10)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", plotLeft, py, plotWidth-plotRight, py)
		if i%2 == 0 {
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.1f</text>`+"\n", plotLeft-6, py+4, float64(i)/10)
		}
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#444"/>`+"\n", plotLeft, plotTop, w, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">time to first token (s, log scale)</text>`+"\n", plotLeft+w/2, plotHeight-12)
	fmt.Fprintf(&b, `<text transform="translate(16 %.0f) rotate(-90)" text-anchor="middle">fraction of requests</text>`+"\n", plotTop+h/2)

	for i, p := range r.Results {
		colour := plotColours[i%len(plotColours)]
		if n := len(p.ttft); n > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="`, colour)
			// A step per sample, thinned to plotMaxSteps: the CDF reaches k/n
			// at the k-th smallest TTFT.
			step := max(1, n/plotMaxSteps)
			fmt.Fprintf(&b, "%.1f,%.1f", x(clampSeconds(p.ttft[0])), y(0))
			for k := step; ; k += step {
				k = min(k, n)
				fmt.Fprintf(&b, " %.1f,%.1f", x(clampSeconds(p.ttft[k-1])), y(float64(k)/float64(n)))
				if k == n {
					break
				}
			}
			b.WriteString(`"/>` + "\n")
		}
		ly := plotTop + 10 + 20*i
		lx := plotWidth - plotRight + 16
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", lx, ly, lx+22, ly, colour)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", lx+28, ly+4, html.EscapeString(p.Policy))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// clampSeconds keeps a log axis finite: a TTFT is at least a microsecond.
func clampSeconds(d time.Duration) float64 { return max(d.Seconds(), 1e-6) }

func decadeLabel(d float64) string {
	v := math.Pow(10, d)
	if d >= 0 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.*f", int(-d), v)
}

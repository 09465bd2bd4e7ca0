package checker

import (
	"encoding/xml"
	"fmt"
	"math"
	"strings"
)

// Chart geometry, in SVG user units (pixels).
const (
	svgW, svgH       = 960, 570
	plotL, plotR     = 72, 936 // plot area's left and right
	labelRow0        = 40      // first row of fault labels
	labelRows        = 3
	thrTop, thrBot   = 84, 290 // throughput panel
	latTop, latBot   = 330, 512
	maxDrawnFaults   = maxBuckets // more would be narrower than a bucket
	labelCharW       = 6.2        // rough width of a 10 px character
	maxLabelChars    = 40
	unavailableBarH  = 5
	seriesStrokeW    = 1.5
	faultFillOpacity = 0.16
)

// RenderSVG draws a report: throughput (ok, fail and info completions per
// second) and ok latency (p50, p99) over time, each fault shaded from
// inject to heal and labelled, its longest stretch without an ok op marked
// under the throughput. The SVG is self-contained (no scripts, fonts or
// links) and its size is bounded by the buckets and faults drawn.
func RenderSVG(r Report, title string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", svgW, svgH, svgW, svgH)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">availability: %s</text>`+"\n", plotL, esc(title))
	if len(r.Buckets) == 0 || r.BucketWidth <= 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d">no client operations</text>`+"\n", plotL, thrTop+20)
		b.WriteString("</svg>\n")
		return b.String()
	}
	w := int64(r.BucketWidth)
	start, end := r.Start, r.Start+int64(len(r.Buckets))*w
	x := func(t int64) float64 {
		t = min(max(t, start), end)
		return plotL + float64(t-start)/float64(end-start)*(plotR-plotL)
	}

	// Scales.
	var maxRate, maxLat float64
	for _, bk := range r.Buckets {
		maxRate = max(maxRate, perSec(bk.OK, w), perSec(bk.Fail, w), perSec(bk.Info, w))
		maxLat = max(maxLat, float64(bk.P99)/1e6)
	}
	rateTop, rateStep := niceScale(maxRate)
	latMax, latStep := niceScale(maxLat)
	yRate := func(v float64) float64 { return thrBot - v/rateTop*(thrBot-thrTop) }
	yLat := func(v float64) float64 { return latBot - min(v/latMax, 1)*(latBot-latTop) }

	// Faults first, so the series draw over them.
	b.WriteString(`<g id="faults">` + "\n")
	var rowEnd [labelRows]float64
	for i, f := range r.Faults {
		if i == maxDrawnFaults {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">(%d more faults not drawn)</text>`+"\n", plotL, svgH-4, len(r.Faults)-i)
			break
		}
		x0, x1 := x(f.Inject), x(f.Heal)
		if f.Heal < start || f.Inject > end {
			continue
		}
		col := faultColor(f.Fault)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%.2f"><title>%s</title></rect>`+"\n",
			x0, thrTop, max(x1-x0, 1), latBot-thrTop, col, faultFillOpacity, esc(f.Describe()))
		if f.Unavailable() > 0 {
			u0, u1 := x(f.UnavailableFrom), x(f.UnavailableTo)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>no ok op for %s</title></rect>`+"\n",
				u0, thrBot-unavailableBarH, max(u1-u0, 1), unavailableBarH, col, esc(secs(int64(f.Unavailable()))))
		}
		label := f.Fault
		if len(label) > maxLabelChars {
			label = label[:maxLabelChars] + "…"
		}
		if lx, row, ok := placeLabel(rowEnd[:], x0, label); ok {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="%s">%s</text>`+"\n", lx, labelRow0+row*12, col, esc(label))
		}
	}
	b.WriteString("</g>\n")

	// Axes and grids.
	xStep := niceStep(float64(end-start)/1e9, 10)
	for _, p := range [][2]int{{thrTop, thrBot}, {latTop, latBot}} {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", plotL, p[0], plotR-plotL, p[1]-p[0])
		s0 := math.Ceil(float64(start)/1e9/xStep) * xStep
		for k := 0; k <= 20 && (s0+float64(k)*xStep)*1e9 <= float64(end); k++ { // about 10; bounded against rounding
			s := s0 + float64(k)*xStep
			xs := x(int64(s * 1e9))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", xs, p[0], xs, p[1])
			if p[1] == latBot {
				fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", xs, latBot+14, tick(s, xStep))
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">time since the run started (s)</text>`+"\n", (plotL+plotR)/2, latBot+32)
	yAxis(&b, thrTop, thrBot, rateTop, rateStep, "completions/s")
	yAxis(&b, latTop, latBot, latMax, latStep, "ok latency (ms)")

	// Phases, labelled above the latency panel (in two rows, as they can
	// be close together).
	var phaseEnd [2]float64
	for _, p := range r.Phases {
		if p.Time < start || p.Time > end {
			continue
		}
		xp := x(p.Time)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#666" stroke-dasharray="4 3"/>`+"\n", xp, thrTop, xp, latBot)
		if lx, row, ok := placeLabel(phaseEnd[:], xp+3, p.Name); ok {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="#666">%s</text>`+"\n", lx, latTop-4-row*11, esc(p.Name))
		}
	}

	// Series, at the buckets' midpoints; latency only where there were ok
	// ops.
	mid := func(i int) float64 { return x(r.Buckets[i].Start + w/2) }
	series := func(color string, y func(i int) (float64, bool)) {
		var d strings.Builder
		pen := false
		for i := range r.Buckets {
			v, ok := y(i)
			if !ok {
				pen = false
				continue
			}
			cmd := 'L'
			if !pen {
				cmd = 'M'
			}
			fmt.Fprintf(&d, "%c%.1f %.1f", cmd, mid(i), v)
			pen = true
		}
		if d.Len() > 0 {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="%.1f"/>`+"\n", d.String(), color, seriesStrokeW)
		}
	}
	count := func(f func(Bucket) int) func(int) (float64, bool) {
		return func(i int) (float64, bool) { return yRate(perSec(f(r.Buckets[i]), w)), true }
	}
	latency := func(f func(Bucket) float64) func(int) (float64, bool) {
		return func(i int) (float64, bool) { return yLat(f(r.Buckets[i])), r.Buckets[i].OK > 0 }
	}
	const okC, failC, infoC, p50C, p99C = "#2a7d2a", "#c62828", "#ef8f00", "#1f5fbf", "#7b3fa0"
	series(okC, count(func(b Bucket) int { return b.OK }))
	series(failC, count(func(b Bucket) int { return b.Fail }))
	series(infoC, count(func(b Bucket) int { return b.Info }))
	series(p50C, latency(func(b Bucket) float64 { return float64(b.P50) / 1e6 }))
	series(p99C, latency(func(b Bucket) float64 { return float64(b.P99) / 1e6 }))
	legend(&b, thrTop, [][2]string{{okC, "ok"}, {failC, "fail"}, {infoC, "info (unknown)"}})
	legend(&b, latTop, [][2]string{{p50C, "p50"}, {p99C, "p99"}})
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#555">buckets of %s; shaded: faults from inject to heal; bars: longest stretch without an ok op</text>`+"\n",
		plotL, thrTop-6, esc(secs(w)))
	b.WriteString("</svg>\n")
	return b.String()
}

// placeLabel finds a row for a label wanted at x (moved left to stay on
// the chart) where it does not overlap the labels placed before it, and
// reserves the space; rowEnd holds where each row's last label ends.
func placeLabel(rowEnd []float64, x float64, label string) (float64, int, bool) {
	w := float64(len([]rune(label))) * labelCharW
	x = max(min(x, svgW-w-2), 0)
	for row := range rowEnd {
		if x >= rowEnd[row] {
			rowEnd[row] = x + w + 4
			return x, row, true
		}
	}
	return 0, 0, false
}

// yAxis draws a panel's y ticks and label.
func yAxis(b *strings.Builder, top, bot int, vmax, step float64, label string) {
	for k := 0; k <= 20 && float64(k)*step <= vmax*(1+1e-9); k++ { // about 5; bounded against rounding
		v := float64(k) * step
		y := float64(bot) - v/vmax*float64(bot-top)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>`+"\n", plotL, y, plotR, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotL-4, y+4, tick(v, step))
	}
	fmt.Fprintf(b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (top+bot)/2, esc(label))
}

// legend draws a panel's legend in its top right corner.
func legend(b *strings.Builder, top int, items [][2]string) {
	xl := float64(plotR - 10)
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		xl -= float64(len(it[1]))*labelCharW + 26
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="2"/>`, xl, top+12, xl+16, top+12, it[0])
		fmt.Fprintf(b, `<text x="%.1f" y="%d">%s</text>`+"\n", xl+20, top+16, esc(it[1]))
	}
}

// perSec is n per second of a bucket w ns wide.
func perSec(n int, w int64) float64 { return float64(n) / (float64(w) / 1e9) }

// niceScale returns an axis maximum at or above v (at least 1) and a tick
// step dividing it, both 1, 2 or 5 times a power of ten.
func niceScale(v float64) (top, step float64) {
	if !(v > 1) || math.IsInf(v, 0) {
		v = 1
	}
	step = niceStep(v, 5)
	return math.Ceil(v/step) * step, step
}

// niceStep is a round step (1, 2 or 5 times a power of ten) that cuts span
// into about n parts.
func niceStep(span float64, n int) float64 {
	if !(span > 0) || math.IsInf(span, 0) {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// tick formats an axis value with as many decimals as its step needs.
func tick(v, step float64) string {
	d := max(0, int(-math.Floor(math.Log10(step))))
	return fmt.Sprintf("%.*f", d, v)
}

// faultColor colours a fault by its family (the name before the colon).
func faultColor(name string) string {
	family, _, _ := strings.Cut(name, ":")
	switch family {
	case "partition":
		return "#e07b00"
	case "kill":
		return "#c62828"
	case "pause":
		return "#7b3fa0"
	case "clock":
		return "#1f5fbf"
	case "member":
		return "#2a7d2a"
	case "loss":
		return "#8d6e63"
	}
	return "#607d8b"
}

// esc escapes text for XML (and replaces characters XML cannot hold).
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder never fails
	return b.String()
}

package report

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/packed"
)

// Bounds on the timeline, so the page stays small for long runs and odd
// histories (thousands of node or operation names, faults every second).
const (
	maxBuckets     = 300 // time buckets of the per-node counts
	maxNodeRows    = 50  // nodes with a row of their own; the rest share one
	maxFs          = 50  // operation names counted apart; the rest together
	maxLanes       = 12  // faults with a lane of their own; the rest share one
	maxLaneRects   = 600 // fault intervals drawn
	maxNemesisRows = 300 // fault intervals listed
	maxPhases      = 50  // phase marks drawn
)

// Timeline geometry, in SVG pixels.
const (
	labelW   = 130 // left column with the row names
	plotW    = 900 // nominal plot width (a whole number of buckets)
	rowH     = 30  // height of a row's bars at the busiest bucket
	rowGap   = 8
	laneH    = 14
	axisH    = 18
	phaseH   = 28 // two lines of labels, alternating, so close phases stay readable
	rightPad = 12
	maxTicks = 10
)

// counts are completions by outcome.
type counts struct{ OK, Fail, Info int }

func (c *counts) add(kind string) {
	switch kind {
	case history.OK:
		c.OK++
	case history.Fail:
		c.Fail++
	case history.Info:
		c.Info++
	}
}

func (c counts) total() int { return c.OK + c.Fail + c.Info }

// series is one row of the timeline: a node, all nodes, or the nodes
// without a row of their own.
type series struct {
	Name    string
	Buckets []counts
	Total   counts
}

// fStats counts one operation name.
type fStats struct {
	F           string
	Invocations int
	counts
}

// interval is a fault from its inject to its heal.
type interval struct {
	Fault string
	// Inject and Heal are the history times the actions took effect;
	// -1 when there is no such entry (a heal with no inject before it, a
	// fault not healed when the history ends).
	Inject, Heal int64
	// Began is when the inject action started (-1: unknown).
	Began          int64
	Targets, Error string
}

// phaseMark is a phase entry.
type phaseMark struct {
	Name string
	Time int64
}

// analysis is what the page shows of a history: counts per operation
// name and per node, bucketed over time, and the fault intervals.
type analysis struct {
	// End is the last entry's time; Width the bucket width; N the number
	// of buckets, so N*Width > End.
	End        int64
	Width      time.Duration
	N          int
	All        series
	Nodes      []series
	OtherNodes int // nodes merged into the last row, when there are many
	Fs         []fStats
	Intervals  []interval
	// MoreFaults counts the fault actions left out once Intervals is
	// full.
	MoreFaults int
	Phases     []phaseMark
	MorePhases int
}

// analyze reads the history once. Its memory is bounded by the caps, not
// by the history's size.
func analyze(h *history.File) *analysis {
	z := NewAnalyzer()
	for i := range h.Ops {
		z.Observe(&h.Ops[i])
	}
	return z.analysis()
}

// Analyzer builds what the page shows of a history as its entries stream
// past (the harness's checking pass feeds it), so the report never needs
// the history held: per completion it keeps its time, kind and node row
// (16 bytes), and buckets them once the history's end is known.
type Analyzer struct {
	a       analysis
	entries int
	nodeIdx map[string]int
	other   bool
	fIdx    map[string]int
	otherF  *fStats
	open    map[string]int // fault -> index in Intervals of its unhealed inject
	// comps are the completions, packed: time, node row (-1: the shared
	// one) and kind (0 ok, 1 fail, 2 info).
	comps packed.Log
	done  bool
}

// kindName is the completion kind completion.kind codes.
func kindName(k uint8) string {
	switch k {
	case 0:
		return history.OK
	case 1:
		return history.Fail
	}
	return history.Info
}

// NewAnalyzer returns an empty Analyzer.
func NewAnalyzer() *Analyzer {
	return &Analyzer{nodeIdx: map[string]int{}, fIdx: map[string]int{}, open: map[string]int{}}
}

// Observe takes the next entry (it keeps nothing of op but copies).
func (z *Analyzer) Observe(op *history.Op) {
	a := &z.a
	z.entries++
	a.End = max(a.End, op.Time)
	switch {
	case op.Kind == history.Invoke:
		a.fStat(z.fIdx, &z.otherF, op.F).Invocations++
	case op.Completion():
		a.fStat(z.fIdx, &z.otherF, op.F).add(op.Kind)
		k := uint8(2)
		switch op.Kind {
		case history.OK:
			k = 0
		case history.Fail:
			k = 1
		}
		z.comps.Put(0, op.Time)
		z.comps.Put(1, int64(z.nodeRow(op.Node)))
		z.comps.Put(2, int64(k))
		z.comps.End()
	case op.Kind == history.Phase:
		if len(a.Phases) < maxPhases {
			a.Phases = append(a.Phases, phaseMark{op.F, op.Time})
		} else {
			a.MorePhases++
		}
	case op.Kind == history.Nemesis:
		a.nemesis(op, z.open)
	}
}

// Entries is how many entries it saw.
func (z *Analyzer) Entries() int { return z.entries }

// End is the latest entry time it saw.
func (z *Analyzer) End() time.Duration { return time.Duration(z.a.End) }

// nodeRow is the row of node: its own among the first maxNodeRows nodes,
// else the shared one (-1).
func (z *Analyzer) nodeRow(node string) int {
	a := &z.a
	k, ok := z.nodeIdx[node]
	switch {
	case ok && k >= 0:
		return k
	case !ok && len(a.Nodes) < maxNodeRows:
		z.nodeIdx[node] = len(a.Nodes)
		a.Nodes = append(a.Nodes, series{Name: node})
		return len(a.Nodes) - 1
	}
	z.other = true
	// Names merged are counted while the set stays small; past that the
	// page says "N+" rather than keep a set as big as the history.
	if !ok && len(z.nodeIdx) < 10*maxNodeRows {
		z.nodeIdx[node] = -1
		a.OtherNodes++
	}
	return -1
}

// analysis buckets the completions, once: later calls return the same.
func (z *Analyzer) analysis() *analysis {
	if z.done {
		return &z.a
	}
	z.done = true
	a := &z.a
	a.Width = bucketWidth(a.End)
	a.N = int(a.End/int64(a.Width)) + 1
	a.All = series{Name: "all nodes", Buckets: make([]counts, a.N)}
	for i := range a.Nodes {
		a.Nodes[i].Buckets = make([]counts, a.N)
	}
	var other *series
	if z.other {
		other = &series{Buckets: make([]counts, a.N)}
	}
	r := z.comps.Reader()
	for range z.comps.Len() {
		t, row, k := r.Get(0), r.Get(1), r.Get(2)
		b, kind := a.bucket(t), kindName(uint8(k))
		a.All.Buckets[b].add(kind)
		a.All.Total.add(kind)
		s := other
		if row >= 0 {
			s = &a.Nodes[row]
		}
		s.Buckets[b].add(kind)
		s.Total.add(kind)
	}
	z.comps = packed.Log{}
	sort.SliceStable(a.Nodes, func(i, j int) bool { return naturalLess(a.Nodes[i].Name, a.Nodes[j].Name) })
	if other != nil {
		other.Name = fmt.Sprintf("%d+ other nodes", a.OtherNodes)
		a.Nodes = append(a.Nodes, *other)
	}
	if z.otherF != nil {
		a.Fs = append(a.Fs, *z.otherF)
	}
	return a
}

func (a *analysis) bucket(t int64) int {
	return int(min(max(t, 0)/int64(a.Width), int64(a.N-1)))
}

// fStat is the counter of operation name f.
func (a *analysis) fStat(idx map[string]int, other **fStats, f string) *fStats {
	if k, ok := idx[f]; ok {
		return &a.Fs[k]
	}
	if len(a.Fs) < maxFs {
		idx[f] = len(a.Fs)
		a.Fs = append(a.Fs, fStats{F: f})
		return &a.Fs[len(a.Fs)-1]
	}
	if *other == nil {
		*other = &fStats{F: "(other operations)"}
	}
	return *other
}

// nemesisValue is a nemesis entry's value (docs/history.md); each field is
// read on its own, so one of an odd type does not hide the others.
type nemesisValue struct {
	Action  string
	Began   int64
	Failed  bool
	Targets json.RawMessage
}

func readNemesis(raw json.RawMessage) nemesisValue {
	v := nemesisValue{Began: -1}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return v
	}
	json.Unmarshal(m["action"], &v.Action)
	var began int64
	if json.Unmarshal(m["began"], &began) == nil {
		v.Began = began
	}
	json.Unmarshal(m["failed"], &v.Failed)
	v.Targets = m["targets"]
	return v
}

// nemesis pairs a fault's inject with its next heal. Once the intervals
// are capped, later actions are only counted (a heal whose inject was left
// out is one of them).
func (a *analysis) nemesis(op *history.Op, open map[string]int) {
	v := readNemesis(op.Value)
	targets := compactJSON(v.Targets, maxTargetsText)
	switch v.Action {
	case "heal":
		if k, ok := open[op.F]; ok {
			delete(open, op.F)
			iv := &a.Intervals[k]
			iv.Heal = op.Time
			if targets != "" {
				iv.Targets = clip(joinNonEmpty(iv.Targets, "heal: "+targets), maxTargetsText)
			}
			iv.Error = joinNonEmpty(iv.Error, prefixed("heal: ", op.Error))
			return
		}
		a.addInterval(interval{Fault: op.F, Inject: -1, Heal: op.Time, Began: v.Began,
			Targets: joinNonEmpty("heal with no inject before it", prefixed("heal: ", targets)), Error: prefixed("heal: ", op.Error)}, nil, "")
	case "inject":
		if v.Failed {
			// It did nothing, and no heal follows: a point in time.
			a.addInterval(interval{Fault: op.F, Inject: op.Time, Heal: op.Time, Began: v.Began,
				Targets: joinNonEmpty("inject failed: nothing was done", targets), Error: prefixed("inject: ", op.Error)}, nil, "")
			return
		}
		a.addInterval(interval{Fault: op.F, Inject: op.Time, Heal: -1, Began: v.Began, Targets: targets,
			Error: prefixed("inject: ", op.Error)}, open, op.F)
	default:
		// An action this version does not know: listed as a point in time.
		a.addInterval(interval{Fault: op.F, Inject: op.Time, Heal: op.Time, Began: v.Began,
			Targets: joinNonEmpty("action "+strconv.Quote(clip(v.Action, 40)), targets), Error: op.Error}, nil, "")
	}
}

// addInterval appends iv while under the cap, remembering an inject
// (open not nil) until its heal; past the cap it only counts it, so open
// stays as small as the list.
func (a *analysis) addInterval(iv interval, open map[string]int, fault string) {
	if len(a.Intervals) == max(maxNemesisRows, maxLaneRects) {
		a.MoreFaults++
		return
	}
	if open != nil {
		open[fault] = len(a.Intervals)
	}
	a.Intervals = append(a.Intervals, iv)
}

// prefixed is p+s, or "" when s is.
func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// bucketWidth is a round width that fits the run into at most maxBuckets
// buckets: 100 ms, 200 ms, 500 ms, 1 s, ... as the run grows.
func bucketWidth(end int64) time.Duration {
	for _, w := range niceDurations() {
		if int64(w)*maxBuckets > end {
			return w
		}
	}
	// Longer than the longest round width allows (or an odd time): any
	// width that fits.
	return time.Duration(end/maxBuckets + 1)
}

// niceDurations are the round widths of buckets and axis steps, shortest
// first.
func niceDurations() []time.Duration {
	return []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
		time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
	}
}

// naturalLess orders names with numbers by value: n2 before n10.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		ad, bd := isDigit(a[0]), isDigit(b[0])
		if ad && bd {
			i, j := digits(a), digits(b)
			na, nb := trimZeros(a[:i]), trimZeros(b[:j])
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = a[i:], b[j:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digits(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}

// healText is when a fault was healed, for people.
func healText(t int64) string {
	if t < 0 {
		return "not healed"
	}
	return fmtTime(t)
}

// fmtTime formats a history time for people: seconds with milliseconds.
func fmtTime(ns int64) string {
	if ns < 0 {
		return "–"
	}
	return time.Duration(ns).Round(time.Millisecond).String()
}

// The SVG, as values the template draws.
type (
	svgView struct {
		Width, Height int
		PlotX, PlotW  int
		Ticks         []svgTick
		Phases        []svgTick
		PhaseY        int
		// Marks are the checkers' first violations, labelled in the band
		// at MarkY.
		Marks []svgTick
		MarkY int
		Lanes []svgLane
		Rows  []svgRow
	}
	svgTick struct {
		X     int
		Label string
		Title string
		// Y is the label's baseline; End anchors it at its end (near the
		// right edge).
		Y   int
		End bool
	}
	svgLane struct {
		Y      int
		Label  string
		Color  string
		Rects  []svgRect
		Height int
	}
	svgRect struct {
		X, W   int
		Title  string
		Failed bool
	}
	svgRow struct {
		Y     int
		Label string
		Title string
		// OK, Fail, Info are the "d" of the cumulative areas (info is drawn
		// first and ok last, so each shows above the one below); empty when
		// the row has none of that outcome.
		OK, Fail, Info string
		Base           int
	}
)

// mark is a moment the timeline marks: a checker's first violation.
type mark struct {
	t     int64
	label string
}

// svg lays out the timeline: an axis, phase marks, a lane per fault and a
// row per node (all nodes first) of stacked ok/fail/info areas per bucket,
// and a red line at each mark.
func (a *analysis) svg(marks []mark) svgView {
	bw := max(2, plotW/a.N)
	v := svgView{PlotX: labelW, PlotW: bw * a.N}
	v.Width = v.PlotX + v.PlotW + rightPad
	span := float64(a.N) * float64(a.Width)
	x := func(t int64) int {
		return v.PlotX + int(math.Round(float64(max(t, 0))/span*float64(v.PlotW)))
	}

	y := axisH
	step := tickStep(time.Duration(span))
	for t := time.Duration(0); float64(t) <= span && len(v.Ticks) <= maxTicks+2; t += step {
		v.Ticks = append(v.Ticks, svgTick{X: x(int64(t)), Label: fmtTime(int64(t)), Y: 10})
	}
	if len(a.Phases) > 0 {
		v.PhaseY = y
		for i, p := range a.Phases {
			px := x(p.Time)
			v.Phases = append(v.Phases, svgTick{X: px, Label: clip(p.Name, maxLabel), Y: y + 11 + 12*(i%2), End: px > v.PlotX+v.PlotW-80})
		}
		y += phaseH
	}
	if len(marks) > 0 {
		// A band of their own under the phases' labels.
		v.MarkY = y
		for i, m := range marks {
			mx := x(m.t)
			v.Marks = append(v.Marks, svgTick{X: mx, Label: "✕ " + m.label, Title: m.label + ": first violation proven at " + fmtTime(m.t),
				Y: y + 11 + 12*(i%2), End: mx > v.PlotX+v.PlotW-80})
		}
		y += phaseH
	}

	laneColors := []string{"#7b61c9", "#2f8fb0", "#b0672f", "#5a8f3a", "#b03a7a", "#607080", "#a08a20", "#3a5ab0"}
	lane := map[string]int{}
	for i, iv := range a.Intervals {
		if i == maxLaneRects {
			break
		}
		k, ok := lane[iv.Fault]
		if !ok {
			if len(v.Lanes) < maxLanes {
				k = len(v.Lanes)
				v.Lanes = append(v.Lanes, svgLane{Label: clip(iv.Fault, maxLabel), Color: laneColors[k%len(laneColors)]})
			} else {
				if len(v.Lanes) == maxLanes {
					v.Lanes = append(v.Lanes, svgLane{Label: "other faults", Color: "#888888"})
				}
				k = maxLanes
			}
			lane[iv.Fault] = k
		}
		from, to := iv.Inject, iv.Heal
		if from < 0 {
			from = iv.Began
		}
		if from < 0 {
			from = to
		}
		if to < 0 {
			to = a.End // not healed: it lasted to the end of the history
		}
		x0, x1 := x(from), x(to)
		title := fmt.Sprintf("%s: %s → %s", clip(iv.Fault, 80), fmtTime(iv.Inject), healText(iv.Heal))
		if iv.Targets != "" {
			title += ": " + clip(iv.Targets, maxTargetsTitle)
		}
		if iv.Error != "" {
			title += " (error: " + clip(iv.Error, maxTargetsTitle) + ")"
		}
		v.Lanes[k].Rects = append(v.Lanes[k].Rects, svgRect{X: x0, W: max(x1-x0, 1), Title: title, Failed: iv.Error != ""})
	}
	for i := range v.Lanes {
		v.Lanes[i].Y = y
		v.Lanes[i].Height = laneH - 3
		y += laneH
	}
	if len(v.Lanes) > 0 {
		y += rowGap
	}

	// Node rows share a scale, so a busy node looks busier than an idle
	// one; the all-nodes row has its own.
	peak := 0
	for _, s := range a.Nodes {
		for _, c := range s.Buckets {
			peak = max(peak, c.total())
		}
	}
	allPeak := 0
	for _, c := range a.All.Buckets {
		allPeak = max(allPeak, c.total())
	}
	rows := append([]series{a.All}, a.Nodes...)
	for i, s := range rows {
		p := peak
		if i == 0 {
			p = allPeak
		}
		r := areas(s, p, bw)
		r.Y = y
		r.Base = rowH + 2
		name := s.Name
		if name == "" {
			name = "(no node)" // completions that name no node
		}
		r.Label = clip(name, maxLabel)
		r.Title = fmt.Sprintf("%s: %d ok, %d fail, %d info", clip(name, 200), s.Total.OK, s.Total.Fail, s.Total.Info)
		v.Rows = append(v.Rows, r)
		y += rowH + 2 + rowGap
	}
	v.Height = y
	return v
}

// areas draws a row's cumulative step areas. Heights are whole pixels,
// and an outcome present in a bucket gets at least one, so a single
// failure among thousands of oks still shows.
func areas(s series, peak, bw int) svgRow {
	var r svgRow
	if peak == 0 {
		return r
	}
	scale := func(n int) int {
		if n <= 0 {
			return 0
		}
		return int(math.Ceil(float64(n) * rowH / float64(peak)))
	}
	hOK := make([]int, len(s.Buckets))
	hFail := make([]int, len(s.Buckets))
	hInfo := make([]int, len(s.Buckets))
	for i, c := range s.Buckets {
		hOK[i] = scale(c.OK)
		hFail[i] = max(scale(c.OK+c.Fail), hOK[i]+min(c.Fail, 1))
		hInfo[i] = max(scale(c.total()), hFail[i]+min(c.Info, 1))
	}
	base := rowH + 2
	if s.Total.OK > 0 {
		r.OK = stepPath(hOK, bw, base)
	}
	if s.Total.Fail > 0 {
		r.Fail = stepPath(hFail, bw, base)
	}
	if s.Total.Info > 0 {
		r.Info = stepPath(hInfo, bw, base)
	}
	return r
}

// stepPath is an SVG path of bars of width bw and heights h standing on
// y=base, as one outline: "M0,base" then a V (when the height changes)
// and an H per bucket.
func stepPath(h []int, bw, base int) string {
	b := make([]byte, 0, 8*len(h)+16)
	b = append(b, 'M', '0', ',')
	b = strconv.AppendInt(b, int64(base), 10)
	prev := 0
	for i, hi := range h {
		if hi != prev {
			b = append(b, 'V')
			b = strconv.AppendInt(b, int64(base-hi), 10)
			prev = hi
		}
		b = append(b, 'H')
		b = strconv.AppendInt(b, int64((i+1)*bw), 10)
	}
	b = append(b, 'V')
	b = strconv.AppendInt(b, int64(base), 10)
	b = append(b, 'Z')
	return string(b)
}

// tickStep is a round time step giving at most maxTicks axis labels.
func tickStep(span time.Duration) time.Duration {
	for _, d := range niceDurations() {
		if d*maxTicks >= span {
			return d
		}
	}
	return max(span/maxTicks, 1)
}

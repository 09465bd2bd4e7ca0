package checker

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/atomicfile"
	"github.com/shardtest/shardtest/internal/packed"
)

// Availability reports throughput, latency and unavailability over time,
// and how each fault the nemesis injected affected them. It is not a
// correctness property: its verdict is valid whenever there are client ops
// (unknown otherwise), and its value is the report and the chart
// (AvailabilityFile) it writes.
type Availability struct{}

// Name implements Checker.
func (Availability) Name() string { return "availability" }

// AvailabilityFile is the chart Availability writes into the output
// directory.
const AvailabilityFile = "availability.svg"

// Analysis parameters.
const (
	// maxBuckets bounds the time buckets, and so the chart's size: buckets
	// are 1 s wide, or as many whole seconds as keep them within this.
	maxBuckets = 600
	// afterHeal is how long after a heal the fault's unavailability window
	// extends: a cluster takes a while to notice a healed fault.
	afterHeal = 30 * time.Second
	// recoveredShare: a fault has recovered when a bucket's ok rate is back
	// to this share of the baseline.
	recoveredShare = 0.5
)

// Report is what Availability learns from a history. Instants are
// nanoseconds on the history's clock; spans are durations.
type Report struct {
	// Start (aligned to BucketWidth) and End bound the client ops and
	// nemesis entries; First is the first of them.
	Start, First, End int64
	BucketWidth       time.Duration
	Buckets           []Bucket
	// Faults in the order they were injected.
	Faults []FaultWindow
	Phases []PhaseMark
	// Completions by kind; Open: invocations never completed.
	OK, Fail, Info, Open int
	// MedianOKRate is the median ok/s over the whole buckets of the main
	// phase (of [First, End] if there are no phases); BaselineOKRate the
	// median of those that end before the first fault began (0 when there
	// are none).
	MedianOKRate, BaselineOKRate float64
	// UnmatchedHeals: heals with no inject of their fault open.
	UnmatchedHeals int
	// FailedInjects: injects that did nothing (no window).
	FailedInjects int
}

// Bucket is one time bucket [Start, End): the completions in it, and the
// latency of its ok completions (zero when it has none).
type Bucket struct {
	Start, End     int64
	OK, Fail, Info int
	P50, P99, Max  time.Duration
}

// Rate is the bucket's ok completions per second of a full bucket (a cut
// short last bucket reads low, never high).
func (b Bucket) Rate(width time.Duration) float64 {
	if width <= 0 {
		return 0
	}
	return float64(b.OK) / width.Seconds()
}

// FaultWindow is one fault, from its inject to its heal, and its effect.
type FaultWindow struct {
	Fault string
	// Inject is when the inject began (its effects may start then); Heal
	// when the heal took effect, or End when it never was (Healed false).
	Inject, Heal int64
	Healed       bool
	// Error is the inject's or heal's error, if any (the fault may have
	// been only partly in effect).
	Error string
	// The longest stretch with no ok completion within [Inject, Heal + 30
	// s], cut where the recovery look ends and at the end (faults
	// injected before the heal count as part of this one).
	UnavailableFrom, UnavailableTo int64
	// Recovery: from the heal to the start of the first bucket (one
	// overlapping the heal counts) whose ok rate is back to
	// recoveredShare of the baseline, looking until the next fault's
	// inject, or the heal of another fault still in effect at this one's
	// heal (until then that one may be what keeps the service down), or
	// the end of the main phase. Zero when Recovered is false.
	Recovery  time.Duration
	Recovered bool
	// NotRecovered says, for people, why Recovered is false: the ok rate
	// had not come back when the look ended (what ended it, how long
	// after the heal); or, when Unmeasured, why there was nothing to
	// look at: never healed, no baseline, or less than one bucket of
	// traffic between the heal and the end of the look (the last fault,
	// healed when the main phase ends, usually) — no finding then.
	NotRecovered string
	Unmeasured   bool
}

// Unavailable is the length of the fault's longest stretch with no ok
// completion.
func (f FaultWindow) Unavailable() time.Duration {
	return time.Duration(f.UnavailableTo - f.UnavailableFrom)
}

// PhaseMark is the start of a run phase.
type PhaseMark struct {
	Name string
	Time int64
}

// Check implements Checker.
func (a Availability) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, a, h, in)
}

// Stream implements Streamer: per completion its time, latency and kind.
func (a Availability) Stream(in Inputs) Stream {
	return &availResult{a: a, outDir: in.Out, st: newAvailStream()}
}

type availResult struct {
	a      Availability
	outDir string
	st     *availStream
}

func (s *availResult) Observe(op *history.Op) { s.st.observe(op) }

func (s *availResult) Result(ctx context.Context, pass *Pass) Result {
	a, outDir := s.a, s.outDir
	res := Result{Checker: a.Name(), Verdict: Unknown}
	if err := ctx.Err(); err != nil {
		res.Summary = "stopped: " + err.Error()
		return res
	}
	r := s.st.report()
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, s.st.pairs.evidence()...)
	if r.OK+r.Fail+r.Info+r.Open == 0 {
		res.Summary = "no client operations: nothing to report"
		return res
	}
	res.Verdict = Valid
	res.Summary = r.Summary()
	if r.BaselineOKRate == 0 && len(r.Faults) > 0 {
		res.Evidence = append(res.Evidence, "no whole bucket with ok ops before the first fault: no baseline to measure recovery against")
	}
	if r.FailedInjects > 0 {
		res.Evidence = append(res.Evidence, fmt.Sprintf("%d injects failed and did nothing; they are not faults here", r.FailedInjects))
	}
	if r.UnmatchedHeals > 0 {
		res.Evidence = append(res.Evidence, fmt.Sprintf("%d heals had no inject of their fault open and were ignored", r.UnmatchedHeals))
	}
	var lines []string
	for _, f := range r.Faults {
		lines = append(lines, f.Describe())
	}
	res.Evidence = append(res.Evidence, limit(lines)...)
	if outDir == "" {
		return res
	}
	if err := writeChart(outDir, s.st.test, r); err != nil {
		res.Evidence = append(res.Evidence, "chart not written: "+err.Error())
		return res
	}
	res.Files = []string{AvailabilityFile}
	return res
}

// writeChart renders r into outDir (a stored run's folder, which
// atomicfile never writes through a link out of).
func writeChart(outDir, title string, r Report) error {
	return atomicfile.Write(outDir, AvailabilityFile, []byte(RenderSVG(r, title)))
}

// Analyze computes the availability report of a history. It is a pure
// function of the history, O(n log n), and tolerates odd input (times out
// of order, completions before their invocations, unreadable nemesis
// values).
func Analyze(h *history.File) Report {
	st := newAvailStream()
	st.test = h.Header.Test
	for i := range h.Ops {
		st.observe(&h.Ops[i])
	}
	return st.report()
}

// availStream gathers, in one pass, what the report needs: the timeline's
// extent, the phases, the outline of faults, and per completion its time,
// latency and kind.
type availStream struct {
	test       string
	pairs      *pairStream
	outline    outline
	phases     []PhaseMark
	first, end int64
	have       bool
	// comps are the completions, packed: time, latency and kind.
	comps packed.Log
	open  int
	// openAt are the times of the invocations never completed.
	openAt []int64
}

// Fields of a packed completion.
const (
	availAt = iota
	availTook
	availKind
)

// compKind is a completion's kind.
type compKind uint8

const (
	compOK compKind = iota
	compFail
	compInfo
)

func newAvailStream() *availStream {
	st := &availStream{}
	st.pairs = newPairStream(func(*history.Op) bool { return true }, st.pair)
	return st
}

func (st *availStream) widen(t int64) {
	if !st.have {
		st.first, st.end, st.have = t, t, true
	}
	st.first, st.end = min(st.first, t), max(st.end, t)
}

func (st *availStream) observe(op *history.Op) {
	st.outline.observe(op)
	switch {
	case op.Kind == history.Phase:
		// The timeline: client ops and nemesis entries (phases are marks;
		// the warm-up starts before the cluster does).
		st.phases = append(st.phases, PhaseMark{Name: op.F, Time: op.Time})
	case op.Kind == history.Invoke || op.Completion() || op.Kind == history.Nemesis:
		st.widen(op.Time)
	}
	st.pairs.observe(op)
}

func (st *availStream) pair(inv, comp *history.Op) {
	if comp == nil {
		st.open++
		st.openAt = append(st.openAt, inv.Time)
		return
	}
	kind := compInfo
	switch comp.Kind {
	case history.OK:
		kind = compOK
	case history.Fail:
		kind = compFail
	}
	st.comps.Put(availAt, comp.Time)
	st.comps.Put(availTook, max(comp.Time-inv.Time, 0))
	st.comps.Put(availKind, int64(kind))
	st.comps.End()
}

// report ends the pass.
func (st *availStream) report() Report {
	st.pairs.finish()
	var r Report
	r.Phases = st.phases
	r.Open = st.open
	if !st.have {
		return r
	}
	r.First, r.End = st.first, st.end
	widen := func(t int64) { r.First, r.End = min(r.First, t), max(r.End, t) }
	r.Faults, r.UnmatchedHeals, r.FailedInjects = faultWindows(st.outline.ops, r.End)
	for _, f := range r.Faults {
		widen(f.Inject) // an inject's beginning may precede every entry
	}
	r.BucketWidth, r.Start = bucketing(r.First, r.End)
	w := int64(r.BucketWidth)
	n := int((uint64(r.End-r.Start))/uint64(w)) + 1
	r.Buckets = make([]Bucket, n)
	for i := range r.Buckets {
		s := r.Start + int64(i)*w
		r.Buckets[i] = Bucket{Start: s, End: s + w}
	}
	bucketOf := func(t int64) int { return int(uint64(t-r.Start) / uint64(w)) }

	// Traffic stops with the main phase: the recovery wait after it has no
	// operations and is not unavailability.
	mainEnd := r.End
	for i, p := range r.Phases {
		if p.Name == "main" && i+1 < len(r.Phases) {
			mainEnd = r.Phases[i+1].Time
		}
	}
	// The last invocations, in the main phase and at all: after them
	// there is no traffic left to show a recovery.
	lastInv, lastMainInv := int64(math.MinInt64), int64(math.MinInt64)
	invoked := func(t int64) {
		lastInv = max(lastInv, t)
		if t < mainEnd {
			lastMainInv = max(lastMainInv, t)
		}
	}
	for _, t := range st.openAt {
		invoked(t)
	}

	// Completions per bucket, and ok latencies grouped by bucket (a
	// counting sort, so each bucket's percentiles sort only its own): one
	// read of the packed completions to count, one to place.
	offset := make([]int, n+1)
	rd := st.comps.Reader()
	for range st.comps.Len() {
		at, took, kind := rd.Get(availAt), rd.Get(availTook), compKind(rd.Get(availKind))
		invoked(at - took)
		k := bucketOf(at)
		b := &r.Buckets[k]
		switch kind {
		case compOK:
			r.OK++
			b.OK++
			offset[k+1]++
		case compFail:
			r.Fail++
			b.Fail++
		default:
			r.Info++
			b.Info++
		}
	}
	for i := range n {
		offset[i+1] += offset[i]
	}
	lat := make([]int64, r.OK)
	okTimes := make([]int64, 0, r.OK)
	next := slices.Clone(offset[:n])
	rd = st.comps.Reader()
	for range st.comps.Len() {
		at, took, kind := rd.Get(availAt), rd.Get(availTook), compKind(rd.Get(availKind))
		if kind != compOK {
			continue
		}
		k := bucketOf(at)
		lat[next[k]] = took
		next[k]++
		okTimes = append(okTimes, at)
	}
	st.comps = packed.Log{}
	for i := range r.Buckets {
		seg := lat[offset[i]:offset[i+1]]
		if len(seg) == 0 {
			continue
		}
		slices.Sort(seg)
		b := &r.Buckets[i]
		b.P50, b.P99, b.Max = time.Duration(rank(seg, 0.50)), time.Duration(rank(seg, 0.99)), time.Duration(seg[len(seg)-1])
	}

	// Rates: the median over whole buckets, and the baseline before the
	// first fault.
	var all, before []float64
	firstFault := int64(math.MaxInt64)
	if len(r.Faults) > 0 {
		firstFault = r.Faults[0].Inject
	}
	// Only the main phase drives traffic: the warm-up, the recovery wait
	// and the final read-back would drag the median down.
	mainFrom, mainTo := r.First, r.End
	for i, p := range r.Phases {
		if p.Name == "main" {
			mainFrom = max(mainFrom, p.Time)
			if i+1 < len(r.Phases) {
				mainTo = min(mainTo, r.Phases[i+1].Time)
			}
		}
	}
	for _, b := range r.Buckets {
		if b.Start < mainFrom || b.End > mainTo {
			continue
		}
		all = append(all, b.Rate(r.BucketWidth))
		if b.End <= firstFault {
			before = append(before, b.Rate(r.BucketWidth))
		}
	}
	if len(all) == 0 { // a short run: every bucket is partial
		for _, b := range r.Buckets {
			all = append(all, b.Rate(r.BucketWidth))
		}
	}
	r.MedianOKRate, r.BaselineOKRate = median(all), median(before)

	lat = nil
	slices.Sort(okTimes)
	for i := range r.Faults {
		look := recoveryLook{until: r.End, why: "the history ended", sent: lastInv}
		if r.Faults[i].Inject < mainEnd {
			look = recoveryLook{until: max(mainEnd, r.Faults[i].Heal), why: "the main phase ended", sent: lastMainInv}
		}
		r.fault(&r.Faults[i], okTimes, blameUntil(r.Faults, i, look))
	}
	return r
}

// recoveryLook is how far after a fault's heal its recovery is looked
// for: until until, which why names (a clause: "the next fault began");
// sent is the last invocation that could show it (after it, no traffic).
type recoveryLook struct {
	until int64
	why   string
	sent  int64
}

// blameUntil is how long after faults[i]'s heal what happens can still be
// blamed on it: until the next fault is injected, or until a fault that was
// still in effect at the heal is healed too (up to then that one may be
// what keeps the service down), but never beyond limit.until. Faults
// injected before the heal overlap it and count as part of it. The look's
// why says what stopped it.
func blameUntil(faults []FaultWindow, i int, limit recoveryLook) recoveryLook {
	f, look := faults[i], limit
	for j, g := range faults {
		switch {
		case j == i:
		case g.Inject >= f.Heal && g.Inject < look.until:
			look.until, look.why = g.Inject, "the next fault began"
		case g.Inject < f.Heal && g.Heal > f.Heal && g.Heal < look.until:
			look.until, look.why = g.Heal, g.Fault+" (in effect at this heal) was healed"
		}
	}
	look.until = max(look.until, f.Heal)
	return look
}

// fault fills in a fault's unavailability and recovery, looking no further
// than look.until (see blameUntil).
func (r *Report) fault(f *FaultWindow, okTimes []int64, look recoveryLook) {
	until := look.until
	// Longest stretch without an ok completion in [Inject, to].
	to := max(min(satAdd(f.Heal, int64(afterHeal)), until), f.Inject)
	prev := f.Inject
	f.UnavailableFrom, f.UnavailableTo = prev, prev
	i, _ := slices.BinarySearch(okTimes, f.Inject)
	for ; i < len(okTimes) && okTimes[i] <= to; i++ {
		if okTimes[i]-prev > f.UnavailableTo-f.UnavailableFrom {
			f.UnavailableFrom, f.UnavailableTo = prev, okTimes[i]
		}
		prev = okTimes[i]
	}
	if to-prev > f.UnavailableTo-f.UnavailableFrom {
		f.UnavailableFrom, f.UnavailableTo = prev, to
	}

	switch {
	case !f.Healed:
		f.NotRecovered, f.Unmeasured = "never healed", true
		return
	case r.BaselineOKRate == 0:
		f.NotRecovered, f.Unmeasured = "no ok rate before the first fault to compare with", true
		return
	}
	for _, b := range r.Buckets {
		if b.End <= f.Heal {
			continue
		}
		if b.Start >= until && until < r.End {
			break
		}
		if b.Rate(r.BucketWidth) >= recoveredShare*r.BaselineOKRate {
			f.Recovery, f.Recovered = time.Duration(max(b.Start-f.Heal, 0)), true
			return
		}
	}
	// Not back when the look ended: what ended it, and how long after
	// the heal. Less than a bucket of it shows nothing.
	end, why := until, look.why
	if look.sent < end {
		end, why = look.sent, "the traffic stopped"
	}
	var after int64 // compared first: end may be math.MinInt64 (no traffic at all)
	if end > f.Heal {
		after = end - f.Heal
	}
	switch {
	case after == 0:
		f.NotRecovered, f.Unmeasured = why+" no later than the heal: nothing to measure", true
	case after < int64(r.BucketWidth):
		f.NotRecovered = fmt.Sprintf("%s %s after the heal, less than one %s bucket to measure", why, secs(after), secs(int64(r.BucketWidth)))
		f.Unmeasured = true
	default:
		f.NotRecovered = fmt.Sprintf("ok rate still under %s when %s, %s after the heal", r.recoveryBar(), why, secs(after))
	}
}

// faultWindows are the faults that happened (history.Faults: each inject
// with its heal; an inject never healed lasts until end), in inject
// order, the heals that closed nothing, and the injects that failed and
// did nothing (no window: no fault happened).
func faultWindows(ops []history.Op, end int64) (faults []FaultWindow, unmatched, failed int) {
	spans, unmatched := history.Faults(ops)
	for _, s := range spans {
		if s.Failed() {
			failed++
			continue
		}
		f := FaultWindow{Fault: s.Fault(), Inject: s.Inject.Began, Heal: end, Error: s.Inject.Error}
		if s.Heal != nil {
			f.Heal, f.Healed = max(s.Heal.At, f.Inject), true
			if s.Heal.Error != "" && f.Error == "" {
				f.Error = "heal: " + s.Heal.Error
			}
		}
		faults = append(faults, f)
	}
	slices.SortStableFunc(faults, func(a, b FaultWindow) int { return cmp.Compare(a.Inject, b.Inject) })
	return faults, unmatched, failed
}

// bucketing picks the bucket width (whole seconds, at most maxBuckets
// buckets) and the timeline's start, aligned to it when that cannot
// overflow.
func bucketing(first, end int64) (time.Duration, int64) {
	span := uint64(end - first) // end >= first; the difference fits in uint64
	k := span/uint64(maxBuckets*int64(time.Second)) + 1
	for {
		w := int64(k) * int64(time.Second)
		start := first
		if first >= 0 {
			start = first - first%w
		}
		if uint64(end-start)/uint64(w) < maxBuckets {
			return time.Duration(w), start
		}
		k++
	}
}

// rank is the nearest-rank percentile q of sorted values.
func rank(sorted []int64, q float64) int64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// satAdd adds without overflowing.
func satAdd(a, b int64) int64 {
	if s := a + b; (s > a) == (b > 0) {
		return s
	}
	if b > 0 {
		return 1<<63 - 1
	}
	return -1 << 63
}

// Summary is the report in one line.
func (r Report) Summary() string {
	s := fmt.Sprintf("throughput %.0f ok/s median (%d ok, %d failed, %d unknown, %d never completed)", r.MedianOKRate, r.OK, r.Fail, r.Info, r.Open)
	if len(r.Faults) == 0 {
		return s + "; no faults"
	}
	worst := r.Faults[0]
	var rec []float64
	for _, f := range r.Faults {
		if f.Unavailable() > worst.Unavailable() {
			worst = f
		}
		if f.Recovered {
			rec = append(rec, f.Recovery.Seconds())
		}
	}
	faults := fmt.Sprintf("%d faults", len(r.Faults))
	if len(r.Faults) == 1 {
		faults = "1 fault"
	}
	s += fmt.Sprintf("; %s: worst unavailability %s (%s)", faults, secs(int64(worst.Unavailable())), worst.Fault)
	if len(rec) > 0 {
		s += fmt.Sprintf(", recovery median %.1f s", median(rec))
	}
	// Of the faults not recovered, only those with something to measure
	// are a finding; a fault healed as the traffic stopped is not.
	var notBack []FaultWindow
	neverHealed := 0
	for _, f := range r.Faults {
		switch {
		case f.Recovered:
		case !f.Unmeasured:
			notBack = append(notBack, f)
		case !f.Healed:
			neverHealed++
		}
	}
	switch {
	case len(notBack) == 1:
		s += fmt.Sprintf(", 1 not recovered (%s: %s)", notBack[0].Fault, notBack[0].NotRecovered)
	case len(notBack) > 1:
		s += fmt.Sprintf(", %d not recovered (ok rate still under %s when the look after their heal ended; per fault below)",
			len(notBack), r.recoveryBar())
	}
	if neverHealed > 0 {
		s += fmt.Sprintf(", %d never healed", neverHealed)
	}
	if r.BaselineOKRate == 0 {
		s += ", recovery not measured (no ok rate before the first fault to compare with)"
	}
	return s
}

// recoveryBar is the ok rate a fault's recovery waits for, for people.
func (r Report) recoveryBar() string {
	rate := fmt.Sprintf("%.1f", r.BaselineOKRate)
	if r.BaselineOKRate == math.Trunc(r.BaselineOKRate) {
		rate = fmt.Sprintf("%.0f", r.BaselineOKRate)
	}
	return fmt.Sprintf("%.0f %% of the %s ok/s before the first fault", recoveredShare*100, rate)
}

// Describe is the fault in one line.
func (f FaultWindow) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: injected t=%s, ", f.Fault, secs(f.Inject))
	if f.Healed {
		fmt.Fprintf(&b, "healed t=%s", secs(f.Heal))
	} else {
		b.WriteString("never healed")
	}
	fmt.Fprintf(&b, "; longest without an ok op %s (t=%s..%s)", secs(int64(f.Unavailable())), secs(f.UnavailableFrom), secs(f.UnavailableTo))
	switch {
	case f.Recovered:
		fmt.Fprintf(&b, "; recovered %s after the heal", secs(int64(f.Recovery)))
	case f.Unmeasured:
		b.WriteString("; recovery not measured: " + f.NotRecovered)
	default:
		b.WriteString("; not recovered: " + f.NotRecovered)
	}
	if f.Error != "" {
		b.WriteString("; error: " + f.Error)
	}
	return b.String()
}

// secs formats nanoseconds as seconds for people.
func secs(ns int64) string {
	return fmt.Sprintf("%.2f s", float64(ns)/1e9)
}

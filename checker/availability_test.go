package checker

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/history"
)

const sec = int64(time.Second)

// steady adds ok reads on process p, one invoked every `every` ns in
// [from, to), each taking took ns.
func (b *hb) steady(from, to, every, took int64, p int) *hb {
	for t := from; t < to; t += every {
		b.inv(t, p, "read", ra, "").ok(t+took, p, `{"value":null}`)
	}
	return b
}

// nem adds a nemesis entry taking effect at t.
func (b *hb) nem(t int64, fault, action string, began int64) *hb {
	v, _ := json.Marshal(map[string]any{"action": action, "began": began})
	return b.add(history.Op{Time: t, Kind: history.Nemesis, Process: -1, F: fault, Value: v})
}

func TestAvailabilityVerdict(t *testing.T) {
	cases := []struct {
		name string
		h    *hb
		want Verdict
		ev   string // a substring of the summary or of some evidence line
	}{
		{"empty", &hb{}, Unknown, "no client operations"},
		{"only phases and faults", (&hb{}).add(history.Op{Kind: history.Phase, Process: -1, F: "main"}).nem(5, "kill:oldest", "inject", 4), Unknown, "no client operations"},
		{"single op", (&hb{}).inv(1, 0, "read", ra, "").ok(2, 0, "{}"), Valid, "(1 ok, 0 failed, 0 unknown, 0 never completed); no faults"},
		{"crashed mid-operation", (&hb{}).inv(1, 0, "read", ra, ""), Valid, "1 never completed"},
		{"failed and unknown", (&hb{}).inv(1, 0, "read", ra, "").fail(2, 0).inv(3, 0, "read", ra, "").info(4, 0), Valid, "0 ok, 1 failed, 1 unknown"},
		{"heal without inject", (&hb{}).inv(1, 0, "read", ra, "").ok(2, 0, "{}").nem(3, "kill:oldest", "heal", 2), Valid, "1 heals had no inject"},
		{"unreadable nemesis value", (&hb{}).inv(1, 0, "read", ra, "").ok(2, 0, "{}").add(history.Op{Time: 3, Kind: history.Nemesis, Process: -1, F: "x", Value: json.RawMessage(`[1]`)}), Valid, "no faults"},
		{"orphan completion", (&hb{}).ok(1, 3, "{}").inv(2, 0, "read", ra, "").ok(3, 0, "{}"), Valid, "1 completions had no open invocation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := Availability{}.Check(context.Background(), c.h.file(), ReadInputs(dir))
			if r.Verdict != c.want || r.Checker != "availability" || (c.ev != "" && !strings.Contains(r.Summary, c.ev) && !contains(r.Evidence, c.ev)) {
				t.Fatalf("got %s: %s\n%s\nwant %s with %q", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"), c.want, c.ev)
			}
			_, err := os.Stat(filepath.Join(dir, AvailabilityFile))
			if wrote := err == nil; wrote != (r.Verdict == Valid) || wrote != (len(r.Files) == 1) {
				t.Fatalf("files %v, stat %v", r.Files, err)
			}
		})
	}
}

func TestAnalyzeBuckets(t *testing.T) {
	// Second 0: ten ok ops taking 1..10 ms, one fail; second 1: an info;
	// second 2: one ok of 500 ms.
	b := &hb{}
	for i := range int64(10) {
		b.inv(i*50e6, 0, "read", ra, "").ok(i*50e6+(i+1)*1e6, 0, "{}")
	}
	b.inv(600e6, 1, "read", ra, "").fail(700e6, 1).inv(1.2e9, 1, "read", ra, "").info(1.3e9, 1).inv(1.6e9, 1, "read", ra, "").ok(2.1e9, 1, "{}")
	r := Analyze(b.file())
	ms := time.Millisecond
	want := []Bucket{
		{Start: 0, End: sec, OK: 10, Fail: 1, P50: 5 * ms, P99: 10 * ms, Max: 10 * ms},
		{Start: sec, End: 2 * sec, Info: 1},
		{Start: 2 * sec, End: 3 * sec, OK: 1, P50: 500 * ms, P99: 500 * ms, Max: 500 * ms},
	}
	if r.BucketWidth != time.Second || len(r.Buckets) != len(want) || r.First != 0 || r.End != 2.1e9 {
		t.Fatalf("%+v", r)
	}
	for i := range want {
		if r.Buckets[i] != want[i] {
			t.Errorf("bucket %d: %+v, want %+v", i, r.Buckets[i], want[i])
		}
	}
	// Whole buckets: [0,1) and [1,2): rates 10 and 0.
	if r.OK != 11 || r.Fail != 1 || r.Info != 1 || r.MedianOKRate != 5 {
		t.Fatalf("%+v", r)
	}
}

func TestAnalyzeBucketWidth(t *testing.T) {
	for _, c := range []struct {
		first, end int64
		width      time.Duration
	}{
		{0, 0, time.Second},
		{0, 599*sec + sec/2, time.Second},
		{0, 600 * sec, 2 * time.Second},
		{0, 2000 * sec, 4 * time.Second},
		{1999 * sec / 2, 1999 * sec / 2, time.Second},
		{-5 * sec, 5 * sec, time.Second},
		{math.MinInt64, math.MaxInt64, 30744574 * time.Second}, // 2^64 ns / 600, rounded up to a second
	} {
		w, start := bucketing(c.first, c.end)
		n := uint64(c.end-start)/uint64(w) + 1
		if w < c.width || w > c.width+time.Second || n > maxBuckets || start > c.first || c.first-start >= int64(w) {
			t.Errorf("[%d, %d]: width %v (want %v), start %d, %d buckets", c.first, c.end, w, c.width, start, n)
		}
	}
}

func TestAnalyzeFaults(t *testing.T) {
	const ms = int64(time.Millisecond)
	cases := []struct {
		name string
		h    func() *hb
		want []FaultWindow
	}{
		{"outage past the heal", func() *hb {
			// 10 ok/s; a kill from 10 s (began 9.9 s) to 20 s; ok ops stop
			// after 10.4 s and resume at 23 s.
			return (&hb{}).steady(0, 10.5e9, 100*ms, ms, 0).nem(10*sec, "kill:oldest", "inject", 9.9e9).
				nem(20*sec, "kill:oldest", "heal", 19.5e9).steady(23*sec-ms, 40*sec, 100*ms, ms, 0)
		}, []FaultWindow{{Fault: "kill:oldest", Inject: 9.9e9, Heal: 20 * sec, Healed: true, UnavailableFrom: 10.401e9, UnavailableTo: 23 * sec, Recovery: 3 * time.Second, Recovered: true}}},
		{"no effect", func() *hb {
			return (&hb{}).steady(0, 40*sec, 100*ms, ms, 0).nem(10*sec, "clock:bump", "inject", 10*sec).nem(20*sec, "clock:bump", "heal", 20*sec)
		}, []FaultWindow{{Fault: "clock:bump", Inject: 10 * sec, Heal: 20 * sec, Healed: true, UnavailableFrom: 9.901e9 + 100*ms, UnavailableTo: 10.101e9, Recovered: true}}},
		{"never healed", func() *hb {
			return (&hb{}).steady(0, 10*sec, 100*ms, ms, 0).nem(10*sec, "pause:random", "inject", 10*sec).steady(10*sec, 15*sec, 5*sec, 2*sec, 1)
		}, []FaultWindow{{Fault: "pause:random", Inject: 10 * sec, Heal: 12 * sec, UnavailableFrom: 10 * sec, UnavailableTo: 12 * sec, NotRecovered: "never healed", Unmeasured: true}}},
		{"not recovered before the next fault", func() *hb {
			return (&hb{}).steady(0, 10*sec, 100*ms, ms, 0).
				nem(10*sec, "partition:halves", "inject", 10*sec).nem(12*sec, "partition:halves", "heal", 12*sec).
				nem(15*sec, "kill:oldest", "inject", 15*sec).nem(17*sec, "kill:oldest", "heal", 17*sec).
				steady(30*sec, 31*sec, 100*ms, 0, 0)
		}, []FaultWindow{
			{Fault: "partition:halves", Inject: 10 * sec, Heal: 12 * sec, Healed: true, UnavailableFrom: 10 * sec, UnavailableTo: 15 * sec, NotRecovered: "ok rate still under 50 % of the 10 ok/s before the first fault when the next fault began, 3.00 s after the heal"},
			{Fault: "kill:oldest", Inject: 15 * sec, Heal: 17 * sec, Healed: true, UnavailableFrom: 15 * sec, UnavailableTo: 30 * sec, Recovery: 13 * time.Second, Recovered: true},
		}},
		{"another fault still in effect at the heal", func() *hb {
			return (&hb{}).steady(0, 10*sec, 100*ms, ms, 0).
				nem(10*sec, "partition:halves", "inject", 10*sec).nem(11*sec, "kill:oldest", "inject", 11*sec).
				nem(12*sec, "partition:halves", "heal", 12*sec).nem(30*sec, "kill:oldest", "heal", 30*sec).
				steady(32*sec, 40*sec, 100*ms, 0, 0)
		}, []FaultWindow{
			{Fault: "partition:halves", Inject: 10 * sec, Heal: 12 * sec, Healed: true, UnavailableFrom: 10 * sec, UnavailableTo: 30 * sec, NotRecovered: "ok rate still under 50 % of the 10 ok/s before the first fault when kill:oldest (in effect at this heal) was healed, 18.00 s after the heal"},
			{Fault: "kill:oldest", Inject: 11 * sec, Heal: 30 * sec, Healed: true, UnavailableFrom: 11 * sec, UnavailableTo: 32 * sec, Recovery: 2 * time.Second, Recovered: true},
		}},
		{"no baseline", func() *hb {
			return (&hb{}).nem(sec/2, "kill:oldest", "inject", sec/2).steady(sec, 5*sec, 100*ms, ms, 0).nem(2*sec, "kill:oldest", "heal", 2*sec)
		}, []FaultWindow{{Fault: "kill:oldest", Inject: sec / 2, Heal: 2 * sec, Healed: true, UnavailableFrom: sec / 2, UnavailableTo: 1.001e9, NotRecovered: "no ok rate before the first fault to compare with", Unmeasured: true}}},
		{"overlapping joins: each heal closes its own node's", func() *hb {
			on := func(b *hb, t int64, action, node string) *hb {
				v, _ := json.Marshal(map[string]any{"action": action, "began": t, "targets": map[string]any{"targets": []string{node}, "how": "new"}})
				return b.add(history.Op{Time: t, Kind: history.Nemesis, Process: -1, F: "member:join", Value: v})
			}
			b := (&hb{}).steady(0, 40*sec, 100*ms, ms, 0)
			return on(on(on(on(b, 10*sec, "inject", "n4"), 12*sec, "inject", "n5"), 20*sec, "heal", "n5"), 25*sec, "heal", "n4")
		}, []FaultWindow{
			// The join of n5 overlaps n4's and ends before it: n4's
			// recovery is measured after its heal all the same.
			{Fault: "member:join", Inject: 10 * sec, Heal: 25 * sec, Healed: true, UnavailableFrom: 9.901e9 + 100*ms, UnavailableTo: 10.101e9, Recovered: true},
			{Fault: "member:join", Inject: 12 * sec, Heal: 20 * sec, Healed: true, UnavailableFrom: 11.901e9 + 100*ms, UnavailableTo: 12.101e9, Recovered: true},
		}},
		{"failed inject, began after the entry", func() *hb {
			b := (&hb{}).steady(0, 5*sec, 100*ms, ms, 0).nem(2*sec, "member:join", "inject", 3*sec)
			b.ops[len(b.ops)-1].Error = "no spare node"
			return b.nem(3*sec, "member:join", "heal", 3*sec)
		}, []FaultWindow{{Fault: "member:join", Inject: 2 * sec, Heal: 3 * sec, Healed: true, Error: "no spare node", UnavailableFrom: 1.901e9 + 100*ms, UnavailableTo: 2.101e9, Recovered: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Analyze(c.h().file())
			if r.UnmatchedHeals != 0 {
				t.Errorf("%d heals unmatched", r.UnmatchedHeals)
			}
			if len(r.Faults) != len(c.want) {
				t.Fatalf("faults %+v, want %+v", r.Faults, c.want)
			}
			for i := range c.want {
				if r.Faults[i] != c.want[i] {
					t.Errorf("fault %d:\n got %+v\nwant %+v", i, r.Faults[i], c.want[i])
				}
			}
		})
	}
}

func TestAvailabilitySummary(t *testing.T) {
	const ms = int64(time.Millisecond)
	h := (&hb{}).steady(0, 10.5e9, 100*ms, ms, 0).nem(10*sec, "kill:oldest", "inject", 9.9e9).
		nem(20*sec, "kill:oldest", "heal", 19.5e9).steady(23*sec-ms, 40*sec, 100*ms, ms, 0).
		nem(30*sec, "clock:bump", "inject", 30*sec).nem(35*sec, "clock:bump", "heal", 35*sec).file()
	r := Availability{}.Check(context.Background(), h, Inputs{})
	want := "throughput 10 ok/s median (276 ok, 0 failed, 0 unknown, 0 never completed); 2 faults: worst unavailability 12.60 s (kill:oldest), recovery median 1.5 s"
	if r.Verdict != Valid || r.Summary != want || len(r.Files) != 0 || len(r.Evidence) != 2 ||
		r.Evidence[0] != "kill:oldest: injected t=9.90 s, healed t=20.00 s; longest without an ok op 12.60 s (t=10.40 s..23.00 s); recovered 3.00 s after the heal" {
		t.Fatalf("%s\n%s", r.Summary, strings.Join(r.Evidence, "\n"))
	}
}

// refused adds refused reads on process p, one invoked every `every` ns
// in [from, to), each failing after a millisecond.
func (b *hb) refused(from, to, every int64, p int) *hb {
	for t := from; t < to; t += every {
		b.inv(t, p, "read", ra, "").fail(t+int64(time.Millisecond), p)
	}
	return b
}

// Whether a fault recovered is said only where there was traffic to see
// it: a fault healed as the traffic stopped (the last one, healed when the
// main phase ends) is no finding, in its line or in the summary; one
// after whose heal the ok rate stayed low says what it was measured
// against and for how long.
func TestAvailabilityRecoveryLook(t *testing.T) {
	const ms = int64(time.Millisecond)
	// A run's shape: 10 ok/s for 20 s, then a kill; refusals until the
	// main phase's traffic stops at 30 s; the recovery phase at 31 s and a
	// final read at 32 s.
	run := func(heal int64) *history.File {
		b := (&hb{}).add(history.Op{Time: 0, Kind: history.Phase, Process: -1, F: "main"}).
			steady(0, 20*sec, 100*ms, ms, 0).nem(20*sec, "kill:oldest", "inject", 20*sec).refused(20*sec, 30*sec, 100*ms, 1).
			nem(heal, "kill:oldest", "heal", heal-10*ms)
		b.add(history.Op{Time: 31 * sec, Kind: history.Phase, Process: -1, F: "recovery"})
		return b.steady(32*sec, 32*sec+ms, sec, ms, 2).file()
	}
	cases := []struct {
		name       string
		heal       int64
		line       string // the fault's evidence line ends so
		unmeasured bool
		summary    string // the summary ends so
	}{
		{"healed as the traffic stopped", 30*sec + 500*ms,
			"; recovery not measured: the traffic stopped no later than the heal: nothing to measure", true,
			"; 1 fault: worst unavailability 11.00 s (kill:oldest)"},
		{"healed 0.3 s before the traffic stopped", 29*sec + 600*ms,
			"; recovery not measured: the traffic stopped 0.30 s after the heal, less than one 1.00 s bucket to measure", true,
			"; 1 fault: worst unavailability 11.00 s (kill:oldest)"},
		{"healed 5 s before the traffic stopped, still down", 25 * sec,
			"; not recovered: ok rate still under 50 % of the 10 ok/s before the first fault when the traffic stopped, 4.90 s after the heal", false,
			"; 1 fault: worst unavailability 11.00 s (kill:oldest), 1 not recovered (kill:oldest: ok rate still under 50 % of the 10 ok/s before the first fault when the traffic stopped, 4.90 s after the heal)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := run(c.heal)
			f := Analyze(h).Faults
			r := Availability{}.Check(context.Background(), h, Inputs{})
			if len(f) != 1 || f[0].Recovered || f[0].Unmeasured != c.unmeasured || !strings.HasSuffix(f[0].Describe(), c.line) {
				t.Errorf("faults %+v\n%s\nwant it to end %q", f, f[0].Describe(), c.line)
			}
			if !strings.HasSuffix(r.Summary, c.summary) || !contains(r.Evidence, c.line) {
				t.Errorf("summary %q, want it to end %q\n%s", r.Summary, c.summary, strings.Join(r.Evidence, "\n"))
			}
		})
	}
}

func TestAvailabilityTruncated(t *testing.T) {
	s := `{"format":"shardtest-history","version":1,"test":"t"}
{"index":0,"time":1,"kind":"invoke","process":0,"f":"read","entity":"register/a"}
{"index":1,"time":2,"kind":"ok","pro`
	h, err := history.Read(strings.NewReader(s))
	if err != nil || !h.Truncated {
		t.Fatal(err, h)
	}
	r := Availability{}.Check(context.Background(), h, Inputs{})
	if r.Verdict != Valid || !contains(r.Evidence, "cut off") || !strings.Contains(r.Summary, "1 never completed") {
		t.Fatalf("%+v", r)
	}
}

func TestAvailabilitySimulated(t *testing.T) {
	o := runOptions{seed: 2, clients: 8, entities: 20, ops: 40000, step: 1e6, faultEvery: 5e9, faultLen: 2e9}
	h := simRun(o)
	r := Analyze(h)
	if len(r.Faults) < 5 || r.BaselineOKRate == 0 {
		t.Fatalf("%d faults, baseline %v", len(r.Faults), r.BaselineOKRate)
	}
	for _, f := range r.Faults {
		// No op completes ok while a fault is in; they all do soon after.
		if f.Unavailable() < time.Duration(o.faultLen) || f.Unavailable() > time.Duration(o.faultLen+2e9) || !f.Recovered || f.Recovery > time.Second {
			t.Errorf("%s", f.Describe())
		}
	}
}

// The chart is well-formed, self-contained XML that names the faults
// (escaped) and stays small for a long run with many faults.
func TestAvailabilitySVG(t *testing.T) {
	const ms = int64(time.Millisecond)
	b := (&hb{}).add(history.Op{Time: 0, Kind: history.Phase, Process: -1, F: "main"}).steady(0, 3600*sec, 200*ms, 5*ms, 0)
	for i := range int64(700) {
		name := "kill:oldest"
		if i == 3 {
			name = `odd<&>"name` + "\x01\xff"
		}
		b.nem(i*5*sec+sec, name, "inject", i*5*sec+sec).nem(i*5*sec+2*sec, name, "heal", i*5*sec+2*sec)
	}
	dir := t.TempDir()
	r := Availability{}.Check(context.Background(), b.file(), ReadInputs(dir))
	if r.Verdict != Valid || len(r.Files) != 1 || r.Files[0] != AvailabilityFile {
		t.Fatalf("%+v", r)
	}
	svg, err := os.ReadFile(filepath.Join(dir, AvailabilityFile))
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "script", "image", "use", "foreignObject", "style", "a":
				t.Fatalf("element %s in the chart", se.Name.Local)
			}
			for _, a := range se.Attr {
				if a.Name.Local == "href" {
					t.Fatalf("link in the chart: %v", a)
				}
			}
		}
	}
	s := string(svg)
	for _, want := range []string{"kill:oldest", "odd&lt;&amp;&gt;", "(100 more faults not drawn)", "time since the run started (s)", "ok latency (ms)", ">main<"} {
		if !strings.Contains(s, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if len(svg) > 400<<10 {
		t.Errorf("chart of %d bytes", len(svg))
	}
}

// Odd histories never make either checker panic, and Analyze keeps its
// bounds.
func TestOddHistories(t *testing.T) {
	kinds := []string{history.Invoke, history.OK, history.Fail, history.Info, history.Nemesis, history.Phase, "bogus"}
	times := []int64{0, 1, -1, 5, 1e9, -1e12, math.MaxInt64, math.MinInt64, 3e12}
	values := []string{"", `{"action":"inject","began":-5}`, `{"action":"heal"}`, `{"action":"inject","began":9223372036854775807}`, `nonsense`, `{"id":1}`}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 4))
		b := &hb{}
		for range rng.IntN(30) {
			op := history.Op{Time: times[rng.IntN(len(times))], Kind: kinds[rng.IntN(len(kinds))], Process: rng.IntN(3) - 1, F: []string{"read", "next-id", "kill:oldest", "tell"}[rng.IntN(4)]}
			if rng.IntN(2) == 0 {
				op.Entity = ra
			}
			if v := values[rng.IntN(len(values))]; v != "" {
				op.Value = json.RawMessage(v)
			}
			if rng.IntN(3) > 0 {
				op.Reply = &history.Reply{EntityIncarnation: []string{"", "a", "b"}[rng.IntN(3)], Singleton: []string{"", "x#1", "y"}[rng.IntN(3)]}
			}
			b.add(op)
		}
		h := b.file()
		r := Analyze(h)
		if len(r.Buckets) > maxBuckets {
			t.Fatalf("seed %d: %d buckets", seed, len(r.Buckets))
		}
		_ = RenderSVG(r, "t")
		for _, c := range []Checker{SingleInstance{}, Availability{}} {
			if res := c.Check(context.Background(), h, Inputs{Out: t.TempDir()}); res.Verdict == "" || res.Summary == "" {
				t.Fatalf("seed %d: %s: %+v", seed, c.Name(), res)
			}
		}
	}
}

// A fault in a history with no client operation at all: its recovery is
// not measured, and no finding.
func TestAvailabilityFaultWithoutTraffic(t *testing.T) {
	h := (&hb{}).nem(10*sec, "kill:oldest", "inject", 10*sec).nem(20*sec, "kill:oldest", "heal", 20*sec).file()
	f := Analyze(h).Faults
	if len(f) != 1 || f[0].Recovered || !f[0].Unmeasured {
		t.Fatalf("%+v", f)
	}
	if s := Analyze(h).Summary(); strings.Contains(s, "not recovered") {
		t.Errorf("summary %q", s)
	}
}

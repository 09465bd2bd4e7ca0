package checker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/history"
)

const ra = "register/a"

func TestLinearizable(t *testing.T) {
	w := func(v int) string { return `{"value":` + itoa(v) + `}` }
	cases := []struct {
		name string
		h    *hb
		want Verdict
		ev   string // a substring of some evidence line or the summary
	}{
		{"empty", &hb{}, Unknown, "nothing to check"},
		{"single read of never written", (&hb{}).inv(1, 0, "read", ra, "").ok(2, 0, `{"value":null}`), Valid, "all linearizable"},
		{"single read of a value never written", (&hb{}).inv(1, 0, "read", ra, "").ok(2, 0, `{"value":3}`), Invalid, "register/a: not linearizable"},
		{"single unknown write", (&hb{}).inv(1, 0, "write", ra, w(1)).info(2, 0), Valid, ""},
		{"single open read", (&hb{}).inv(1, 0, "read", ra, ""), Unknown, "nothing to check"},
		{"sequential", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "read", ra, "").ok(4, 0, w(1)).
			inv(5, 1, "cas", ra, `{"expect":1,"value":2}`).ok(6, 1, `{"ok":true,"value":2}`).
			inv(7, 1, "cas", ra, `{"expect":1,"value":3}`).ok(8, 1, `{"ok":false,"value":2}`).
			inv(9, 0, "read", ra, "").ok(10, 0, w(2)), Valid, ""},
		{"cas from null", (&hb{}).
			inv(1, 0, "cas", ra, `{"expect":null,"value":5}`).ok(2, 0, `{"ok":true,"value":5}`).
			inv(3, 0, "read", ra, "").ok(4, 0, w(5)), Valid, ""},
		{"cas succeeded on the wrong value", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "cas", ra, `{"expect":7,"value":5}`).ok(4, 0, `{"ok":true,"value":5}`), Invalid, ""},
		{"cas failed reporting a wrong value", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "cas", ra, `{"expect":7,"value":5}`).ok(4, 0, `{"ok":false,"value":2}`), Invalid, ""},
		{"stale read", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).ok(4, 0, w(2)).
			inv(5, 1, "read", ra, "").ok(6, 1, w(1)), Invalid, "leaves the register at"},
		{"concurrent read may see either", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).
			inv(4, 1, "read", ra, "").ok(5, 1, w(1)).
			inv(5, 2, "read", ra, "").ok(6, 2, w(2)).
			ok(7, 0, w(2)), Valid, ""},
		{"read sees the concurrent write and then an older value", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).
			inv(4, 1, "read", ra, "").ok(5, 1, w(2)).
			inv(6, 2, "read", ra, "").ok(7, 2, w(1)).
			ok(8, 0, w(2)), Invalid, ""},
		// Unknown outcomes: an info write may or may not have happened.
		{"info write seen", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).info(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(2)), Valid, ""},
		{"info write not seen", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).info(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(1)), Valid, ""},
		{"info write seen late", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).info(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(1)).
			inv(7, 1, "read", ra, "").ok(8, 1, w(2)), Valid, ""},
		{"info write seen then unseen", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).info(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(2)).
			inv(7, 1, "read", ra, "").ok(8, 1, w(1)), Invalid, ""},
		{"info cas either way", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "cas", ra, `{"expect":1,"value":2}`).info(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(1)).
			inv(7, 1, "read", ra, "").ok(8, 1, w(2)), Valid, ""},
		{"info cas cannot set a value it did not expect", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "cas", ra, `{"expect":9,"value":2}`).info(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(2)), Invalid, ""},
		{"unobserved info write dropped", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).info(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(1)), Valid, "1 unknown writes or cas dropped"},
		{"unknown write observed by a failed cas", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).info(4, 0).
			inv(5, 1, "cas", ra, `{"expect":1,"value":3}`).ok(6, 1, `{"ok":false,"value":2}`).
			inv(7, 1, "read", ra, "").ok(8, 1, w(1)), Invalid, ""},
		{"failed cas without its value keeps unknown writes", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).info(4, 0).
			inv(5, 1, "cas", ra, `{"expect":1,"value":3}`).ok(6, 1, `{"ok":false}`), Valid, "1 with unknown outcomes; dropped 0 failed and 0 unknown reads): all"},
		{"info read ignored", (&hb{}).
			inv(1, 0, "read", ra, "").info(2, 0).
			inv(3, 1, "write", ra, w(1)).ok(4, 1, w(1)), Valid, "1 unknown reads"},
		// Crashed mid-operation: an invocation with no completion.
		{"crashed write seen", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 1, "read", ra, "").ok(4, 1, w(1)).
			inv(5, 0, "write", ra, w(2)).
			inv(6, 1, "read", ra, "").ok(7, 1, w(2)), Valid, ""},
		{"crashed write not seen", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(5, 0, "write", ra, w(2)).
			inv(6, 1, "read", ra, "").ok(7, 1, w(1)), Valid, ""},
		// Failed ops did not happen.
		{"failed write not seen", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).fail(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(1)), Valid, "dropped 1 failed"},
		{"failed write seen", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "write", ra, w(2)).fail(4, 0).
			inv(5, 1, "read", ra, "").ok(6, 1, w(2)), Invalid, ""},
		{"entities are independent", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "read", "register/b", "").ok(4, 0, `{"value":null}`), Valid, "2 register entities"},
		{"other entity types skipped", (&hb{}).
			inv(1, 0, "write", ra, w(1)).ok(2, 0, w(1)).
			inv(3, 0, "append", "log/x", `{"value":1}`).ok(4, 0, `{}`).
			inv(5, 0, "next-id", "", "").ok(6, 0, `{"id":1}`), Valid, "skipped ops not on registers ((no entity): 1, log: 1)"},
		{"only other entity types", (&hb{}).
			inv(3, 0, "append", "log/x", `{"value":1}`).ok(4, 0, `{}`), Unknown, "no register operations"},
		{"unreadable arguments", (&hb{}).
			inv(1, 0, "write", ra, `{"value":"x"}`).ok(2, 0, w(1)), Unknown, "unreadable arguments"},
		{"unknown operation", (&hb{}).
			inv(1, 0, "frob", ra, `{}`).ok(2, 0, `{}`), Unknown, "unknown register operation"},
		{"unreadable result", (&hb{}).
			inv(1, 0, "read", ra, "").ok(2, 0, `"zz"`), Unknown, "unreadable results"},
		{"unreadable result still invalid", (&hb{}).
			inv(1, 0, "read", ra, "").ok(2, 0, `"zz"`).
			inv(3, 0, "read", ra, "").ok(4, 0, w(4)), Invalid, ""},
		{"completion without invocation", (&hb{}).
			add(history.Op{Time: 1, Kind: history.OK, Process: 4, F: "read", Entity: ra}).
			inv(3, 0, "read", ra, "").ok(4, 0, `{"value":null}`), Valid, "no open invocation"},
		{"nemesis and phases", (&hb{}).
			add(history.Op{Time: 1, Kind: history.Phase, Process: -1, F: "main"}).
			inv(3, 0, "read", ra, "").
			add(history.Op{Time: 4, Kind: history.Nemesis, Process: -1, F: "partition", Value: json.RawMessage(`["n1"]`)}).
			ok(5, 0, `{"value":null}`), Valid, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Linearizable{}.Check(context.Background(), c.h.file(), Inputs{Out: t.TempDir()})
			if r.Verdict != c.want || r.Checker != "linearizable" || (c.ev != "" && !strings.Contains(r.Summary, c.ev) && !contains(r.Evidence, c.ev)) {
				t.Fatalf("got %s: %s\n%s\nwant %s with %q", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"), c.want, c.ev)
			}
		})
	}
}

func itoa(v int) string { b, _ := json.Marshal(v); return string(b) }

// An invalid entity gets an explanation and a visualization.
func TestLinearizableHTML(t *testing.T) {
	h := (&hb{}).
		inv(1, 0, "write", ra, `{"value":1}`).ok(2, 0, `{"value":1}`).
		inv(3, 0, "write", ra, `{"value":2}`).ok(4, 0, `{"value":2}`).
		inv(5, 1, "read", ra, "").ok(6, 1, `{"value":1}`).
		inv(7, 1, "read", "register/ok", "").ok(8, 1, `{"value":null}`).file()
	dir := t.TempDir()
	r := Linearizable{}.Check(context.Background(), h, ReadInputs(dir))
	if r.Verdict != Invalid || len(r.Files) != 1 || r.Files[0] != "linearizability/register_a.html" {
		t.Fatalf("%+v", r)
	}
	b, err := os.ReadFile(filepath.Join(dir, r.Files[0]))
	if err != nil || !strings.Contains(string(b), "<html") || !strings.Contains(string(b), "read()") {
		t.Fatalf("visualization: %v (%d bytes)", err, len(b))
	}
	if !contains(r.Evidence, "#4/#5, process 1") || !contains(r.Evidence, "leaves the register at 2") || !strings.Contains(r.Summary, "1 of 2 register entities") {
		t.Fatalf("evidence:\n%s\n%s", r.Summary, strings.Join(r.Evidence, "\n"))
	}
	if s := r.Smallest; s == nil || s.What != ra || s.Ops != 3 || s.File != r.Files[0] {
		t.Errorf("smallest counterexample %+v, want %s, 3 ops, its visualization", s, ra)
	}
	// No output directory: no file, still invalid.
	if r := (Linearizable{}).Check(context.Background(), h, Inputs{}); r.Verdict != Invalid || len(r.Files) != 0 {
		t.Fatalf("%+v", r)
	}
}

// A history cut off mid-line reads without the last line: the operation it
// completed counts as unknown.
func TestLinearizableTruncated(t *testing.T) {
	s := `{"format":"shardtest-history","version":1,"test":"t"}
{"index":0,"time":1,"kind":"invoke","process":0,"f":"write","entity":"register/a","value":{"value":1}}
{"index":1,"time":2,"kind":"invoke","process":1,"f":"read","entity":"register/a"}
{"index":2,"time":3,"kind":"ok","process":1,"f":"read","entity":"register/a","value":{"value":1}}
{"index":3,"time":4,"kind":"ok","process":0,"f":"wri`
	h, err := history.Read(strings.NewReader(s))
	if err != nil || !h.Truncated {
		t.Fatal(err, h)
	}
	r := Linearizable{}.Check(context.Background(), h, Inputs{})
	if r.Verdict != Valid || !contains(r.Evidence, "cut off") {
		t.Fatalf("%+v", r)
	}
}

// Simulated correct registers are linearizable, with unknown and failed
// outcomes and ops left open; corrupting one read makes them invalid.
func TestLinearizableSimulated(t *testing.T) {
	for seed := range uint64(8) {
		o := simOptions{seed: seed, clients: 6, entities: 5, ops: 600, infoRate: 0.03, failRate: 0.05, leaveOpen: seed%2 == 0}
		h := simRegister(o)
		r := Linearizable{}.Check(context.Background(), h, Inputs{})
		if r.Verdict != Valid {
			t.Fatalf("seed %d: %s: %s\n%s", seed, r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
		}
		// A read of a value nobody wrote.
		for i := len(h.Ops) - 1; i >= 0; i-- {
			if op := h.Ops[i]; op.Kind == history.OK && op.F == "read" {
				h.Ops[i].Value = json.RawMessage(`{"value":-42}`)
				break
			}
		}
		r = Linearizable{}.Check(context.Background(), h, Inputs{})
		if r.Verdict != Invalid {
			t.Fatalf("seed %d corrupted: %s: %s", seed, r.Verdict, r.Summary)
		}
	}
}

// Too many ops in flight on one entity: unknown, without trying.
func TestLinearizableConcurrencyBound(t *testing.T) {
	b := &hb{}
	b.inv(0, 100, "write", ra, `{"value":0}`).ok(1, 100, `{"value":0}`)
	for p := range 13 { // all write 7, which is read: none can be dropped
		b.inv(int64(10+p), p, "write", ra, `{"value":7}`).info(int64(30+p), p)
	}
	b.inv(50, 100, "read", ra, "").ok(51, 100, `{"value":7}`)
	b.inv(50, 101, "read", "register/b", "").ok(51, 101, `{"value":null}`)
	r := Linearizable{}.Check(context.Background(), b.file(), Inputs{})
	if r.Verdict != Unknown || !contains(r.Evidence, "register/a: not checked: 14 ops in flight at t=50 (13 of them with unknown outcomes") || !strings.Contains(r.Summary, "1 too concurrent") {
		t.Fatalf("%s: %s\n%s", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
	}
	// Raising the bound checks it.
	if r := (Linearizable{MaxConcurrency: 14}).Check(context.Background(), b.file(), Inputs{}); r.Verdict != Valid {
		t.Fatalf("%s: %s", r.Verdict, r.Summary)
	}
	if r := (Linearizable{MaxOpsPerEntity: 10}).Check(context.Background(), b.file(), Inputs{}); r.Verdict != Unknown || !strings.Contains(r.Summary, "too many ops") {
		t.Fatalf("%s: %s", r.Verdict, r.Summary)
	}
}

// Unknown writes nobody observed are dropped: many of them cost nothing,
// and violations are still found.
func TestLinearizableManyUnknownWrites(t *testing.T) {
	b := &hb{}
	tm := int64(1)
	for p := range 30 {
		b.inv(tm, p, "write", ra, `{"value":`+itoa(100000+p)+`}`).info(tm+1, p)
		tm += 2
	}
	b.inv(tm, 40, "cas", ra, `{"expect":100003,"value":5}`).info(tm+1, 40) // kept (5 is read), and keeps the write of 100003
	tm += 2
	for i := range 500 {
		b.inv(tm, 50, "write", ra, `{"value":`+itoa(i)+`}`).ok(tm+1, 50, `{}`)
		b.inv(tm+2, 50, "read", ra, "").ok(tm+3, 50, `{"value":`+itoa(i)+`}`)
		tm += 4
	}
	b.inv(tm, 50, "read", ra, "").ok(tm+1, 50, `{"value":5}`)
	r := Linearizable{Timeout: 5 * time.Second}.Check(context.Background(), b.file(), Inputs{})
	if r.Verdict != Valid || !strings.Contains(r.Summary, "29 unknown writes or cas dropped") {
		t.Fatalf("%s: %s", r.Verdict, r.Summary)
	}
	b.inv(tm+2, 50, "read", ra, "").ok(tm+3, 50, `{"value":100004}`) // now observed: kept
	b.inv(tm+4, 50, "read", ra, "").ok(tm+5, 50, `{"value":-1}`)
	r = Linearizable{Timeout: 5 * time.Second}.Check(context.Background(), b.file(), Inputs{})
	if r.Verdict != Invalid || !strings.Contains(r.Summary, "28 unknown writes or cas dropped") {
		t.Fatalf("%s: %s", r.Verdict, r.Summary)
	}
}

// A timeout is unknown, never a pass.
func TestLinearizableTimeout(t *testing.T) {
	h := simRegister(simOptions{seed: 1, clients: 10, entities: 1, ops: 20000})
	r := Linearizable{Timeout: time.Nanosecond, MaxConcurrency: 12}.Check(context.Background(), h, Inputs{})
	if r.Verdict != Unknown || !strings.Contains(r.Summary, "1 timed out") || !contains(r.Evidence, "not decided within 1ns") {
		t.Fatalf("%s: %s\n%s", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
	}
}

// A cancelled context stops the check: unknown.
func TestLinearizableCancelled(t *testing.T) {
	h := simRegister(simOptions{seed: 1, clients: 4, entities: 3, ops: 100})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := Linearizable{}.Check(ctx, h, Inputs{})
	if r.Verdict != Unknown || !strings.Contains(r.Summary, "stopped") {
		t.Fatalf("%s: %s", r.Verdict, r.Summary)
	}
}

func TestConcurrency(t *testing.T) {
	op := func(call, ret int64) regOp {
		return regOp{call: call, ret: ret}
	}
	for _, c := range []struct {
		ops       []regOp
		most, unk int
		at        int64
	}{
		{nil, 0, 0, 0},
		{[]regOp{op(1, 2), op(3, 4)}, 1, 0, 1},
		{[]regOp{op(1, 2), op(2, 4)}, 2, 0, 2}, // closed intervals touch
		{[]regOp{op(1, never), op(5, 6), op(7, 8), op(7, never)}, 3, 2, 7},
	} {
		most, at, unk := concurrency(c.ops)
		if most != c.most || at != c.at || unk != c.unk {
			t.Errorf("%v: got %d at %d (%d unknown), want %d at %d (%d)", c.ops, most, at, unk, c.most, c.at, c.unk)
		}
	}
}

// The first violation is the earliest completion by which the history
// already proves it, and Detect measures it from the last fault that took
// effect before it (a failed inject is no fault).
func TestFirstViolationAndDetection(t *testing.T) {
	const R = "register/r1"
	b := (&hb{}).inv(1e9, 0, "write", R, `{"value":1}`).ok(2e9, 0, `{"value":1}`)
	b = b.inv(3e9, 1, "read", R, "").ok(4e9, 1, `{"value":1}`)
	b = b.fault(8e9, "kill:one", "inject", "n1")
	b = b.add(history.Op{Time: 9e9, Kind: history.Nemesis, Process: -1, F: "pause:one", Error: "no such node",
		Value: []byte(`{"action":"inject","began":8900000000,"failed":true}`)})
	// An unknown write of 2 that nobody sees, then a stale read (null):
	// proven when that read completes, at 11 s, not at the end.
	b = b.inv(5e9, 2, "write", R, `{"value":2}`).info(6e9, 2)
	b = b.inv(10e9, 0, "read", R, "").ok(11e9, 0, `{"value":null}`)
	b = b.inv(20e9, 1, "read", R, "").ok(21e9, 1, `{"value":1}`)
	b = b.fault(30e9, "kill:one", "heal", "n1")
	f := b.file()
	r := Linearizable{}.Check(context.Background(), f, Inputs{})
	if r.Verdict != Invalid {
		t.Fatalf("verdict %s: %s %v", r.Verdict, r.Summary, r.Evidence)
	}
	if r.FirstViolation != 11e9 {
		t.Fatalf("first violation at %d, want 11 s: %v", r.FirstViolation, r.Evidence)
	}
	results := []Result{r, {Checker: "other", Verdict: Invalid, FirstViolation: 5e9}, {Checker: "ok", Verdict: Valid}}
	Detect(results, f)
	if d := results[0].Detection; d == nil || d.Fault != "kill:one" || d.FaultAt != 8e9 || d.After != 3*time.Second {
		t.Fatalf("detection %+v, want 3 s after kill:one at 8 s", d)
	}
	if d := results[1].Detection; d == nil || d.Fault != "" || !strings.Contains(d.String(), "before any fault") {
		t.Fatalf("a violation before any fault: %+v", d)
	}
	if results[2].Detection != nil {
		t.Fatal("a valid result got a detection")
	}
}

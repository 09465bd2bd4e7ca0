package checker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/history"
)

// TestPairStreamIsPairOps: on random histories (repeated invocations,
// orphan completions, ops not kept, some never completed) the streaming
// pairer finds the pairs, orphans and mismatches pairOps finds.
func TestPairStreamIsPairOps(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 9))
		var ops []history.Op
		for i := range 60 {
			op := history.Op{Index: int64(i), Time: int64(i), Process: rng.IntN(4), F: []string{"read", "write"}[rng.IntN(2)], Entity: []string{"register/a", "log/b"}[rng.IntN(2)]}
			op.Kind = []string{history.Invoke, history.Invoke, history.OK, history.Info, history.Fail, history.Nemesis}[rng.IntN(6)]
			if op.Kind != history.Invoke && rng.IntN(2) == 0 {
				op.F, op.Entity = "", ""
			}
			ops = append(ops, op)
		}
		keep := func(op *history.Op) bool { return op.Entity == "register/a" }
		want := pairOps(ops, keep)
		var got []pair
		ps := newPairStream(keep, func(inv, comp *history.Op) {
			p := pair{inv: int(inv.Index), comp: -1}
			if comp != nil {
				p.comp = int(comp.Index)
			}
			got = append(got, p)
		})
		for i := range ops {
			op := ops[i] // a copy: the stream must not need the original
			ps.observe(&op)
		}
		ps.finish()
		slices.SortFunc(got, func(a, b pair) int { return cmp.Compare(a.inv, b.inv) })
		if !slices.Equal(got, want.pairs) || ps.orphans != want.orphans || ps.mismatched != want.mismatched {
			t.Fatalf("seed %d: stream %v (%d orphans, %d mismatched), pairOps %v (%d, %d)", seed, got, ps.orphans, ps.mismatched, want.pairs, want.orphans, want.mismatched)
		}
		if want.orphans > 0 && ps.firstOrphan.Index != int64(want.firstOrphan) {
			t.Fatalf("seed %d: first orphan #%d, want #%d", seed, ps.firstOrphan.Index, want.firstOrphan)
		}
	}
}

// TestCheckFileIsCheck: judging a history file in one pass (CheckFile:
// streams, evidence read again from the file) gives every checker's
// result exactly as Check on the history in memory, on valid histories
// and on histories with violations of linearizability, single-instance
// and liveness, with one job and with four.
func TestCheckFileIsCheck(t *testing.T) {
	valid := simRun(runOptions{seed: 5, clients: 8, entities: 20, ops: 4000, step: 2_000_000, faultEvery: 2e9, faultLen: 5e8})
	broken := simRun(runOptions{seed: 6, clients: 8, entities: 20, ops: 4000, step: 2_000_000, faultEvery: 2e9, faultLen: 5e8})
	reads, oks, served := 0, 0, 0
	for i := range broken.Ops {
		op := &broken.Ops[i]
		if op.Kind != history.OK {
			continue
		}
		oks++
		switch {
		case strings.Contains(string(op.Value), `"value"`) && reads < 3:
			reads++
			op.Value = json.RawMessage(`{"value":123456789}`)
		case op.Reply != nil && op.Reply.EntityIncarnation != "" && served < 2 && oks%50 == 0:
			served++
			op.Reply.EntityIncarnation = "impostor"
		}
	}
	// A timeout on a healthy cluster: before the first fault.
	for i := range broken.Ops {
		if op := &broken.Ops[i]; op.Kind == history.Nemesis {
			break
		} else if op.Kind == history.OK && op.Process == 2 {
			op.Kind, op.Value, op.Error = history.Info, nil, "timeout: lost"
		}
	}
	// A duplicate id.
	var firstID json.RawMessage
	for i := range broken.Ops {
		if op := &broken.Ops[i]; op.Kind == history.OK && strings.HasPrefix(string(op.Value), `{"id":`) {
			if firstID == nil {
				firstID = op.Value
			} else if i > len(broken.Ops)/2 {
				op.Value = firstID
				break
			}
		}
	}
	streaming := []Checker{Linearizable{}, SingleInstance{}, Liveness{}, Availability{}, Recovered{}, UniqueIDs{}, Passivated{Min: 1}, ShardsMoved{},
		ServedDuringFault{Fault: "partition:", Settle: 1e8}, AnsweredAfterHeal{Fault: "pause:"}, AnsweredAfterHeal{Fault: "kill:"}}
	mixed := append(slices.Clone(streaming), heldChecker{}) // one that needs the history held
	for _, tc := range []struct {
		name string
		h    *history.File
		cs   []Checker
	}{{"valid", valid, streaming}, {"broken", broken, streaming}, {"broken-held", broken, mixed}} {
		name, h, cs := tc.name, tc.h, tc.cs
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "history.jsonl")
			if err := os.WriteFile(path, encode(t, h), 0o644); err != nil {
				t.Fatal(err)
			}
			// On one goroutine and on several (parallel.go).
			got, outline, err := CheckFile(context.Background(), path, cs, Inputs{}, FileOptions{Jobs: 1})
			if err != nil {
				t.Fatal(err)
			}
			got4, _, err := CheckFile(context.Background(), path, cs, Inputs{}, FileOptions{Jobs: 4})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, got4) {
				t.Errorf("4 jobs judged otherwise than one:\n%+v\n%+v", got4, got)
			}
			if len(outline.Ops) >= len(h.Ops) && hasStreamersOnly(cs) {
				t.Errorf("the outline holds %d of %d entries: the history was held", len(outline.Ops), len(h.Ops))
			}
			invalid := 0
			for i, c := range cs {
				want := c.Check(context.Background(), h, Inputs{})
				if !reflect.DeepEqual(got[i], want) {
					t.Errorf("%s:\nfile   %+v\nmemory %+v", c.Name(), got[i], want)
				}
				if want.Verdict == Invalid {
					invalid++
				}
			}
			if name != "valid" && invalid < 4 {
				t.Errorf("the broken history is invalid for %d checkers, want linearizable, single-instance, liveness and unique-ids", invalid)
			}
		})
	}
}

func hasStreamersOnly(cs []Checker) bool {
	for _, c := range cs {
		if _, ok := c.(Streamer); !ok {
			return false
		}
	}
	return true
}

// TestCheckFileProgress: the pass reports how far it got, then each
// checker as it starts judging, with every entry counted.
func TestCheckFileProgress(t *testing.T) {
	h := simRun(runOptions{seed: 7, clients: 8, entities: 20, ops: 40_000, step: 2_000_000, faultEvery: 2e9, faultLen: 5e8})
	path := filepath.Join(t.TempDir(), "history.jsonl")
	if err := os.WriteFile(path, encode(t, h), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []Progress
	cs := []Checker{Linearizable{}, Liveness{}}
	if _, _, err := CheckFile(context.Background(), path, cs, Inputs{}, FileOptions{Progress: func(p Progress) { got = append(got, p) }}); err != nil {
		t.Fatal(err)
	}
	if len(got) < 3 || got[0].Done || got[0].Read <= 0 || got[0].Read > got[0].Total {
		t.Fatalf("progress %+v", got)
	}
	last, judging := got[len(got)-1], got[len(got)-2]
	if !last.Done || last.Judging != "liveness" || judging.Judging != "linearizable" || last.Entries != int64(len(h.Ops)) || last.Read != last.Total {
		t.Fatalf("last progress %+v, before %+v (%d entries)", last, judging, len(h.Ops))
	}
	for _, p := range []Progress{got[0], last} {
		if s := p.String(); !strings.Contains(s, "entries") {
			t.Errorf("progress line %q", s)
		}
	}
}

// The pairer the checkers used before they streamed, kept as the oracle
// TestPairStreamIsPairOps holds pairStream to.

// pair is an invocation and its completion, as indexes into File.Ops;
// comp is -1 when the invocation never completed.
type pair struct {
	inv, comp int
}

// pairing is what pairOps found.
type pairing struct {
	pairs []pair
	// orphans are completions with no open invocation on their process;
	// mismatched are completions whose f or entity differ from their
	// invocation's (both ignored; counted for the evidence).
	orphans, mismatched int
	firstOrphan         int
}

// pairOps pairs every invocation for which keep is true with its
// process's next completion. Each process has at most one op in flight; an
// invocation on a process that already has one open leaves the earlier one
// open (unknown).
func pairOps(ops []history.Op, keep func(*history.Op) bool) pairing {
	p := pairing{firstOrphan: -1}
	open := make(map[int]int) // process -> index in p.pairs, or -1 when not kept
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Kind == history.Invoke:
			if keep(op) {
				open[op.Process] = len(p.pairs)
				p.pairs = append(p.pairs, pair{inv: i, comp: -1})
			} else {
				open[op.Process] = -1
			}
		case op.Completion():
			k, ok := open[op.Process]
			if !ok {
				p.orphans++
				if p.firstOrphan < 0 {
					p.firstOrphan = i
				}
				continue
			}
			delete(open, op.Process)
			if k < 0 {
				continue
			}
			inv := &ops[p.pairs[k].inv]
			if op.F != "" && op.F != inv.F || op.Entity != "" && op.Entity != inv.Entity {
				p.mismatched++
			}
			p.pairs[k].comp = i
		}
	}
	return p
}

// heldChecker is a checker that does not stream: CheckFile must hold the
// history for it.
type heldChecker struct{}

func (heldChecker) Name() string { return "held" }

func (heldChecker) Check(_ context.Context, h *history.File, _ Inputs) Result {
	return Result{Checker: "held", Verdict: Valid, Summary: fmt.Sprintf("%d entries", len(h.Ops))}
}

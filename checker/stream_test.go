package checker

import (
	"cmp"
	"math/rand/v2"
	"slices"
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

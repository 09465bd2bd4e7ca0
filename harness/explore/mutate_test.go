package explore

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/nemesis"
)

var testSpace = space{
	faults:   []string{"partition:halves", "partition:journal-cut", "partition:asymmetric", "kill:one", "pause:oldest", "clock:bump", "member:join"},
	limit:    30 * time.Second,
	interval: 5 * time.Second,
	age:      true,
}

// fits checks what a run asks of a schedule, and what a campaign adds:
// known faults, no two of a family at once, every inject healed.
func fits(t *testing.T, sp space, steps []nemesis.Step) {
	t.Helper()
	if err := nemesis.ValidateSchedule(steps); err != nil {
		t.Fatalf("%v\n%v", err, steps)
	}
	holding := map[string]string{} // family → fault
	for _, s := range steps {
		if s.At < 0 || s.At >= sp.limit {
			t.Fatalf("step %v outside the main phase", s)
		}
		if !slices.Contains(sp.faults, s.Fault) {
			t.Fatalf("step %v: a fault outside the space", s)
		}
		fam, _, _ := strings.Cut(s.Fault, ":")
		if s.Heal {
			delete(holding, fam)
			continue
		}
		if f, ok := holding[fam]; ok {
			t.Fatalf("step %v while %s holds: two faults of a family at once\n%v", s, f, steps)
		}
		holding[fam] = s.Fault
		if !slices.Contains(sp.targets(s.Fault), s.Target) {
			t.Fatalf("step %v: target %q", s, s.Target)
		}
	}
	if len(holding) > 0 {
		t.Fatalf("faults never healed: %v\n%v", holding, steps)
	}
}

// Every mutation of every operator gives a schedule a run accepts, and the
// same generator state gives the same child.
func TestMutate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	parent := testSpace.fresh(rng)
	other := testSpace.fresh(rng)
	fits(t, testSpace, parent)
	ops := map[string]int{}
	for i := range 2000 {
		child, what := testSpace.mutate(rand.New(rand.NewPCG(uint64(i), 7)), parent, other)
		fits(t, testSpace, child)
		again, what2 := testSpace.mutate(rand.New(rand.NewPCG(uint64(i), 7)), parent, other)
		if what != what2 || !slices.Equal(child, again) {
			t.Fatalf("seed %d: two children of one generator state: %s %v and %s %v", i, what, child, what2, again)
		}
		for _, op := range strings.Split(what, "+") {
			ops[op]++
		}
		parent = child // a chain of mutations stays a schedule
	}
	for _, op := range []string{MutAdd, MutDrop, MutMove, MutStretch, MutRetarget, MutRefault, MutSplice} {
		if ops[op] == 0 {
			t.Errorf("mutation %s never chosen in 2000 children", op)
		}
	}
}

// Each operator does what it says, on a schedule of two faults.
func TestMutationOperators(t *testing.T) {
	base := []action{
		{fault: "kill:one", seed: 1, at: 5 * time.Second, heal: 10 * time.Second, healed: true},
		{fault: "partition:halves", seed: 2, at: 12 * time.Second, heal: 18 * time.Second, healed: true},
	}
	other := []action{{fault: "pause:oldest", seed: 3, at: 20 * time.Second, heal: 25 * time.Second, healed: true}}
	for _, tc := range []struct {
		op    string
		check func(t *testing.T, got []action)
	}{
		{MutAdd, func(t *testing.T, got []action) {
			if len(got) != 3 {
				t.Errorf("add: %d faults, want 3", len(got))
			}
		}},
		{MutDrop, func(t *testing.T, got []action) {
			if len(got) != 1 {
				t.Errorf("drop: %d faults, want 1", len(got))
			}
		}},
		{MutMove, func(t *testing.T, got []action) {
			moved := 0
			for i := range got {
				if got[i].at != base[i].at {
					moved++
					if got[i].heal-got[i].at != base[i].heal-base[i].at {
						t.Errorf("move changed the hold: %v", got[i])
					}
				}
			}
			if moved > 1 {
				t.Errorf("move moved %d faults", moved)
			}
		}},
		{MutStretch, func(t *testing.T, got []action) {
			for i := range got {
				if got[i].at != base[i].at {
					t.Errorf("stretch moved an inject: %v", got[i])
				}
			}
		}},
		{MutRetarget, func(t *testing.T, got []action) {
			changed := 0
			for i := range got {
				if got[i].seed != base[i].seed || got[i].target != base[i].target {
					changed++
				}
				if got[i].fault != base[i].fault || got[i].at != base[i].at {
					t.Errorf("retarget changed more than the target: %v", got[i])
				}
			}
			if changed != 1 {
				t.Errorf("retarget changed %d faults, want 1", changed)
			}
		}},
		{MutSplice, func(t *testing.T, got []action) {
			for _, a := range got {
				if a.fault == "pause:oldest" && a.at != 20*time.Second {
					t.Errorf("splice moved the other's fault: %v", a)
				}
			}
		}},
	} {
		for seed := range uint64(50) {
			rng := rand.New(rand.NewPCG(seed, 0))
			// Draw until the operator is the one under test.
			for range 200 {
				got, op := testSpace.mutateOnce(rng, base, other)
				if op == tc.op {
					tc.check(t, got)
					break
				}
			}
		}
	}
}

// A schedule read as actions and written back is the same schedule.
func TestActionsRoundTrip(t *testing.T) {
	for seed := range uint64(100) {
		plan := testSpace.fresh(rand.New(rand.NewPCG(seed, 1)))
		if got := testSpace.steps(actions(plan)); !slices.Equal(got, plan) {
			t.Fatalf("seed %d:\n%v\nwritten back as\n%v", seed, plan, got)
		}
	}
}

// repair keeps schedules runnable: it drops what does not fit and never
// lets two faults of a family overlap.
func TestRepair(t *testing.T) {
	sp := testSpace
	sp.age = false
	got := sp.steps([]action{
		{fault: "kill:one", at: -time.Second, heal: 3 * time.Second, healed: true},                                        // clamped to 0
		{fault: "kill:one", at: time.Second, heal: 4 * time.Second, healed: true},                                         // overlaps: dropped
		{fault: "partition:asymmetric", target: nemesis.RoleOldest, at: 2 * time.Second, heal: time.Second, healed: true}, // no age: no target; held minHold
		{fault: "loss:random", at: 5 * time.Second, heal: 6 * time.Second, healed: true},                                  // not in the space
		{fault: "clock:bump", at: 29900 * time.Millisecond, heal: 40 * time.Second, healed: true},                         // too late to hold
	})
	fits(t, sp, got)
	want := []nemesis.Step{
		{At: 0, Fault: "kill:one"},
		{At: 2 * time.Second, Fault: "partition:asymmetric"},
		{At: 2*time.Second + minHold, Fault: "partition:asymmetric", Heal: true},
		{At: 3 * time.Second, Fault: "kill:one", Heal: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("repaired\n%v\nwant\n%v", got, want)
	}
}

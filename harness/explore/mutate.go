package explore

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/shardtest/shardtest/nemesis"
)

// action is one fault of a schedule: its inject and its heal (none for a
// fault whose heal the schedule leaves to the end of the run).
type action struct {
	fault, target string
	seed          uint64
	at, heal      time.Duration
	healed        bool
}

func (a action) family() string { f, _, _ := strings.Cut(a.fault, ":"); return f }

// end is when the action stops holding (its heal, or the main phase's
// end).
func (a action) end(limit time.Duration) time.Duration {
	if a.healed {
		return a.heal
	}
	return limit
}

// actions reads a schedule as its faults: each inject with the heal of its
// key that follows (nemesis.Spans).
func actions(steps []nemesis.Step) []action {
	var out []action
	for _, sp := range nemesis.Spans(steps) {
		s := steps[sp.Inject]
		a := action{fault: s.Fault, target: s.Target, seed: s.Seed, at: s.At}
		if sp.Heal >= 0 {
			a.heal, a.healed = steps[sp.Heal].At, true
		}
		out = append(out, a)
	}
	return out
}

// Bounds of a mutated schedule.
const (
	// maxActions bounds the faults of one schedule.
	maxActions = 16
	// minHold is the shortest a fault is held.
	minHold = 500 * time.Millisecond
)

// space is what a schedule may hold: the faults to draw from, the main
// phase's length, and the typical hold (the --nemesis-interval).
type space struct {
	faults   []string
	limit    time.Duration
	interval time.Duration
	// age: the implementation tells its members' age, so a step can aim
	// at the oldest (or at a younger node).
	age bool
}

// targets are the Targets a step of fault may name here.
func (sp space) targets(fault string) []string {
	return slices.DeleteFunc(nemesis.StepTargets(fault), func(t string) bool {
		return !sp.age && (t == nemesis.RoleOldest || t == nemesis.RoleYounger)
	})
}

// steps writes actions as a schedule: in time order, each fault's inject
// then its heal; faults of one family never overlap (they share the
// nodes' packet filters or processes: repair drops the later one), so
// each key is the fault's name. Every inject names its seed, so the
// schedule file alone reproduces its targets.
func (sp space) steps(acts []action) []nemesis.Step {
	acts = sp.repair(acts)
	var out []nemesis.Step
	for _, a := range acts {
		out = append(out, nemesis.Step{At: a.at, Fault: a.fault, Target: a.target, Seed: a.seed})
		if a.healed {
			out = append(out, nemesis.Step{At: a.heal, Fault: a.fault, Heal: true})
		}
	}
	slices.SortStableFunc(out, func(x, y nemesis.Step) int {
		if x.At != y.At {
			return int(x.At - y.At)
		}
		// A heal at the same moment as an inject goes first: the
		// fault before is over when the next begins.
		switch {
		case x.Heal && !y.Heal:
			return -1
		case y.Heal && !x.Heal:
			return 1
		}
		return 0
	})
	return out
}

// repair makes acts a schedule the run accepts: times inside the main
// phase, holds at least minHold, faults known to the space, no two of one
// family at once, at most maxActions.
func (sp space) repair(acts []action) []action {
	var out []action
	for _, a := range acts {
		if !slices.Contains(sp.faults, a.fault) {
			continue
		}
		a.at = max(a.at, 0)
		if a.at+minHold >= sp.limit {
			continue
		}
		if a.healed {
			a.heal = min(max(a.heal, a.at+minHold), sp.limit-time.Millisecond)
		}
		if !slices.Contains(sp.targets(a.fault), a.target) {
			a.target = ""
		}
		out = append(out, a)
	}
	slices.SortStableFunc(out, func(x, y action) int { return int(x.at - y.at) })
	var kept []action
	for _, a := range out {
		clash := slices.ContainsFunc(kept, func(k action) bool {
			return k.family() == a.family() && a.at < k.end(sp.limit) && k.at < a.end(sp.limit)
		})
		if !clash && len(kept) < maxActions {
			kept = append(kept, a)
		}
	}
	return kept
}

// fresh draws a random schedule as --nemesis does (nemesis.Plan): the same
// distribution of faults and times as a run with a new seed.
func (sp space) fresh(rng *rand.Rand) []nemesis.Step {
	return nemesis.Plan(int64(rng.Uint64N(1_000_000_000)), sp.faults, sp.interval, sp.limit)
}

// Mutations, named in the campaign's records.
const (
	MutAdd      = "add"
	MutDrop     = "drop"
	MutMove     = "move"
	MutStretch  = "stretch"
	MutRetarget = "retarget"
	MutRefault  = "refault"
	MutSplice   = "splice"
)

// mutate applies 1 to 3 random mutations to parent (splicing with other,
// when there is one) and returns the child and what was done.
func (sp space) mutate(rng *rand.Rand, parent, other []nemesis.Step) ([]nemesis.Step, string) {
	acts := actions(parent)
	var done []string
	n := 1 + rng.IntN(3)
	for range n {
		var what string
		acts, what = sp.mutateOnce(rng, acts, actions(other))
		done = append(done, what)
	}
	child := sp.steps(acts)
	if len(child) == 0 {
		// Everything was dropped or repaired away: one new fault.
		child = sp.steps(sp.add(rng, nil))
		done = append(done, MutAdd)
	}
	return child, strings.Join(done, "+")
}

func (sp space) mutateOnce(rng *rand.Rand, acts, other []action) ([]action, string) {
	ops := []string{MutAdd, MutDrop, MutMove, MutStretch, MutRetarget, MutRefault}
	if len(other) > 0 {
		ops = append(ops, MutSplice)
	}
	op := ops[rng.IntN(len(ops))]
	if len(acts) == 0 {
		op = MutAdd
	}
	acts = slices.Clone(acts)
	var i int
	if len(acts) > 0 {
		i = rng.IntN(len(acts))
	}
	switch op {
	case MutAdd:
		return sp.add(rng, acts), op
	case MutDrop:
		return slices.Delete(acts, i, i+1), op
	case MutMove:
		d := time.Duration(rng.Int64N(int64(2*sp.interval)+1)) - sp.interval
		acts[i].at += d
		acts[i].heal += d
		return acts, op
	case MutStretch:
		a := &acts[i]
		if !a.healed {
			a.heal, a.healed = a.at+sp.interval, true
		}
		// From a third of the hold to three times it.
		f := 0.33 + rng.Float64()*2.67
		a.heal = a.at + time.Duration(float64(a.heal-a.at)*f)
		return acts, op
	case MutRetarget:
		a := &acts[i]
		targets := slices.DeleteFunc(sp.targets(a.fault), func(t string) bool { return t == a.target })
		if len(targets) > 0 && rng.IntN(2) == 0 {
			a.target = targets[rng.IntN(len(targets))]
		} else {
			// Another seed: another node, side or shape.
			a.seed = rng.Uint64()
		}
		return acts, op
	case MutRefault:
		a := &acts[i]
		a.fault = sp.faults[rng.IntN(len(sp.faults))]
		a.target, a.seed = "", rng.Uint64()
		return acts, op
	case MutSplice:
		cut := time.Duration(rng.Int64N(int64(sp.limit)))
		var out []action
		for _, a := range acts {
			if a.at < cut {
				out = append(out, a)
			}
		}
		for _, a := range other {
			if a.at >= cut {
				out = append(out, a)
			}
		}
		return out, op
	}
	return acts, op
}

// add is acts with one more fault: a random one of the space, held about
// an interval, at a random time that fits it.
func (sp space) add(rng *rand.Rand, acts []action) []action {
	hold := sp.interval/2 + time.Duration(rng.Int64N(int64(sp.interval)+1))
	latest := sp.limit - hold - time.Millisecond
	var at time.Duration
	if latest > 0 {
		at = time.Duration(rng.Int64N(int64(latest)))
	}
	f := sp.faults[rng.IntN(len(sp.faults))]
	targets := sp.targets(f)
	return append(acts, action{fault: f, target: targets[rng.IntN(len(targets))], seed: rng.Uint64(), at: at, heal: at + hold, healed: true})
}

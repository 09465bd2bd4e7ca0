package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Step is one action of a fault schedule.
type Step struct {
	// At is the offset from the start of the main phase.
	At time.Duration `json:"at_ns"`
	// Fault is the fault's full name.
	Fault string `json:"fault"`
	// Heal: undo the fault injected under the same key.
	Heal bool `json:"heal,omitempty"`
	// Key names an injected fault for its heal, so that faults can
	// overlap (a scripted scenario: clock skew during a join); "" is the
	// fault's name. Injecting a key that is still active heals it first.
	Key string `json:"key,omitempty"`
	// Target fixes the choice of a fault that picks one node, a minority
	// or every node at random (clock faults, journal-cut): "one",
	// "minority" or "all"; or, for the partition shapes with a cut side
	// (asymmetric, bridge), "oldest": the oldest node is on that side; or,
	// for journal-cut, "younger": one node that is not the oldest. ""
	// leaves it to the seed.
	Target string `json:"target,omitempty"`
	// Seed drives the fault's own random choices (targets, shapes).
	Seed uint64 `json:"seed,omitempty"`
}

// SeedSchedule returns a copy of a scripted schedule whose steps' own
// random choices (which node, which offset) follow seed: the script's
// times and faults stay, the targets vary with the seed. A step that has a
// seed of its own (a schedule file that fixes it, as shrink writes) keeps
// it.
func SeedSchedule(steps []Step, seed int64) []Step {
	out := slices.Clone(steps)
	for i := range out {
		if out[i].Seed == 0 {
			out[i].Seed = uint64(seed)*1_000_003 + uint64(i)
		}
	}
	return out
}

// String is the step for people: "8s inject kill:coordinator (all)".
func (s Step) String() string {
	if s.Heal {
		return fmt.Sprintf("%v heal %s", s.At, s.Fault)
	}
	if s.Target != "" {
		return fmt.Sprintf("%v inject %s (%s)", s.At, s.Fault, s.Target)
	}
	return fmt.Sprintf("%v inject %s", s.At, s.Fault)
}

// key is the step's Key, or its fault's name.
func (s Step) key() string {
	if s.Key != "" {
		return s.Key
	}
	return s.Fault
}

// ValidateSchedule checks a scripted schedule: steps in time order, known
// targets, every heal after an inject of its key.
func ValidateSchedule(steps []Step) error {
	active := map[string]bool{}
	for i, s := range steps {
		if i > 0 && s.At < steps[i-1].At {
			return fmt.Errorf("schedule step %d (%s at %v) comes before the step ahead of it", i, s.Fault, s.At)
		}
		switch s.Target {
		case "", "one", "minority", "all":
		case RoleOldest:
			if !slices.Contains(oldestOnCutSide, strings.TrimPrefix(s.Fault, "partition:")) {
				return fmt.Errorf("schedule step %d: target oldest applies to partition:%s only, not %s", i, strings.Join(oldestOnCutSide, " and partition:"), s.Fault)
			}
		case RoleYounger:
			if s.Fault != "partition:"+youngerCut {
				return fmt.Errorf("schedule step %d: target younger applies to partition:%s only, not %s", i, youngerCut, s.Fault)
			}
		default:
			return fmt.Errorf("schedule step %d: target %q: want one, minority or all (or oldest, for partition:%s; younger, for partition:%s)", i, s.Target, strings.Join(oldestOnCutSide, " and partition:"), youngerCut)
		}
		if s.Heal {
			if !active[s.key()] {
				return fmt.Errorf("schedule step %d heals %s, which is not injected then", i, s.key())
			}
			delete(active, s.key())
			continue
		}
		active[s.key()] = true
	}
	return nil
}

// Plan is the fault schedule for a main phase of length limit: after a
// quiet interval, inject a fault, hold it for an interval, heal it, stay
// quiet for an interval, and again, with each gap jittered by up to ±25 %.
// Faults are drawn from faults (full names) by a generator seeded with
// seed alone: the same seed, faults and times give the same plan. The last
// fault is healed before limit.
func Plan(seed int64, faults []string, interval, limit time.Duration) []Step {
	if len(faults) == 0 || interval <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6e656d65736973)) // "nemesis"
	jitter := func() time.Duration {
		return interval*3/4 + time.Duration(rng.Int64N(int64(interval)/2+1))
	}
	var plan []Step
	t := jitter()
	for {
		hold := jitter()
		if t+hold >= limit {
			return plan
		}
		f := faults[rng.IntN(len(faults))]
		plan = append(plan, Step{At: t, Fault: f, Seed: rng.Uint64()})
		t += hold
		plan = append(plan, Step{At: t, Fault: f, Heal: true})
		t += jitter()
	}
}

// Event is a fault injected or healed, for the history.
type Event struct {
	Fault string
	// Action is "inject" or "heal".
	Action string
	// Began is when the action started; it took effect when it returned
	// (the harness records that time).
	Began time.Time
	// Targets say what was done (JSON).
	Targets any
	// Err is why the action failed, entirely or in part.
	Err error
	// Failed: an inject that did nothing at all; no heal follows it.
	Failed bool
}

// Runner performs a plan.
type Runner struct {
	Env    *Env
	Faults []Fault
	// Record receives every event as the action returns.
	Record func(Event)
}

// Check refuses faults the cluster cannot take. A fault named in full is
// refused with the reason; one that came with its family (--nemesis
// partition) is dropped from r.Faults and returned with the reason, so a
// family means "its variants that fit this cluster". Nothing left to inject
// is an error too.
func (r *Runner) Check() (dropped []error, err error) {
	var errs []error
	var keep []Fault
	for _, f := range r.Faults {
		switch err := f.Check(r.Env); {
		case err == nil:
			keep = append(keep, f)
		case f.Explicit:
			errs = append(errs, err)
		default:
			dropped = append(dropped, err)
		}
	}
	if len(errs) > 0 {
		return dropped, errors.Join(errs...)
	}
	if len(keep) == 0 && len(r.Faults) > 0 {
		return dropped, fmt.Errorf("no fault asked for fits this cluster: %w", errors.Join(dropped...))
	}
	r.Faults = keep
	return dropped, nil
}

// CheckSteps refuses steps whose own choices the cluster cannot take:
// Targets "oldest" and "younger" need the implementation to tell its
// members' age.
func (r *Runner) CheckSteps(steps []Step) error {
	var errs []error
	for i, s := range steps {
		if s.Heal || s.Target != RoleOldest && s.Target != RoleYounger {
			continue
		}
		if err := roleNeeds(s.Target)(r.Env); err != nil {
			errs = append(errs, fmt.Errorf("schedule step %d (%s, target %s): %w", i, s.Fault, s.Target, err))
		}
	}
	return errors.Join(errs...)
}

// Run performs plan, with At counted from start, until the plan ends or
// ctx ends; faults still active then are healed, the latest first (heals
// run on their own, even after ctx ends). It returns when nothing is left
// injected. Faults of different keys may overlap.
func (r *Runner) Run(ctx context.Context, start time.Time, plan []Step) {
	faults := map[string]Fault{}
	for _, f := range r.Faults {
		faults[f.Name] = f
	}
	type injected struct {
		key, fault string
		active     *Active
	}
	var active []injected // in order of injection
	heal := func(key string) {
		i := slices.IndexFunc(active, func(a injected) bool { return a.key == key })
		if i < 0 {
			return
		}
		a := active[i]
		active = slices.Delete(active, i, i+1)
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*settle)
		defer cancel()
		began := r.Env.now()
		targets, err := a.active.Heal(hctx)
		r.Record(Event{Fault: a.fault, Action: "heal", Began: began, Targets: targets, Err: err})
	}
	defer func() {
		for len(active) > 0 {
			heal(active[len(active)-1].key)
		}
	}()
	for _, s := range plan {
		if err := r.Env.sleep(ctx, start.Add(s.At).Sub(r.Env.now())); err != nil {
			return
		}
		heal(s.key()) // a heal step, or a key injected again
		if s.Heal {
			continue
		}
		f, ok := faults[s.Fault]
		if !ok {
			r.Record(Event{Fault: s.Fault, Action: "inject", Began: r.Env.now(), Err: fmt.Errorf("unknown fault %q", s.Fault), Failed: true})
			continue
		}
		began := r.Env.now()
		a, err := f.Inject(withTarget(ctx, s.Target), r.Env, rand.New(rand.NewPCG(s.Seed, 0x74617267657473))) // "targets"
		var targets any
		if a != nil {
			targets = a.Targets
		}
		// An inject that did nothing (a nil Active: no target found, every
		// target refused) is recorded as failed and gets no heal, so no
		// checker takes it for a fault that happened.
		failed := err != nil && a.Failed()
		r.Record(Event{Fault: f.Name, Action: "inject", Began: began, Targets: targets, Err: err, Failed: failed})
		if !failed {
			active = append(active, injected{s.key(), f.Name, a})
		}
	}
}

// StepTargets lists the Targets a step of fault can name, "" (left to the
// step's seed) first: one node, a minority or all for the faults that pick
// so (clock faults, journal-cut), "oldest" for the shapes with a cut side,
// "younger" for journal-cut. A campaign that mutates schedules
// (harness/explore) varies a step's target among these.
func StepTargets(fault string) []string {
	family, variant, _ := strings.Cut(fault, ":")
	switch {
	case family == "clock":
		return []string{"", "one", "minority", "all"}
	case family == "partition" && variant == youngerCut:
		return []string{"", "one", "minority", "all", RoleYounger}
	case family == "partition" && slices.Contains(oldestOnCutSide, variant):
		return []string{"", RoleOldest}
	}
	return []string{""}
}

// Span is one fault of a schedule as step indexes: its inject, and the
// heal of its key that follows (-1: none; also when the key is injected
// again first, which heals it then).
type Span struct{ Inject, Heal int }

// Spans pairs each inject of steps with the heal of its key: the units
// that shrink drops and explore mutates.
func Spans(steps []Step) []Span {
	var out []Span
	open := map[string]int{} // key -> index into out
	for i, st := range steps {
		k := st.key()
		if st.Heal {
			if u, ok := open[k]; ok {
				out[u].Heal = i
				delete(open, k)
			}
			continue
		}
		if _, ok := open[k]; ok {
			// Injecting an active key heals it first: the earlier
			// inject ends here, with no heal step of its own.
			delete(open, k)
		}
		open[k] = len(out)
		out = append(out, Span{Inject: i, Heal: -1})
	}
	return out
}

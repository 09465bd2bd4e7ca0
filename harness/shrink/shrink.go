// Package shrink searches for the smallest test that still fails the same
// way as a failing run: fewer fault steps (delta debugging over the
// schedule, each inject kept with its heal), shorter holds and main phase,
// fewer entities and workers, a lower rate, fewer nodes. A failure is
// probabilistic, so each candidate is run several times and counts as
// failing when it fails in at least a set number of tries. The search is a
// pure function of what the Runner answers: it is tested on fake runners,
// and `shardtest shrink` gives it one that runs real clusters.
package shrink

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shardtest/shardtest/nemesis"
)

// Test is what the search varies.
type Test struct {
	Steps       []nemesis.Step
	TimeLimit   time.Duration
	Nodes       int
	Entities    int
	Concurrency int
	// Rate is the operations per second in total (0: as fast as the
	// workers go).
	Rate float64
}

// clone copies t, so candidates never share a schedule.
func (t Test) clone() Test {
	t.Steps = slices.Clone(t.Steps)
	return t
}

// Runner runs a candidate once.
type Runner interface {
	// Try runs t (try counts from 1 for each candidate) and reports whether
	// it failed the way the original did (the same checker said invalid),
	// and the run's folder. An error means the run could not be made: it
	// counts as not failing, and when the original test's tries fail so,
	// the search ends with that error.
	Try(ctx context.Context, t Test, try int) (failed bool, dir string, err error)
	// MinNodes is the fewest nodes the schedule's faults can act on.
	MinNodes(steps []nemesis.Step) int
}

// Options shape the search.
type Options struct {
	// Tries per candidate, and how many must fail for it to count as
	// failing (default 3 and 2).
	Tries, Need int
	// Budget ends the search (default 1 h): the smallest failing test so
	// far is the answer.
	Budget time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Progress gets every candidate once judged.
	Progress func(Candidate)
}

// Candidate is one test tried.
type Candidate struct {
	// What was changed from the smallest failing test so far.
	What string
	Test Test
	// Tries made and how many failed; Failing: at least Need did.
	Tries, Failures int
	Failing         bool
	Dirs            []string
	Errors          []string
}

// Line is the candidate, the n-th judged, in one line for people.
func (c Candidate) Line(n int) string {
	verdict := "passes"
	if c.Failing {
		verdict = "fails: kept"
	}
	could := ""
	if len(c.Errors) > 0 {
		could = fmt.Sprintf(" (%d could not run: %s)", len(c.Errors), c.Errors[0])
	}
	return fmt.Sprintf("candidate %d: %s: %d of %d tries failed%s: %s", n, c.What, c.Failures, c.Tries, could, verdict)
}

// Result is the search's answer.
type Result struct {
	// Original is the first candidate: the test as it failed.
	Original Candidate
	// Smallest is the smallest test found that fails (Original when
	// nothing smaller does, or when Original does not fail here).
	Smallest Candidate
	// Candidates are all the candidates tried, in order.
	Candidates []Candidate
	// Reproduced: the original failed in at least Need of Tries.
	Reproduced bool
	// OutOfBudget: the search stopped at its budget, not because no
	// smaller candidate failed.
	OutOfBudget bool
	// Took is how long the search ran, by Options.Now.
	Took time.Duration `json:"took_ns"`
}

// Tries counts the runs of every candidate.
func (r Result) Tries() int {
	n := 0
	for _, c := range r.Candidates {
		n += c.Tries
	}
	return n
}

// Rate is the failures measured over the tries of the smallest test.
func (r Result) Rate() string {
	return fmt.Sprintf("%d of %d", r.Smallest.Failures, r.Smallest.Tries)
}

type search struct {
	ctx      context.Context
	r        Runner
	o        Options
	deadline time.Time
	res      Result
}

// Shrink searches from orig.
func Shrink(ctx context.Context, orig Test, r Runner, o Options) (Result, error) {
	if o.Tries == 0 {
		o.Tries, o.Need = 3, 2
	}
	if o.Need < 1 || o.Need > o.Tries {
		return Result{}, fmt.Errorf("shrink: need %d failures of %d tries: want 1 to %d", o.Need, o.Tries, o.Tries)
	}
	if o.Budget <= 0 {
		o.Budget = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	start := o.Now()
	s := &search{ctx: ctx, r: r, o: o, deadline: start.Add(o.Budget)}
	first := s.judge("the original test", orig.clone())
	s.res.Original, s.res.Smallest = first, first
	s.res.Reproduced = first.Failing
	if !first.Failing {
		s.res.Took = o.Now().Sub(start)
		if len(first.Errors) > 0 {
			// A try that could not run proves nothing: the run did not
			// "not fail again", it was not tried.
			return s.res, fmt.Errorf("the original test could not run (%d of %d tries): %s", len(first.Errors), first.Tries, first.Errors[0])
		}
		return s.res, nil
	}
	// dropSteps runs twice: a removal rejected because a failing candidate
	// happened to pass its tries (a race the system won) gets a second
	// chance, with the test smaller and faster by then.
	for _, pass := range []func() bool{s.dropSteps, s.shortenHolds, s.shortenMain, s.fewerEntities, s.fewerWorkers, s.lowerRate, s.fewerNodes, s.dropSteps} {
		if s.over() {
			break
		}
		pass()
	}
	s.res.Took = o.Now().Sub(start)
	return s.res, ctx.Err()
}

// over reports whether the search must stop (budget or context).
func (s *search) over() bool {
	if s.ctx.Err() != nil {
		return true
	}
	if !s.o.Now().Before(s.deadline) {
		s.res.OutOfBudget = true
		return true
	}
	return false
}

// judge runs t up to Tries times, stopping as soon as the outcome is known.
func (s *search) judge(what string, t Test) Candidate {
	c := Candidate{What: what, Test: t}
	for try := 1; try <= s.o.Tries; try++ {
		if c.Failures >= s.o.Need || c.Failures+(s.o.Tries-c.Tries) < s.o.Need {
			break
		}
		if try > 1 && s.over() {
			break
		}
		failed, dir, err := s.r.Try(s.ctx, t.clone(), try)
		c.Tries++
		if dir != "" {
			c.Dirs = append(c.Dirs, dir)
		}
		if err != nil {
			c.Errors = append(c.Errors, err.Error())
		} else if failed {
			c.Failures++
		}
	}
	c.Failing = c.Failures >= s.o.Need
	s.res.Candidates = append(s.res.Candidates, c)
	if s.o.Progress != nil {
		s.o.Progress(c)
	}
	return c
}

// try judges t against the smallest so far and keeps it if it fails.
func (s *search) try(what string, t Test) bool {
	if s.over() {
		return false
	}
	c := s.judge(what, t)
	if c.Failing {
		s.res.Smallest = c
	}
	return c.Failing
}

// unit is one fault's inject and its heal, as step indexes.
type unit = nemesis.Span

// units pairs each inject with the heal of its key.
func units(steps []nemesis.Step) []unit { return nemesis.Spans(steps) }

// without returns the steps with the units in drop removed.
func without(steps []nemesis.Step, us []unit, drop []int) []nemesis.Step {
	gone := map[int]bool{}
	for _, d := range drop {
		gone[us[d].Inject] = true
		if us[d].Heal >= 0 {
			gone[us[d].Heal] = true
		}
	}
	var out []nemesis.Step
	for i, st := range steps {
		if !gone[i] {
			out = append(out, st)
		}
	}
	return out
}

func names(steps []nemesis.Step, us []unit, idx []int) string {
	var n []string
	for _, i := range idx {
		st := steps[us[i].Inject]
		n = append(n, fmt.Sprintf("%s at %v", st.Fault, st.At))
	}
	return strings.Join(n, ", ")
}

// dropSteps is ddmin over the schedule's faults: remove halves, then
// quarters, ..., then single faults, keeping each removal that still fails.
func (s *search) dropSteps() bool {
	changed := false
	for n := 2; ; {
		cur := s.res.Smallest.Test
		us := units(cur.Steps)
		if len(us) == 0 {
			return changed
		}
		n = min(n, len(us))
		removed := false
		for c := range n {
			lo, hi := c*len(us)/n, (c+1)*len(us)/n
			drop := make([]int, 0, hi-lo)
			for i := lo; i < hi; i++ {
				drop = append(drop, i)
			}
			t := cur.clone()
			t.Steps = without(cur.Steps, us, drop)
			if s.try("without "+names(cur.Steps, us, drop), t) {
				removed, changed = true, true
				n = max(n-1, 2)
				break
			}
			if s.over() {
				return changed
			}
		}
		if removed {
			continue
		}
		if n >= len(us) {
			return changed
		}
		n = min(2*n, len(us))
	}
}

// shortenHolds halves each fault's hold (its heal moved towards its
// inject) while the test still fails.
func (s *search) shortenHolds() bool {
	changed := false
	for u := 0; ; u++ {
		cur := s.res.Smallest.Test
		us := units(cur.Steps)
		if u >= len(us) {
			return changed
		}
		for us[u].Heal >= 0 && !s.over() {
			inj, heal := cur.Steps[us[u].Inject], cur.Steps[us[u].Heal]
			hold := heal.At - inj.At
			if hold < 2*time.Second {
				break
			}
			t := cur.clone()
			t.Steps[us[u].Heal].At = inj.At + hold/2
			// Keep the schedule in time order: the heal moves before the
			// steps it now precedes.
			slices.SortStableFunc(t.Steps, func(a, b nemesis.Step) int { return int(a.At - b.At) })
			if !s.try(fmt.Sprintf("%s held %v instead of %v", inj.Fault, hold/2, hold), t) {
				break
			}
			changed = true
			cur = s.res.Smallest.Test
			us = units(cur.Steps)
		}
	}
}

// shortenMain halves the main phase down to the last step (plus a second).
func (s *search) shortenMain() bool {
	changed := false
	for !s.over() {
		cur := s.res.Smallest.Test
		floor := time.Second
		if n := len(cur.Steps); n > 0 {
			floor = cur.Steps[n-1].At + time.Second
		}
		next := max((cur.TimeLimit+floor)/2, floor).Round(time.Second)
		if cur.TimeLimit-next < time.Second {
			return changed
		}
		t := cur.clone()
		t.TimeLimit = next
		if !s.try(fmt.Sprintf("main phase %v instead of %v", next, cur.TimeLimit), t) {
			return changed
		}
		changed = true
	}
	return changed
}

// halve shrinks one knob of the test by halves, down to floor, while the
// test still fails.
func (s *search) halve(what string, get func(Test) int, set func(*Test, int), floor int) bool {
	changed := false
	for !s.over() {
		cur := s.res.Smallest.Test
		v := get(cur)
		next := max(v/2, floor)
		if next >= v {
			return changed
		}
		t := cur.clone()
		set(&t, next)
		if !s.try(fmt.Sprintf("%d %s instead of %d", next, what, v), t) {
			return changed
		}
		changed = true
	}
	return changed
}

func (s *search) fewerEntities() bool {
	return s.halve("entities", func(t Test) int { return t.Entities }, func(t *Test, v int) { t.Entities = v }, 1)
}

func (s *search) fewerWorkers() bool {
	return s.halve("workers", func(t Test) int { return t.Concurrency }, func(t *Test, v int) { t.Concurrency = v }, 1)
}

// lowerRate halves the rate, down to 10 ops/s; an unlimited rate is first
// capped at 400 ops/s (what the workers reached is not known here).
func (s *search) lowerRate() bool {
	changed := false
	for !s.over() {
		cur := s.res.Smallest.Test
		next := cur.Rate / 2
		if cur.Rate == 0 {
			next = 400
		}
		if next < 10 {
			return changed
		}
		t := cur.clone()
		t.Rate = next
		was := "as fast as the workers go"
		if cur.Rate > 0 {
			was = fmt.Sprintf("%g ops/s", cur.Rate)
		}
		if !s.try(fmt.Sprintf("%g ops/s instead of %s", next, was), t) {
			return changed
		}
		changed = true
	}
	return changed
}

// fewerNodes removes one node at a time, down to the fewest the faults
// can act on.
func (s *search) fewerNodes() bool {
	changed := false
	for !s.over() {
		cur := s.res.Smallest.Test
		floor := max(s.r.MinNodes(cur.Steps), 1)
		if cur.Nodes-1 < floor {
			return changed
		}
		t := cur.clone()
		t.Nodes--
		if !s.try(fmt.Sprintf("%d nodes instead of %d", t.Nodes, cur.Nodes), t) {
			return changed
		}
		changed = true
	}
	return changed
}

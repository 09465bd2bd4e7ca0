// Package detect is the harness's proof of power: the detection matrix.
// Its cases are the catalogue's (scenario.Cases): each scenario with one of
// the reference node's deliberate bugs switched on, and the checker that
// must catch it. A case runs over several seeds, each seed twice under the
// same schedule: with the bug on (the checker must say invalid; a bug that
// needs a race is tried on further seeds, as the suite does) and on the
// correct node (no checker may say invalid). A harness that never finds a
// bug is worthless; one that invents bugs is worse.
//
// Time to detection is read off the history, not the wall clock: the
// earliest point of the run's history (and node events) from which the
// checker already says invalid, found by bisecting over prefixes.
package detect

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/harness/suite"
	"github.com/shardtest/shardtest/history"
)

// Seed is one seed of a case.
type Seed struct {
	Seed int64 `json:"seed"`
	// Detected: the case's checker said invalid with the bug on, at try
	// Tries (or, not detected, in none of Tries tries).
	Detected bool `json:"detected"`
	Tries    int  `json:"tries"`
	// DetectedAfter is how much of the run's history the checker needed.
	DetectedAfter time.Duration `json:"detected_after_ns,omitempty"`
	// BugVerdict is the run's combined verdict with the bug on (its last
	// try); CorrectVerdict the combined verdict on the correct node.
	BugVerdict     checker.Verdict `json:"bug_verdict"`
	CorrectVerdict checker.Verdict `json:"correct_verdict"`
	BugDir         string          `json:"bug_dir"`
	CorrectDir     string          `json:"correct_dir"`
	// Others: further checkers that said invalid with the bug on.
	Others []string `json:"others,omitempty"`
	// Error says why a run of the seed could not run; Skipped why it was
	// not run (a case that needs the Docker runtime).
	Error   string `json:"error,omitempty"`
	Skipped string `json:"skipped,omitempty"`
}

// Outcome is a case's row.
type Outcome struct {
	// Case is scenario/bug; the rest describes it for the table.
	Case     string `json:"case"`
	Bug      string `json:"bug"`
	Checker  string `json:"checker"`
	Workload string `json:"workload"`
	Faults   string `json:"faults"`
	Why      string `json:"why"`
	Seeds    []Seed `json:"seeds"`
}

// Detected counts the seeds where the bug was caught.
func (o Outcome) Detected() int {
	n := 0
	for _, s := range o.Seeds {
		if s.Detected {
			n++
		}
	}
	return n
}

// Ran counts the seeds that ran.
func (o Outcome) Ran() int {
	n := 0
	for _, s := range o.Seeds {
		if s.Error == "" && s.Skipped == "" {
			n++
		}
	}
	return n
}

// FalseAlarms counts seeds where the correct node was judged invalid.
func (o Outcome) FalseAlarms() int {
	n := 0
	for _, s := range o.Seeds {
		if s.CorrectVerdict == checker.Invalid {
			n++
		}
	}
	return n
}

// Failed reports whether the row fails the matrix: it ran and caught its
// bug in no seed, or accused the correct node in any.
func (o Outcome) Failed() bool {
	return o.Ran() > 0 && o.Detected() == 0 || o.FalseAlarms() > 0
}

// MedianDetection is the median of the detecting seeds' DetectedAfter.
func (o Outcome) MedianDetection() (time.Duration, bool) {
	var ds []time.Duration
	for _, s := range o.Seeds {
		if s.Detected {
			ds = append(ds, s.DetectedAfter)
		}
	}
	if len(ds) == 0 {
		return 0, false
	}
	slices.Sort(ds)
	return ds[len(ds)/2], true
}

// Run runs cases over seeds through s: per case and seed, the bug's tries
// and the correct node's run (one per scenario and seed, shared by the
// scenario's cases). It returns the rows and the suite's result (every run,
// for its JUnit file and summary).
func Run(ctx context.Context, s *suite.Suite, cases []scenario.Case, seeds []int64) ([]Outcome, suite.Result, error) {
	var jobs []suite.Job
	bugJob := map[[2]string]map[int64]int{}  // case → seed → job
	correctJob := map[string]map[int64]int{} // scenario → seed → job
	for _, c := range cases {
		k := [2]string{c.Scenario.Name, c.Bug.Name}
		bugJob[k] = map[int64]int{}
		if correctJob[c.Scenario.Name] == nil {
			correctJob[c.Scenario.Name] = map[int64]int{}
		}
		for _, seed := range seeds {
			bug := c.Bug
			bugJob[k][seed] = len(jobs)
			jobs = append(jobs, suite.Job{Scenario: c.Scenario, Seed: seed, Bug: &bug})
			if _, ok := correctJob[c.Scenario.Name][seed]; !ok {
				correctJob[c.Scenario.Name][seed] = len(jobs)
				jobs = append(jobs, suite.Job{Scenario: c.Scenario, Seed: seed})
			}
		}
	}
	res := s.Run(ctx, jobs)
	var outs []Outcome
	for _, c := range cases {
		o := Outcome{Case: c.Name(), Bug: c.Bug.Name, Checker: c.Bug.Checker, Workload: c.Scenario.Workload,
			Faults: c.Scenario.FaultDoc(), Why: c.Bug.Why}
		for _, seed := range seeds {
			sd := Seed{Seed: seed}
			tries := res.ByJob[bugJob[[2]string{c.Scenario.Name, c.Bug.Name}][seed]]
			correct := res.ByJob[correctJob[c.Scenario.Name][seed]]
			if len(tries) == 0 || len(correct) == 0 {
				return outs, res, fmt.Errorf("%s seed %d: interrupted: %w", c.Name(), seed, ctx.Err())
			}
			last, cr := tries[len(tries)-1], correct[0]
			sd.Tries, sd.Detected, sd.BugVerdict, sd.BugDir = len(tries), last.Caught, last.Verdict, last.Dir
			sd.CorrectVerdict, sd.CorrectDir = cr.Verdict, cr.Dir
			sd.Error = cmpOr(last.Error, cr.Error)
			sd.Skipped = cmpOr(last.Skipped, cr.Skipped)
			for _, x := range last.Invalid {
				if x != c.Bug.Checker {
					sd.Others = append(sd.Others, x)
				}
			}
			if sd.Detected {
				var err error
				if sd.DetectedAfter, err = DetectionTime(ctx, last.Dir, c.Bug.Checker); err != nil {
					return outs, res, fmt.Errorf("%s seed %d: time to detection: %w", c.Name(), seed, err)
				}
			}
			o.Seeds = append(o.Seeds, sd)
		}
		outs = append(outs, o)
	}
	return outs, res, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// DetectionTime bisects for the shortest prefix of the run in dir
// (history, node events and status samples cut at the same harness time)
// on which the checker called name, any checker the run judged by,
// already says invalid.
func DetectionTime(ctx context.Context, dir, name string) (time.Duration, error) {
	o, _, err := run.ReadOptions(dir)
	if err != nil {
		return 0, err
	}
	ck, ok := o.Checker(name)
	if !ok {
		return 0, fmt.Errorf("the run in %s has no checker %q", dir, name)
	}
	h, err := history.ReadFile(filepath.Join(dir, history.HistoryFile))
	if err != nil {
		return 0, err
	}
	if len(h.Ops) == 0 {
		return 0, fmt.Errorf("the history in %s is empty", dir)
	}
	in := checker.ReadInputs(dir)
	in.Out = "" // a prefix's files are not the run's
	invalidAt := func(cut int64) bool {
		// A prefix is a history cut off at cut: operations still open
		// there were not waited for.
		prefix := &history.File{Header: h.Header, Truncated: true}
		for _, op := range h.Ops {
			if op.Time > cut {
				break
			}
			prefix.Ops = append(prefix.Ops, op)
		}
		return ck.Check(ctx, prefix, in.Until(cut)).Verdict == checker.Invalid
	}
	lo, hi := int64(0), h.Ops[len(h.Ops)-1].Time
	if in.Events != nil {
		for _, e := range in.Events.Events {
			hi = max(hi, e.Hi)
		}
	}
	if in.Samples != nil {
		for _, s := range in.Samples.Samples {
			hi = max(hi, s.Hi)
		}
	}
	if !invalidAt(hi) {
		return 0, fmt.Errorf("%s does not say invalid on the whole run in %s", name, dir)
	}
	for hi-lo > int64(100*time.Millisecond) {
		mid := lo + (hi-lo)/2
		if invalidAt(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return time.Duration(hi), nil
}

// Markdown renders the matrix as a table.
func Markdown(outs []Outcome) string {
	var b strings.Builder
	b.WriteString("| case | faults | workload | checker | caught | tries | correct node invalid | median time to detection | also caught by |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, o := range outs {
		med := "—"
		if d, ok := o.MedianDetection(); ok {
			med = fmt.Sprintf("%.1f s", d.Seconds())
		}
		var also, tries []string
		for _, s := range o.Seeds {
			for _, x := range s.Others {
				if !slices.Contains(also, x) {
					also = append(also, x)
				}
			}
			tries = append(tries, fmt.Sprint(s.Tries))
		}
		slices.Sort(also)
		caught := fmt.Sprintf("%d of %d seeds", o.Detected(), o.Ran())
		if skipped := len(o.Seeds) - o.Ran(); skipped > 0 {
			caught += fmt.Sprintf(" (%d not run)", skipped)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %s | %s | %d of %d | %s | %s |\n",
			o.Case, strings.ReplaceAll(o.Faults, "|", `\|`), o.Workload, o.Checker, caught, strings.Join(tries, ", "),
			o.FalseAlarms(), o.Ran(), med, strings.Join(also, ", "))
	}
	return b.String()
}

// Package detect is the harness's proof of power: the detection matrix.
// For each deliberate bug of the reference node, a case names the fault
// schedule that exposes it and the checker meant to catch it. A case runs
// over several seeds, each seed twice under the same schedule: with the
// bug switched on (the checker must say invalid) and on the correct node
// (every checker must not say invalid). A harness that never finds a bug is
// worthless; one that invents bugs is worse.
//
// Time to detection is read off the history, not the wall clock: the
// earliest point of the run's history (and node events) from which the
// checker already says invalid, found by bisecting over prefixes.
package detect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/workloads"
)

// Case is one row of the matrix.
type Case struct {
	// Bug is the deliberate bug (docs/reference-node.md).
	Bug string
	// Variant tells apart cases of one bug (another workload, checker).
	Variant string
	// Checker must say invalid with the bug on.
	Checker  string
	Workload string
	// Nemesis and Interval are the fault schedule (run.Options); or
	// Schedule, a scripted one (faults may overlap).
	Nemesis  string
	Interval time.Duration
	Schedule []nemesis.Step
	// Docker: the schedule needs the Docker runtime (kernel packet
	// filters, e.g. a journal cut).
	Docker   bool
	Limit    time.Duration
	Entities int
	// BugArgs are the node flags that switch the bug on (and whatever it
	// needs, e.g. a downing strategy only the bug allows); NodeArgs go to
	// both runs (the setting that exposes the bug, e.g. fast passivation).
	BugArgs  []string
	NodeArgs []string
	// Rate limits the operations per second (0: as fast as possible).
	Rate float64
	// Concurrency is the number of client workers (default 6).
	Concurrency int
	// Why says why this schedule exposes the bug.
	Why string
}

// Name names a case: its bug, and its variant if it has one.
func (c Case) Name() string {
	if c.Variant != "" {
		return c.Bug + "/" + c.Variant
	}
	return c.Bug
}

// Cases is the matrix: every deliberate bug the harness is known to catch
// with its schedule. Bugs without a row yet are listed by Missing.
func Cases() []Case {
	return []Case{
		{
			Bug: "auto-down", Checker: "singleton-events", Workload: "idgen",
			Nemesis: "partition:isolate-oldest", Interval: 20 * time.Second, Limit: 45 * time.Second, Entities: 1,
			BugArgs: []string{"--bugs=auto-down", "--downing=auto-down", "--auto-down-after=2s"},
			Why:     "both sides of a partition down each other and keep or start the singleton: two instances at once",
		},
		{
			Bug: "singleton-no-fencing", Checker: "unique-ids", Workload: "idgen",
			Nemesis: "partition:isolate-oldest", Interval: 20 * time.Second, Limit: 45 * time.Second, Entities: 1,
			BugArgs: []string{"--bugs=auto-down,singleton-no-fencing", "--downing=auto-down", "--auto-down-after=2s"},
			Why:     "two id generators (auto-down) without journal fencing hand out the same ids",
		},
		{
			Bug: "entity-skip-replay", Checker: "linearizable", Workload: "register",
			Nemesis: "kill:one,kill:oldest", Interval: 3 * time.Second, Limit: 20 * time.Second, Entities: 20,
			BugArgs: []string{"--bugs=entity-skip-replay"},
			Why:     "entities restarted elsewhere after a crash start from an empty state: reads go back in time",
		},
		{
			Bug: "entity-skip-replay", Variant: "deliver", Checker: "delivery", Workload: "deliver",
			Nemesis: "kill:one,kill:oldest", Interval: 3 * time.Second, Limit: 20 * time.Second, Entities: 20,
			BugArgs: []string{"--bugs=entity-skip-replay"},
			Why:     "at-least-once senders restarted after a crash forget the messages they stored: acknowledged messages never arrive",
		},
		{
			Bug: "drop-passivation-buffer", Checker: "liveness", Workload: "register",
			Limit: 15 * time.Second, Entities: 30, Rate: 300,
			NodeArgs: []string{"--passivate-idle-after=30ms"},
			BugArgs:  []string{"--bugs=drop-passivation-buffer"},
			Why:      "entities passivate between requests; messages held while one stops are thrown away, so asks on a healthy cluster never get an answer",
		},
		{
			Bug: "drop-buffered-on-hand-off", Checker: "liveness", Workload: "register",
			Nemesis: "member:join,member:leave-one", Interval: 5 * time.Second, Limit: 30 * time.Second, Entities: 100,
			NodeArgs: []string{"--rebalance-interval=1s"},
			BugArgs:  []string{"--bugs=drop-buffered-on-hand-off"},
			Why:      "graceful joins and leaves move shards; messages buffered during a hand-off are thrown away, so asks get no answer with no fault to excuse it",
		},
		{
			Bug: "reorder-buffered", Checker: "sender-order", Workload: "append",
			Nemesis: "member:join,member:leave-one", Interval: 5 * time.Second, Limit: 30 * time.Second, Entities: 10,
			NodeArgs: []string{"--rebalance-interval=1s"},
			BugArgs:  []string{"--bugs=reorder-buffered"},
			Why:      "joins and leaves move shards; tells a sender pipelined while their shard was between homes wait in the region's buffer and come out newest first",
		},
		{
			Bug: "start-before-stopped", Checker: "hand-off", Workload: "register", Docker: true,
			Schedule: []nemesis.Step{
				{At: 5 * time.Second, Fault: "partition:journal-cut", Target: "one"},
				{At: 6 * time.Second, Fault: "member:join"},
				{At: 18 * time.Second, Fault: "partition:journal-cut", Heal: true},
				{At: 22 * time.Second, Fault: "member:join", Heal: true},
			},
			Limit: 25 * time.Second, Entities: 400, Concurrency: 40,
			NodeArgs: []string{"--rebalance-interval=1s"},
			BugArgs:  []string{"--bugs=start-before-stopped"},
			Why: "a node cut off from the journal cannot stop its entities quickly (their writes hang) when a join moves its shards; " +
				"the coordinator that does not wait for ShardStopped lets the shard start on the new node (for a message to another " +
				"of its entities: 400 entities over 100 shards) while the old one still runs",
		},
		{
			Bug: "no-coordinator-persistence", Checker: "hand-off", Workload: "register",
			Nemesis: "kill:coordinator", Interval: 3 * time.Second, Limit: 20 * time.Second, Entities: 50,
			BugArgs: []string{"--bugs=no-coordinator-persistence"},
			Why:     "a new coordinator starts empty and allocates shards that still run elsewhere: one shard in two regions",
		},
	}
}

// Missing lists the node's deliberate bugs without a case yet.
func Missing(bugs []string) []string {
	have := map[string]bool{}
	for _, c := range Cases() {
		have[c.Bug] = true
	}
	var out []string
	for _, b := range bugs {
		if !have[b] {
			out = append(out, b)
		}
	}
	return out
}

// Options configure a matrix run.
type Options struct {
	// Seeds are run for each case (each twice: bug, correct).
	Seeds []int64
	// Runtime returns the runtime that starts the clusters, with extra
	// node flags (the bug's).
	Runtime func(nodeArgs []string) run.Runtime
	// Results is the results root; runs go under detect-<bug>[-correct].
	Results string
	Log     *slog.Logger
	// Progress, if set, hears about every finished run.
	Progress func(line string)
}

// Seed is one seed of a case.
type Seed struct {
	Seed int64 `json:"seed"`
	// Detected: the case's checker said invalid with the bug on.
	Detected bool `json:"detected"`
	// DetectedAfter is how much of the run's history the checker needed.
	DetectedAfter time.Duration `json:"detected_after_ns,omitempty"`
	// BugVerdict is the checker's verdict with the bug on; CorrectVerdict
	// the combined verdict on the correct node.
	BugVerdict     checker.Verdict `json:"bug_verdict"`
	CorrectVerdict checker.Verdict `json:"correct_verdict"`
	BugDir         string          `json:"bug_dir"`
	CorrectDir     string          `json:"correct_dir"`
	// Others: further checkers that caught the bug.
	Others []string `json:"others,omitempty"`
}

// Outcome is a case's row.
type Outcome struct {
	Case  Case   `json:"case"`
	Seeds []Seed `json:"seeds"`
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

// Options are the run options of one seed of the case, with its bug on or
// not (the correct node, under the same schedule).
func (c Case) Options(seed int64, withBug bool) run.Options {
	o := run.Options{
		Name: "detect-" + strings.ReplaceAll(c.Name(), "/", "-"), Workload: c.Workload,
		Nodes: 3, Concurrency: max(c.Concurrency, 6), Rate: c.Rate, TimeLimit: c.Limit, OpTimeout: 3 * time.Second,
		Entities: c.Entities, PerEntity: 2, Seed: seed,
		Nemesis: c.Nemesis, NemesisInterval: c.Interval,
		Schedule: nemesis.SeedSchedule(c.Schedule, seed),
	}
	o.NodeArgs = append([]string(nil), c.NodeArgs...)
	if withBug {
		o.NodeArgs = append(o.NodeArgs, c.BugArgs...)
	} else {
		o.Name += "-correct"
	}
	return o
}

// RunCase runs one case over opts.Seeds.
func RunCase(ctx context.Context, c Case, opts Options) (Outcome, error) {
	w, err := workloads.Named(c.Workload)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Case: c}
	for _, seed := range opts.Seeds {
		s := Seed{Seed: seed}
		for _, withBug := range []bool{true, false} {
			o := c.Options(seed, withBug)
			rt := opts.Runtime(o.NodeArgs)
			o.Runtime = rt.Name()
			t := &run.Test{Options: o, Runtime: rt, Workload: w, Log: opts.Log}
			res, err := t.Run(ctx, opts.Results)
			if err != nil {
				return out, fmt.Errorf("%s seed %d (bug %v): %w", c.Name(), seed, withBug, err)
			}
			if withBug {
				s.BugDir = res.Dir
				s.BugVerdict = checker.Unknown
				for _, r := range res.Checks {
					switch {
					case r.Checker == c.Checker:
						s.BugVerdict = r.Verdict
					case r.Verdict == checker.Invalid:
						s.Others = append(s.Others, r.Checker)
					}
				}
				s.Detected = s.BugVerdict == checker.Invalid
				if s.Detected {
					s.DetectedAfter, err = detectionTime(ctx, c, res.Dir)
					if err != nil {
						return out, err
					}
				}
			} else {
				s.CorrectDir, s.CorrectVerdict = res.Dir, res.Verdict
			}
			if opts.Progress != nil {
				verdict := res.Verdict
				opts.Progress(fmt.Sprintf("%s seed %d %s: verdict %s (%s)", c.Name(), seed, map[bool]string{true: "with the bug", false: "correct node"}[withBug], verdict, res.Dir))
			}
		}
		out.Seeds = append(out.Seeds, s)
	}
	return out, nil
}

// detectionTime bisects for the shortest prefix of the run (history and
// node events cut at the same harness time) on which the case's checker
// already says invalid.
func detectionTime(ctx context.Context, c Case, dir string) (time.Duration, error) {
	h, err := history.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return 0, err
	}
	evs, err := history.ReadEventsFile(filepath.Join(dir, "events.jsonl"))
	if errors.Is(err, history.ErrNoEvents) {
		evs, err = &history.Events{}, nil
	}
	if err != nil {
		return 0, err
	}
	var ck checker.Checker
	for _, x := range checker.ForWorkload(c.Workload) {
		if x.Name() == c.Checker {
			ck = x
		}
	}
	if ck == nil || len(h.Ops) == 0 {
		return 0, fmt.Errorf("detect: no checker %q for %s", c.Checker, c.Workload)
	}
	tmp, err := os.MkdirTemp("", "shardtest-detect")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	invalidAt := func(cut int64) (bool, error) {
		// A prefix is a history cut off at cut: operations still open
		// there were not waited for.
		prefix := &history.File{Header: h.Header, Truncated: true}
		for _, op := range h.Ops {
			if op.Time > cut {
				break
			}
			prefix.Ops = append(prefix.Ops, op)
		}
		sub, err := os.MkdirTemp(tmp, "cut")
		if err != nil {
			return false, err
		}
		ew, err := history.CreateEvents(filepath.Join(sub, "events.jsonl"))
		if err != nil {
			return false, err
		}
		for _, e := range evs.Events {
			if e.Hi <= cut {
				ew.Write(e)
			}
		}
		if err := ew.Close(); err != nil {
			return false, err
		}
		return ck.Check(ctx, prefix, sub).Verdict == checker.Invalid, nil
	}
	lo, hi := int64(0), h.Ops[len(h.Ops)-1].Time
	for _, e := range evs.Events {
		hi = max(hi, e.Hi)
	}
	for hi-lo > int64(100*time.Millisecond) {
		mid := lo + (hi-lo)/2
		bad, err := invalidAt(mid)
		if err != nil {
			return 0, err
		}
		if bad {
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
	b.WriteString("| bug | fault | workload | checker | detected | correct node invalid | median time to detection | also caught by |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, o := range outs {
		med := "—"
		if d, ok := o.MedianDetection(); ok {
			med = fmt.Sprintf("%.1f s", d.Seconds())
		}
		others := map[string]bool{}
		for _, s := range o.Seeds {
			for _, x := range s.Others {
				others[x] = true
			}
		}
		var also []string
		for x := range others {
			also = append(also, x)
		}
		sort.Strings(also)
		fault := fmt.Sprintf("`%s` (every %v, %v)", o.Case.Nemesis, o.Case.Interval, o.Case.Limit)
		switch {
		case len(o.Case.Schedule) > 0:
			var steps []string
			for _, st := range o.Case.Schedule {
				steps = append(steps, st.String())
			}
			fault = fmt.Sprintf("scripted: %s (%v)", strings.Join(steps, "; "), o.Case.Limit)
		case o.Case.Nemesis == "":
			fault = fmt.Sprintf("none (%v)", o.Case.Limit)
		}
		if len(o.Case.NodeArgs) > 0 {
			fault += ", nodes `" + strings.Join(o.Case.NodeArgs, " ") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %d of %d seeds | %d of %d | %s | %s |\n",
			o.Case.Name(), fault, o.Case.Workload, o.Case.Checker,
			o.Detected(), len(o.Seeds), o.FalseAlarms(), len(o.Seeds), med, strings.Join(also, ", "))
	}
	return b.String()
}

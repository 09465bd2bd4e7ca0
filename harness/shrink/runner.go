package shrink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/workloads"
)

// Runs is the Runner that runs candidates as real runs of the failing
// run's test: its workload, seed, runtime, image and node arguments, with
// the candidate's schedule and knobs.
type Runs struct {
	// Original is the failing run's options (its test.json).
	Original run.Options
	// Checker must say invalid for a try to count as failing.
	Checker string
	// Runtime is where the tries run (the failing run's runtime).
	Runtime run.Runtime
	// Results is the folder the tries' run folders go under.
	Results string
	Log     *slog.Logger
}

// Options is the run options of candidate t.
func (r *Runs) Options(t Test) run.Options {
	o := r.Original
	o.Name = "try"
	o.RunID = ""
	o.Nemesis = ""
	o.Schedule = t.Steps
	o.TimeLimit, o.Nodes, o.Entities, o.Concurrency, o.Rate = t.TimeLimit, t.Nodes, t.Entities, t.Concurrency, t.Rate
	o.PerEntity = min(o.PerEntity, max(t.Concurrency, 1))
	return o
}

// Try implements Runner.
func (r *Runs) Try(ctx context.Context, t Test, _ int) (bool, string, error) {
	o := r.Options(t)
	w, err := workloads.Named(o.Workload)
	if err != nil {
		return false, "", err
	}
	test := &run.Test{Options: o, Runtime: r.Runtime, Workload: w, Log: r.Log}
	res, err := test.Run(ctx, r.Results)
	if err != nil {
		return false, res.Dir, err
	}
	_, caught, _ := checker.Caught(res.Checks, r.Checker)
	return caught, res.Dir, nil
}

// MinNodes implements Runner: the fewest nodes every fault of steps fits.
func (r *Runs) MinNodes(steps []nemesis.Step) int {
	for n := 1; n < r.Original.Nodes; n++ {
		o := r.Original
		o.Nodes, o.Nemesis, o.Schedule = n, "", steps
		t := &run.Test{Options: o, Runtime: r.Runtime}
		if t.Precheck() == nil {
			return n
		}
	}
	return r.Original.Nodes
}

// From is the search's starting point: the failing run's test.
func From(o run.Options, rt run.Runtime) (Test, error) {
	steps, err := (&run.Test{Options: o, Runtime: rt}).PlannedSchedule()
	if err != nil {
		return Test{}, fmt.Errorf("shrink: the run's fault schedule: %w", err)
	}
	return Test{Steps: steps, TimeLimit: o.TimeLimit, Nodes: o.Nodes, Entities: o.Entities, Concurrency: o.Concurrency, Rate: o.Rate}, nil
}

// Job is the shrink of one stored invalid run, checked and ready to
// search.
type Job struct {
	// Dir is the failing run's folder and Checker the checker that must
	// say invalid again.
	Dir, Checker string
	Start        Test
	Runner       *Runs
	// Out is the search's folder (Search creates it).
	Out string
}

// Prepare reads the stored run in dir and refuses, before anything is
// written, what cannot be shrunk: a run that is not invalid (or not by
// checkerName, "": its first invalid checker), a checker that does not
// judge it, a runtime that cannot start, a first try its runtime would
// refuse (ports taken, faults that do not fit). The search's folder is
// <results>/shrink/<now>/.
func Prepare(dir, checkerName, results string, rc run.RuntimeConfig, now time.Time) (*Job, error) {
	orig, _, err := run.ReadOptions(dir)
	if err != nil {
		return nil, fmt.Errorf("shrink: %w", err)
	}
	res, err := run.ReadResult(dir)
	if err != nil {
		return nil, fmt.Errorf("shrink: %w", err)
	}
	if checkerName == "" {
		for _, c := range res.Checks {
			if c.Verdict == checker.Invalid {
				checkerName = c.Checker
				break
			}
		}
	}
	if checkerName == "" {
		return nil, fmt.Errorf("shrink: %s is %s: no checker said invalid, nothing to shrink", dir, res.Verdict)
	}
	if _, ok := checker.Lookup(checkerName); !ok {
		return nil, fmt.Errorf("shrink: --checker %q: no such checker (shardtest list checkers: %s)", checkerName, strings.Join(checker.Names(), ", "))
	}
	if _, ok := orig.Checker(checkerName); !ok {
		return nil, fmt.Errorf("shrink: --checker %s does not judge the run in %s (a %s run)", checkerName, dir, orig.Workload)
	}
	rt, err := run.NewRuntime(orig, rc)
	if err != nil {
		return nil, err
	}
	start, err := From(orig, rt)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(results, "shrink", now.UTC().Format("20060102T150405Z"))
	runner := &Runs{Original: orig, Checker: checkerName, Runtime: rt, Results: filepath.Join(out, "runs"), Log: rc.Log}
	if err := (&run.Test{Options: runner.Options(start), Runtime: rt}).Precheck(); err != nil {
		return nil, fmt.Errorf("shrink: %w", err)
	}
	return &Job{Dir: dir, Checker: checkerName, Start: start, Runner: runner, Out: out}, nil
}

// Search runs the search with o, writes its folder and returns what it
// found; err is a search that could not run its tries (the folder says
// how far it got).
func (j *Job) Search(ctx context.Context, o Options) (Result, error) {
	if err := os.MkdirAll(j.Out, 0o755); err != nil {
		return Result{}, err
	}
	r, err := Shrink(ctx, j.Start, j.Runner, o)
	if werr := j.Runner.Write(j.Out, j.Dir, r); werr != nil {
		return r, errors.Join(err, werr)
	}
	return r, err
}

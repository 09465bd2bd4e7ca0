package shrink

import (
	"context"
	"fmt"
	"log/slog"

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

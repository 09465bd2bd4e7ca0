package main

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/explore"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/harness/suite"
)

// exploreFlags are explore's flags, which bench explore shares: the runs'
// settings (run's, or a scenario's), the faults, the campaign's bounds.
type exploreFlags struct {
	cfg                   explore.Config
	results, binary, name string
	scenarioName, bug     string
	basePort              int
}

func (e *exploreFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	testFlags(cmd, &e.cfg.Base, 5*time.Second)
	f.StringVar(&e.cfg.Base.Nemesis, "nemesis", "", "faults to draw from, comma-separated full names or families (default: the scenario's families, or partition,kill,pause,member)")
	f.Int64Var(&e.cfg.Base.Seed, "seed", time.Now().UnixNano()%1_000_000, "the campaign's seed (each run's seed is drawn from it)")
	f.StringVar(&e.scenarioName, "scenario", "", "take the runs' cluster, workload, tuning and expectations from a scenario of the catalogue (not its schedule)")
	f.StringVar(&e.bug, "bug", "", "with --scenario: switch on this deliberate bug of the reference node (one the scenario names)")
	f.StringVar(&e.name, "name", "", "the runs' test name (default: the scenario's or workload's)")
	f.DurationVar(&e.cfg.Budget, "budget", 0, "no run starts after this long (give --budget or --runs)")
	f.IntVar(&e.cfg.Runs, "runs", 0, "at most this many runs")
	f.IntVar(&e.cfg.Parallel, "parallel", 1, "runs at once (each its own cluster; local: its own range of 200 ports from --base-port)")
	f.BoolVar(&e.cfg.KeepGoing, "keep-going", false, "do not stop at the first invalid run")
	f.StringVar(&e.results, "results", "results", "results root folder")
	f.StringVar(&e.binary, "binary", "", "docker: static shardtest binary for the reference image (as run's)")
	f.IntVar(&e.basePort, "base-port", 17400, "local: the first worker's journal port")
}

// config is the campaign's settings from the flags, with its runtimes;
// release frees the local ports it holds. The campaign's folder is
// <results>/<kind>/<time>/.
func (e *exploreFlags) config(cmd *cobra.Command, kind string) (cfg explore.Config, release func(), err error) {
	cfg = e.cfg
	o := &cfg.Base
	if e.scenarioName != "" {
		sc, err := scenario.Named(e.scenarioName)
		if err != nil {
			return cfg, nil, err
		}
		so, err := scenarioOptions(cmd, e.scenarioName, *o, "nemesis", "nemesis-interval")
		if err != nil {
			return cfg, nil, err
		}
		if e.bug != "" {
			i := slices.IndexFunc(sc.Bugs, func(b scenario.Bug) bool { return b.Name == e.bug })
			if i < 0 {
				return cfg, nil, fmt.Errorf("--bug %s: scenario %s names no such bug (shardtest list scenarios)", e.bug, e.scenarioName)
			}
			so.NodeArgs = append(so.NodeArgs, sc.Bugs[i].Args...)
		}
		nem, interval := o.Nemesis, o.NemesisInterval
		if !cmd.Flags().Changed("nemesis") {
			nem = scenarioFamilies(so)
		}
		if !cmd.Flags().Changed("nemesis-interval") && so.NemesisInterval > 0 {
			interval = so.NemesisInterval
		}
		*o = so
		o.Schedule, o.Nemesis, o.NemesisInterval = nil, nem, interval
	} else if e.bug != "" {
		return cfg, nil, errors.New("--bug needs --scenario (the bug's flags and the situation come from it)")
	}
	o.Name = cmp.Or(e.name, e.scenarioName, o.Workload)
	o.Nemesis = cmp.Or(o.Nemesis, "partition,kill,pause,member")
	if cmd.Flags().Changed("budget") && cfg.Budget <= 0 {
		return cfg, nil, fmt.Errorf("--budget %v: want a time above 0 (or leave it out and give --runs)", cfg.Budget)
	}
	if cmd.Flags().Changed("runs") && cfg.Runs <= 0 {
		return cfg, nil, fmt.Errorf("--runs %d: want at least 1 (or leave it out and give --budget)", cfg.Runs)
	}
	logger, err := newLogger("warn", "text")
	if err != nil {
		return cfg, nil, err
	}
	cfg.Log, cfg.Store = logger, e.results
	cfg.Dir = filepath.Join(e.results, kind, time.Now().UTC().Format("20060102T150405Z"))
	bases := []int{e.basePort}
	cfg.NewRuntime = func(ro run.Options, w int) (run.Runtime, error) {
		return run.NewRuntime(ro, run.RuntimeConfig{Binary: e.binary, BasePort: bases[min(w, len(bases)-1)], Log: logger})
	}
	// Checked before the ports are held: a refused campaign holds nothing.
	probe := cfg
	probe.Dir = filepath.Join(cfg.Dir, "probe")
	if _, err := explore.New(probe); err != nil {
		return cfg, nil, err
	}
	release = func() {}
	if o.Runtime == "local" {
		// Each worker its own range of ports, held until the end.
		b, rel, err := suite.ReservePortRanges(e.basePort, cfg.Parallel)
		if err != nil {
			return cfg, nil, fmt.Errorf("--base-port %d: %w", e.basePort, err)
		}
		bases, release = b, rel
	}
	return cfg, release, nil
}

// scenarioFamilies are the families of a scenario's faults.
func scenarioFamilies(o run.Options) string {
	var fams []string
	add := func(name string) {
		fam, _, _ := strings.Cut(name, ":")
		if fam != "" && !slices.Contains(fams, fam) {
			fams = append(fams, fam)
		}
	}
	for _, n := range strings.Split(o.Nemesis, ",") {
		add(strings.TrimSpace(n))
	}
	for _, s := range o.Schedule {
		add(s.Fault)
	}
	return strings.Join(fams, ",")
}

package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/workloads"
)

func newRunCmd() *cobra.Command {
	var (
		o         run.Options
		results   string
		binary    string
		basePort  int
		testCount int
		keep      bool
		checkJobs int
		// scenarioName takes the test from the catalogue.
		scenarioName string
		// scheduleFile is a fault schedule of the user's (docs/schedules.md).
		scheduleFile string
		schedule     []nemesis.Step
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a test: start a cluster, drive a workload, record and store the history",
		Long: `Run a test against a cluster of nodes: start the cluster (Docker by default,
or --runtime local), drive the workload's traffic from --concurrency client
workers for --time-limit, then read back every entity touched, so lost writes
show. Every invocation and completion is recorded with the harness's own
monotonic clock in results/<name>/<time>/history.jsonl (docs/history.md), next
to test.json (every option and the seed), results.json (counts and verdict)
and the nodes' logs; results/latest points at the newest run.

--schedule FILE injects and heals faults at the times a schedule file gives
(docs/schedules.md: your own scenario, without recompiling; what shardtest
shrink writes).

The same --seed gives the same operation schedule, and with --nemesis the
same fault schedule: after a quiet --nemesis-interval, a fault is injected,
held for an interval, healed, and so on; every inject and heal is recorded in
the history with its targets and the time it took effect. After the main
phase every fault is healed and the harness waits until the cluster has
converged (every node ready and seeing every other up), and at least 15 s
after the last heal (shards of a crashed member move only after it is
downed), before the final
read-back. Faults the runtime or the implementation cannot take (as its
/v1/capabilities says) are refused before the test starts. Clock skew is the
node's in-process clock (docs/protocol.md): containers share the host clock.

Outcomes: ok; fail (definitely did not happen: the node said so); info
(unknown: timeout, lost connection) — never counted as a failure.

At the end the workload's checkers read the history (register:
linearizability per entity with porcupine, HTML visualization of any failing
entity; idgen: unique ids increasing in real-time order) and the verdict goes
into results.json.

Exit status: 0 valid, 1 invalid, 2 unknown (including a workload with no
checker yet), 3 the test could not run; with --test-count, the worst: invalid
before could not run before unknown.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scenarioName != "" {
				var err error
				if o, err = scenarioOptions(cmd, scenarioName, o); err != nil {
					return &exitError{exitCannotRun, err}
				}
			}
			if scheduleFile != "" {
				switch {
				case scenarioName != "":
					return &exitError{exitCannotRun, errors.New("--schedule and --scenario: a scenario has its own schedule")}
				case o.Nemesis != "":
					return &exitError{exitCannotRun, errors.New("--schedule and --nemesis: give one (the schedule names its faults)")}
				}
				f, err := os.Open(scheduleFile)
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("--schedule: %w", err)}
				}
				schedule, err = nemesis.ReadSchedule(f)
				f.Close()
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("--schedule %s: %w", scheduleFile, err)}
				}
				o.Schedule = nemesis.SeedSchedule(schedule, o.Seed)
			}
			if o.Name == "" {
				o.Name = o.Workload
			}
			if testCount < 1 {
				return &exitError{exitCannotRun, fmt.Errorf("--test-count %d: want at least 1", testCount)}
			}
			if _, err := checker.Jobs(checkJobs); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("--%w", err)}
			}
			if keep && (o.Runtime != "docker" || testCount > 1) {
				return &exitError{exitCannotRun, errors.New("--keep needs --runtime docker and a single test")}
			}
			w, err := workloads.Named(o.Workload)
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			if err := o.Validate(); err != nil {
				return &exitError{exitCannotRun, err}
			}
			logger, err := newLogger("info", "text")
			if err != nil {
				return err
			}
			rt, err := run.NewRuntime(o, run.RuntimeConfig{Binary: binary, BasePort: basePort, Log: logger})
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			if o.Runtime == "local" {
				// The range is this command's until it ends, across its
				// tests: another run or suite on it is refused at once.
				release, err := local.ReservePorts(basePort)
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("--base-port %d: %w", basePort, err)}
				}
				defer release()
			}
			// Each test of --test-count gets the next seed, so the series
			// is reproducible from the first.
			worst := exitValid
			for i := range testCount {
				to := o
				to.Seed = o.Seed + int64(i)
				if schedule != nil {
					// The script's times and faults stay; its targets
					// follow each test's seed.
					to.Schedule = nemesis.SeedSchedule(schedule, to.Seed)
				}
				t := &run.Test{Options: to, Runtime: rt, Workload: w, Log: logger, Keep: keep, CheckJobs: checkJobs}
				if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
					// A live progress line, only on a terminal.
					t.Progress = func(line string) { fmt.Fprintf(os.Stderr, "\r%s ", line) }
				}
				res, err := t.Run(cmd.Context(), results)
				if t.Progress != nil {
					fmt.Fprintln(os.Stderr)
				}
				if err != nil {
					if res.Dir != "" {
						fmt.Fprintf(cmd.OutOrStdout(), "results (incomplete): %s\n", res.Dir)
						printReports(cmd.OutOrStdout(), res.Dir)
					}
					return &exitError{exitCannotRun, err}
				}
				s := res.Summary
				fmt.Fprintf(cmd.OutOrStdout(), "%s (seed %d): %d operations: %d ok, %d fail, %d info (unknown); verdict %s\n",
					o.Name, to.Seed, s.Invocations, s.OK, s.Fail, s.Info, res.Verdict)
				printChecks(cmd.OutOrStdout(), res.Checks)
				if res.Coverage != nil {
					fmt.Fprintln(cmd.OutOrStdout(), res.Coverage.Line())
				}
				fmt.Fprintf(cmd.OutOrStdout(), "results: %s\n", res.Dir)
				printReports(cmd.OutOrStdout(), res.Dir)
				worst = run.Worse(worst, run.ExitFor(res.Verdict))
				if keep {
					fmt.Fprintf(cmd.OutOrStdout(), "cluster left running; remove it with: shardtest cleanup --run %s\n", t.Options.RunID)
				}
			}
			if worst != exitValid {
				return &exitError{worst, fmt.Errorf("verdict: %s", run.VerdictFor(worst))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenarioName, "scenario", "", "run a scenario of the catalogue (shardtest list scenarios): it sets the cluster, workload, faults and checkers; --seed, --runtime, --node-arg and the output flags still apply")
	f.StringVar(&o.Name, "name", "", "test name, the results folder (default: the workload's or scenario's name)")
	testFlags(cmd, &o, 10*time.Second)
	f.Int64Var(&o.Seed, "seed", time.Now().UnixNano()%1_000_000, "seed of the operation schedule")
	f.StringVar(&o.Nemesis, "nemesis", "", "faults to inject, comma-separated full names or families (partition, loss, kill, pause, clock, member; shardtest list nemeses); none by default")
	f.StringVar(&scheduleFile, "schedule", "", "a fault schedule file (docs/schedules.md): faults at fixed times of the main phase, instead of --nemesis")
	f.StringVar(&results, "results", "results", "results root folder")
	f.IntVar(&testCount, "test-count", 1, "run this many tests in a row, with seeds --seed, --seed+1, ...")
	f.IntVar(&checkJobs, "jobs", runtime.NumCPU(), "goroutines that judge the history after the run, as check --jobs (default: the cores)")
	f.BoolVar(&keep, "keep", false, "docker: leave the cluster running after the test, for inspection")
	f.StringVar(&binary, "binary", "", "docker: static shardtest binary for the reference image, which runs the journal (and the nodes without --image) (default: this one if static, else a CGO_ENABLED=0 build of the source it finds: the working directory's module or the one it was built from)")
	f.IntVar(&basePort, "base-port", 17400, "local: journal port; node i uses base+i (HTTP) and base+100+i (gossip)")
	return cmd
}

// testFlags are the flags of a test's cluster, workload and traffic, which
// run and explore share; interval is --nemesis-interval's default.
func testFlags(cmd *cobra.Command, o *run.Options, interval time.Duration) {
	f := cmd.Flags()
	f.StringVar(&o.Runtime, "runtime", "docker", "where nodes run: docker, local (child processes on 127.0.0.1) or sim (the reference node in deterministic simulation, virtual time)")
	f.StringVar(&o.Workload, "workload", "register", "workload: register, append or idgen (shardtest list workloads)")
	f.IntVar(&o.Nodes, "nodes", 3, "number of nodes")
	f.IntVar(&o.Concurrency, "concurrency", 6, "client workers")
	f.Float64Var(&o.Rate, "rate", 0, "operations per second in total (0: as fast as the workers go)")
	f.DurationVar(&o.TimeLimit, "time-limit", 30*time.Second, "how long the main phase drives traffic")
	f.DurationVar(&o.OpTimeout, "op-timeout", protocol.DefaultOpTimeout, "timeout of one operation (then its outcome is unknown)")
	f.IntVar(&o.Entities, "entities", 100, "size of the key space")
	f.Float64Var(&o.Skew, "skew", 0, "key distribution: 0 uniform, above 1 Zipf with this exponent")
	f.IntVar(&o.PerEntity, "per-entity", 3, "most workers that may have an operation in flight on one entity")
	f.StringArrayVar(&o.NodeArgs, "node-arg", nil, "extra flag for every node, repeatable")
	f.StringVar(&o.Image, "image", "", "docker: run the nodes from this image, already in the engine (never pulled), any implementation of docs/protocol.md (default: the reference node); the journal and the packet-filter sidecars still run from the reference image (see --binary); the harness refuses a workload the image does not declare")
	f.DurationVar(&o.NemesisInterval, "nemesis-interval", interval, "time between fault actions: quiet, inject, hold, heal, quiet, ... (each ±25 %, from --seed)")
}

// scenarioFlags are run's flags a scenario sets itself.
var scenarioFlags = []string{"workload", "nodes", "concurrency", "rate", "time-limit", "op-timeout", "entities", "skew", "per-entity", "nemesis", "nemesis-interval"}

// scenarioOptions returns the named scenario's options, keeping what the
// user may still choose (name, seed, runtime, image, extra node flags) from
// flags, and refusing flags the scenario sets (but those allowed).
func scenarioOptions(cmd *cobra.Command, name string, flags run.Options, allowed ...string) (run.Options, error) {
	s, err := scenario.Named(name)
	if err != nil {
		return run.Options{}, err
	}
	for _, f := range scenarioFlags {
		if cmd.Flags().Changed(f) && !slices.Contains(allowed, f) {
			return run.Options{}, fmt.Errorf("--%s: scenario %s sets it (shardtest list scenarios)", f, name)
		}
	}
	if err := s.RunsOn(flags.Runtime); err != nil {
		return run.Options{}, err
	}
	o := s.Options(flags.Seed, flags.Runtime, nil)
	o.NodeArgs = append(o.NodeArgs, flags.NodeArgs...)
	o.Image = flags.Image
	if cmd.Flags().Changed("name") {
		o.Name = flags.Name
	}
	return o, nil
}

package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/bench"
	"github.com/shardtest/shardtest/history"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the harness against a yardstick run in the same command",
		Long: `Benchmarks that anyone can reproduce: each generates its input, runs the
yardstick and the real thing in the same command, and prints their ratios as
its last line. Figures are ratios, so they compare across machines.`,
	}
	cmd.AddCommand(newBenchCheckCmd(), newBenchBaselineCmd(), newBenchRouteCmd(), newBenchRelayCmd(), newBenchEchoCmd(), newBenchExploreCmd(), newBenchRunCmd(), newBenchSimCmd(), newBenchClusterCmd(), newBenchLoadCmd(), newBenchEntitiesCmd())
	return cmd
}

func newBenchCheckCmd() *cobra.Command {
	var o bench.RegisterOptions
	var repeat, jobs int
	var dir string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "shardtest check of a long register history against decoding it and running porcupine",
		Long: `Generate a linearizable register history of --ops operations (the register
workload's own operations, at most --per-entity in flight on one entity, a final
read of every entity), then, --repeat times each, time and take the peak
resident memory of two child processes:

  check     shardtest check --jobs N DIR: every checker of the register
            workload, and the report, on N cores (default: every core)
  baseline  the least a linearizability check must do: decode every line
            with encoding/json and run porcupine on each entity

and print the medians (wall time, CPU time, peak resident memory), the last
line being
  check/baseline: time 0.82x, peak rss 0.71x, cpu 0.80x
Exit status: 0 measured; 3 the measurement could not be made (or check did not
say valid on a history that is valid by construction).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repeat < 1 {
				return &exitError{exitCannotRun, fmt.Errorf("--repeat %d: want at least 1", repeat)}
			}
			if _, err := checker.Jobs(jobs); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("--%w", err)}
			}
			self, err := os.Executable()
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			if dir == "" {
				tmp, err := os.MkdirTemp("", "shardtest-bench-")
				if err != nil {
					return &exitError{exitCannotRun, err}
				}
				defer os.RemoveAll(tmp)
				dir = filepath.Join(tmp, "run")
			} else if _, err := os.Stat(dir); err == nil {
				return &exitError{exitCannotRun, fmt.Errorf("--dir %s exists: give a new folder", dir)}
			}
			out := cmd.OutOrStdout()
			start := time.Now()
			if err := bench.GenRegister(dir, o); err != nil {
				return &exitError{exitCannotRun, err}
			}
			st, _ := os.Stat(filepath.Join(dir, history.HistoryFile))
			fmt.Fprintf(out, "generated %d operations over %d entities (%d workers, ≤ %d in flight per entity) in %s: %s, %d MB\n",
				o.Ops, o.Entities, o.Workers, o.PerEntity, time.Since(start).Round(time.Millisecond), dir, st.Size()>>20)
			var checks, bases []measure
			for i := range repeat {
				c, err := measureChild(cmd, self, "check", "--jobs", strconv.Itoa(jobs), dir)
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("check: %w", err)}
				}
				b, err := measureChild(cmd, self, "bench", "baseline", filepath.Join(dir, history.HistoryFile))
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("baseline: %w", err)}
				}
				fmt.Fprintf(out, "try %d: check %s; baseline %s\n", i+1, c, b)
				checks, bases = append(checks, c), append(bases, b)
			}
			c, b := median(checks), median(bases)
			fmt.Fprintf(out, "median of %d: check %s; baseline %s\n", repeat, c, b)
			fmt.Fprintf(out, "check/baseline: time %.2fx, peak rss %.2fx, cpu %.2fx\n", c.wall.Seconds()/b.wall.Seconds(), float64(c.rssKB)/float64(b.rssKB), c.cpu.Seconds()/b.cpu.Seconds())
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Ops, "ops", 1_000_000, "operations (an invocation and its completion each)")
	f.IntVar(&o.Entities, "entities", 10_000, "register entities")
	f.IntVar(&o.Workers, "workers", 64, "simulated client workers")
	f.IntVar(&o.PerEntity, "per-entity", 8, "at most this many operations in flight on one entity")
	f.Float64Var(&o.InfoRate, "info-rate", 0.01, "share of unknown outcomes")
	f.Float64Var(&o.FailRate, "fail-rate", 0.01, "share of failed outcomes")
	f.Int64Var(&o.Seed, "seed", 1, "seed of the generated history")
	f.IntVar(&repeat, "repeat", 3, "tries of each; the medians are reported")
	f.IntVar(&jobs, "jobs", runtime.NumCPU(), "check --jobs: goroutines that judge at once (the baseline uses one)")
	f.StringVar(&dir, "dir", "", "keep the generated run folder here (a new folder; default: a temporary one, removed)")
	return cmd
}

// newBenchBaselineCmd is the yardstick's process (hidden: bench check
// runs it, so its memory is measured on its own).
func newBenchBaselineCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "baseline HISTORY",
		Short:  "decode a register history with encoding/json and run porcupine per entity",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			defer f.Close()
			ok, illegal, err := checker.BaselineRegister(cmd.Context(), f)
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d entities linearizable, %d not\n", ok, illegal)
			return nil
		},
	}
}

type measure struct {
	wall, cpu time.Duration // cpu: user and system time
	rssKB     int64
}

func (m measure) String() string {
	return fmt.Sprintf("%s (cpu %s), %d MB", m.wall.Round(time.Millisecond), m.cpu.Round(time.Millisecond), m.rssKB>>10)
}

// measureChild runs this binary with args and returns its wall time and
// peak resident memory; it must exit 0.
func measureChild(cmd *cobra.Command, self string, args ...string) (measure, error) {
	c := exec.CommandContext(cmd.Context(), self, args...)
	var stderr bytes.Buffer
	c.Stdout, c.Stderr = io.Discard, &stderr
	start := time.Now()
	err := c.Run()
	m := measure{wall: time.Since(start)}
	if c.ProcessState != nil {
		if ru, ok := c.ProcessState.SysUsage().(*syscall.Rusage); ok {
			m.rssKB = ru.Maxrss
		}
		m.cpu = c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return m, fmt.Errorf("%v exited %d: %s", args, ee.ExitCode(), bytes.TrimSpace(stderr.Bytes()))
		}
		return m, err
	}
	if m.rssKB == 0 {
		return m, errors.New("no peak memory reported by the operating system")
	}
	return m, nil
}

func median(ms []measure) measure {
	w := make([]time.Duration, len(ms))
	u := make([]time.Duration, len(ms))
	r := make([]int64, len(ms))
	for i, m := range ms {
		w[i], u[i], r[i] = m.wall, m.cpu, m.rssKB
	}
	slices.Sort(w)
	slices.Sort(u)
	slices.Sort(r)
	return measure{wall: w[len(w)/2], cpu: u[len(u)/2], rssKB: r[len(r)/2]}
}

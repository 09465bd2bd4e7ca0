package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/bench"
	"github.com/shardtest/shardtest/harness/local"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the harness against a yardstick run in the same command",
		Long: `Benchmarks that anyone can reproduce: each generates its input, runs the
yardstick and the real thing in the same command, and prints their ratios as
its last line. Figures are ratios, so they compare across machines.`,
	}
	cmd.AddCommand(newBenchCheckCmd(), newBenchBaselineCmd(), newBenchRouteCmd(), newBenchRelayCmd(), newBenchEchoCmd())
	return cmd
}

func newBenchCheckCmd() *cobra.Command {
	var o bench.RegisterOptions
	var repeat int
	var dir string
	cmd := &cobra.Command{
		Use:   "check",
		Short: "shardtest check of a long register history against decoding it and running porcupine",
		Long: `Generate a linearizable register history of --ops operations (the register
workload's own operations, at most --per-entity in flight on one entity, a final
read of every entity), then, --repeat times each, time and take the peak
resident memory of two child processes:

  check     shardtest check DIR: every checker of the register workload, and
            the report
  baseline  the least a linearizability check must do: decode every line
            with encoding/json and run porcupine on each entity

and print the medians, the last line being
  check/baseline: time 0.82x, peak rss 0.71x
Exit status: 0 measured; 3 the measurement could not be made (or check did not
say valid on a history that is valid by construction).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repeat < 1 {
				return &exitError{exitCannotRun, fmt.Errorf("--repeat %d: want at least 1", repeat)}
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
			st, _ := os.Stat(filepath.Join(dir, "history.jsonl"))
			fmt.Fprintf(out, "generated %d operations over %d entities (%d workers, ≤ %d in flight per entity) in %s: %s, %d MB\n",
				o.Ops, o.Entities, o.Workers, o.PerEntity, time.Since(start).Round(time.Millisecond), dir, st.Size()>>20)
			var checks, bases []measure
			for i := range repeat {
				c, err := measureChild(cmd, self, "check", dir)
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("check: %w", err)}
				}
				b, err := measureChild(cmd, self, "bench", "baseline", filepath.Join(dir, "history.jsonl"))
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("baseline: %w", err)}
				}
				fmt.Fprintf(out, "try %d: check %s, %d MB; baseline %s, %d MB\n", i+1, c.wall.Round(time.Millisecond), c.rssKB>>10, b.wall.Round(time.Millisecond), b.rssKB>>10)
				checks, bases = append(checks, c), append(bases, b)
			}
			c, b := median(checks), median(bases)
			fmt.Fprintf(out, "median of %d: check %s, %d MB; baseline %s, %d MB\n", repeat, c.wall.Round(time.Millisecond), c.rssKB>>10, b.wall.Round(time.Millisecond), b.rssKB>>10)
			fmt.Fprintf(out, "check/baseline: time %.2fx, peak rss %.2fx\n", c.wall.Seconds()/b.wall.Seconds(), float64(c.rssKB)/float64(b.rssKB))
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
	wall  time.Duration
	rssKB int64
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
	r := make([]int64, len(ms))
	for i, m := range ms {
		w[i], r[i] = m.wall, m.rssKB
	}
	slices.Sort(w)
	slices.Sort(r)
	return measure{wall: w[len(w)/2], rssKB: r[len(r)/2]}
}

func newBenchRouteCmd() *cobra.Command {
	var o bench.RouteOptions
	var repeat int
	cmd := &cobra.Command{
		Use:   "route",
		Short: "a read of an entity on another node, through a shard region, against a raw HTTP round trip",
		Long: `Start a local cluster of two nodes, A and B (this binary's reference node),
and from one client with kept-alive connections time, interleaved, --requests
of each of:

  raw     GET /v1/health of B: one HTTP round trip, the yardstick
  local   a register read sent to A, of an entity A hosts
  remote  a register read sent to A, of an entity B hosts: A's shard region
          forwards it to B (client → A → B → A → client)
  relay   GET /v1/health of B through a relay process that does nothing
          else (client → relay → B → relay → client), HTTP both ways
  framed  the same through a relay that sends one frame to an echo
          process over a kept-open connection and answers with what comes
          back (client → relay → echo → relay → client): the least any
          routing through a second process costs on this machine

then, with --requests of raw, local and remote each back to back, what one
request costs node A and node B in CPU time and context switches (read
from /proc; Linux only).

--repeat times (a new cluster each), and print the medians of the p50s, the
last line being
  remote/raw: p50 1.45x (local/raw 1.10x, relay/raw 1.30x, framed/raw 1.20x)
Exit status: 0 measured; 3 the measurement could not be made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repeat < 1 {
				return &exitError{exitCannotRun, fmt.Errorf("--repeat %d: want at least 1", repeat)}
			}
			if o.NodeBinary != "" {
				if fi, err := os.Stat(o.NodeBinary); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
					return &exitError{exitCannotRun, fmt.Errorf("--node-binary %s: not an executable file", o.NodeBinary)}
				}
			}
			if err := local.CheckPorts(o.BasePort, 2); err != nil {
				return &exitError{exitCannotRun, err}
			}
			tmp, err := os.MkdirTemp("", "shardtest-bench-route-")
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			defer os.RemoveAll(tmp)
			o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			out := cmd.OutOrStdout()
			var raw, loc, rem, rel, frm []time.Duration
			for i := range repeat {
				o.Dir = filepath.Join(tmp, fmt.Sprint(i+1))
				r, err := bench.Route(cmd.Context(), o)
				if err != nil {
					return &exitError{exitCannotRun, err}
				}
				fmt.Fprintf(out, "try %d: raw p50 %s p99 %s; local p50 %s p99 %s; remote p50 %s p99 %s; relay p50 %s p99 %s; framed p50 %s p99 %s (%d each)\n", i+1,
					us(r.Raw.P50), us(r.Raw.P99), us(r.Local.P50), us(r.Local.P99), us(r.Remote.P50), us(r.Remote.P99), us(r.Relay.P50), us(r.Relay.P99), us(r.Framed.P50), us(r.Framed.P99), r.Raw.N)
				raw, loc, rem, rel, frm = append(raw, r.Raw.P50), append(loc, r.Local.P50), append(rem, r.Remote.P50), append(rel, r.Relay.P50), append(frm, r.Framed.P50)
				if r.CostErr != nil {
					fmt.Fprintf(out, "  cost per request not measured: %v\n", r.CostErr)
				} else {
					fmt.Fprintf(out, "  cost per request (CPU, context switches): raw B %s %.1f; local A %s %.1f; remote A %s %.1f, B %s %.1f\n",
						us(r.RawB.CPU), r.RawB.Switches, us(r.LocalA.CPU), r.LocalA.Switches, us(r.RemoteA.CPU), r.RemoteA.Switches, us(r.RemoteB.CPU), r.RemoteB.Switches)
				}
			}
			mr, ml, mm, my, mf := medianDur(raw), medianDur(loc), medianDur(rem), medianDur(rel), medianDur(frm)
			fmt.Fprintf(out, "median of %d: raw p50 %s, local p50 %s, remote p50 %s, relay p50 %s, framed p50 %s\n", repeat, us(mr), us(ml), us(mm), us(my), us(mf))
			fmt.Fprintf(out, "remote/raw: p50 %.2fx (local/raw %.2fx, relay/raw %.2fx, framed/raw %.2fx)\n", mm.Seconds()/mr.Seconds(), ml.Seconds()/mr.Seconds(), my.Seconds()/mr.Seconds(), mf.Seconds()/mr.Seconds())
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Requests, "requests", 5000, "requests of each kind measured")
	f.IntVar(&o.Warmup, "warmup", 500, "requests of each kind sent first, not measured")
	f.IntVar(&o.BasePort, "base-port", 30700, "the cluster's ports, as --base-port of the local runtime")
	f.IntVar(&repeat, "repeat", 3, "tries, each on a new cluster; the medians are reported")
	f.StringVar(&o.NodeBinary, "node-binary", "", "run the nodes from this shardtest executable instead of this one (another build of the reference node, e.g. an earlier commit's, measured by this bench)")
	return cmd
}

// newBenchRelayCmd is the relay process bench route starts (hidden: not a
// command for users).
func newBenchRelayCmd() *cobra.Command {
	var to string
	var framed bool
	cmd := &cobra.Command{
		Use:    "relay",
		Short:  "serve GET /v1/health of --to, relayed (started by bench route)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if to == "" {
				return &exitError{exitCannotRun, errors.New("--to: the address to relay to is required")}
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			fmt.Fprintln(cmd.OutOrStdout(), bench.RelayReadyLine(ln))
			if framed {
				return bench.ServeFramedRelay(cmd.Context(), ln, to)
			}
			return bench.ServeRelay(cmd.Context(), ln, to)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "the node's HTTP address (host:port), or with --framed the echo process's")
	cmd.Flags().BoolVar(&framed, "framed", false, "relay as one frame to an echo process (bench echo) instead of an HTTP GET")
	return cmd
}

// newBenchEchoCmd is the echo process the framed relay of bench route
// sends to (hidden: not a command for users).
func newBenchEchoCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "echo",
		Short:  "answer every length-prefixed frame with itself (started by bench route)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			fmt.Fprintln(cmd.OutOrStdout(), bench.EchoReadyLine(ln))
			return bench.ServeEcho(cmd.Context(), ln)
		},
	}
}

func us(d time.Duration) string { return d.Round(time.Microsecond).String() }

func medianDur(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/bench"
	"github.com/shardtest/shardtest/harness/local"
)

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

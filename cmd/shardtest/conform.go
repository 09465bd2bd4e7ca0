package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/conform"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/protocol"
)

func newConformCmd() *cobra.Command {
	var (
		o        run.Options
		results  string
		binary   string
		basePort int
		probe    bool
		only     []string
	)
	cmd := &cobra.Command{
		Use:   "conform",
		Short: "Check, rule by rule, that an implementation serves the node protocol as the harness relies on; --probe: probe it as an attacker would",
		Long: `Start a small cluster of an implementation (--image IMG in Docker, or the
reference node: the default, also with --runtime local) and check, rule by
rule, what the harness relies on (docs/protocol.md): every field of every
capability it declares, members oldest first with unique ages, served_by on
every reply, error bodies and their outcomes (bad requests are fail, never
unknown), unknown fields and null bodies refused, event sequence numbers
consecutive and the long poll honoured, undeclared capabilities answering
404, entity replies naming their member and incarnation, a write read back
through every node, and every request answered in time. A rule that needs a
capability the implementation does not declare is skipped.

It lists every rule with PASS, FAIL or SKIP, its one-line explanation, the
section of docs/protocol.md it comes from and what was wrong, and stores
results/conform/<time>/: conform.json, junit.xml (a failed rule is a
failure, a skipped one skipped) and the node logs.

With --probe it runs the probes instead (docs/protocol.md, Probes): what a
hostile client or a stale member sends — node-to-node routes on the public
port, bad bodies, a 1 MiB id, invalid UTF-8, a slow client, 2,000 idle
connections, and on the reference node's peer port requests without the
secret and forged member requests — each with what the node must answer,
and after each what must still hold: ids increase through every node, and
a write reads back through every node. The peer-port probes apply to the
reference node only, and need --runtime local (forged member requests come
from the members' address). --probes NAME,... runs those alone. It stores
probe.json and junit.xml instead.

Exit status: 0 every rule (probe) that applies passed, 1 one failed, 3 the
cluster could not be started.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Nodes < 1 || o.Nodes > 9 {
				return &exitError{exitCannotRun, fmt.Errorf("--nodes %d: want 1 to 9", o.Nodes)}
			}
			if len(only) > 0 && !probe {
				return &exitError{exitCannotRun, errors.New("--probes needs --probe")}
			}
			if _, err := conform.SelectProbes(only); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("--probes: %w", err)}
			}
			logger, err := newLogger("info", "text")
			if err != nil {
				return err
			}
			rt, err := run.NewRuntime(o, run.RuntimeConfig{Binary: binary, BasePort: basePort, Log: logger})
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			start := time.Now()
			dir := filepath.Join(results, "conform", start.UTC().Format("20060102T150405.000Z"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return &exitError{exitCannotRun, err}
			}
			what := "the reference node"
			if o.Image != "" {
				what = o.Image
			}
			logger.Info("starting a cluster to check", "implementation", what, "runtime", rt.Name(), "nodes", o.Nodes)
			cl, err := rt.Start(cmd.Context(), run.RunID("conform", start), o.Nodes, dir)
			if err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("start cluster: %w", err)}
			}
			var nodes []conform.Node
			for _, n := range cl.Nodes() {
				nodes = append(nodes, conform.Node{Name: n.Name, Addr: n.HTTPAddr})
			}
			out := cmd.OutOrStdout()
			var ok bool
			var tally string
			if probe {
				po := conform.ProbeOptions{Only: only}
				if mh, isLocal := cl.(run.MemberHost); isLocal {
					po.Peer = &conform.PeerAccess{Secret: mh.ClusterSecret()}
				}
				rep := conform.RunProbes(cmd.Context(), nodes, po)
				stopCluster(cmd, cl, dir, logger)
				rep.Print(out)
				props := map[string]string{"implementation": rep.Implementation, "tested": what, "reference": fmt.Sprint(rep.Reference)}
				err = writeReport(dir, "probe.json", rep, "probe", props, rep.Cases(), rep.Took)
				ok, tally = rep.OK(), fmt.Sprintf("%d of %d probes failed", rep.Failed, rep.Passed+rep.Failed)
			} else {
				rep := conform.Run(cmd.Context(), nodes)
				stopCluster(cmd, cl, dir, logger)
				printConform(out, rep)
				props := map[string]string{"implementation": rep.Implementation, "tested": what, "capabilities": strings.Join(rep.Capabilities, ",")}
				err = writeReport(dir, "conform.json", rep, "conform", props, conformCases(rep), rep.Took)
				ok, tally = rep.OK(), fmt.Sprintf("%d of %d rules failed", rep.Failed, rep.Passed+rep.Failed)
			}
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			fmt.Fprintf(out, "results: %s\njunit: %s\n", dir, filepath.Join(dir, report.JUnitFile))
			if cmd.Context().Err() != nil {
				return &exitError{exitCannotRun, fmt.Errorf("interrupted: %w", cmd.Context().Err())}
			}
			if !ok {
				return &exitError{exitInvalid, errors.New(tally)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Runtime, "runtime", "docker", "where nodes run: docker or local (the reference node as child processes)")
	f.StringVar(&o.Image, "image", "", "docker: the implementation's image (default: the reference node)")
	f.IntVar(&o.Nodes, "nodes", 3, "number of nodes")
	f.StringArrayVar(&o.NodeArgs, "node-arg", nil, "extra argument for every node, repeatable")
	f.StringVar(&results, "results", "results", "results root folder")
	f.StringVar(&binary, "binary", "", "docker: static shardtest binary for the reference image (default: this one, or a CGO_ENABLED=0 build)")
	f.IntVar(&basePort, "base-port", 17400, "local: journal port; node i uses base+i (HTTP) and base+100+i (gossip)")
	f.BoolVar(&probe, "probe", false, "run the probes (hostile requests, each with what must hold after) instead of the rules")
	f.StringSliceVar(&only, "probes", nil, "with --probe: run only these probes (comma-separated names)")
	return cmd
}

// stopCluster stops the cluster, copying its logs into dir; a failure to
// stop is logged, and the verdict stands.
func stopCluster(cmd *cobra.Command, cl run.Cluster, dir string, logger *slog.Logger) {
	if err := cl.Stop(cmd.Context(), dir); err != nil {
		logger.Warn("stopping the cluster", "err", err)
	}
}

// printConform lists every rule's verdict, what was wrong and the tally.
func printConform(w io.Writer, rep conform.Report) {
	impl := rep.Implementation
	if impl == "" {
		impl = "(capabilities unreadable)"
	}
	yours := strconv.Itoa(rep.Revision)
	if rep.Revision == 0 {
		yours = "not said"
	}
	fmt.Fprintf(w, "conform: %s on %d nodes, capabilities %s\n", impl, rep.Nodes, strings.Join(rep.Capabilities, ", "))
	fmt.Fprintf(w, "%s revision: yours %s, this harness's %d (docs/protocol.md, Changes within shardtest/1)\n", protocol.Version, yours, rep.Current)
	for _, r := range rep.Results {
		fmt.Fprintf(w, "  %-4s %-28s %s (%s; since revision %d)\n", strings.ToUpper(string(r.Verdict)), r.Rule, r.Doc, r.Section, r.Since)
		if r.New {
			fmt.Fprintf(w, "       NEW SINCE YOUR REVISION %d: this rule arrived in revision %d\n", rep.Revision, r.Since)
		}
		if r.Detail != "" {
			fmt.Fprintf(w, "       %s\n", r.Detail)
		}
	}
	tally := fmt.Sprintf("%d passed, %d failed, %d skipped", rep.Passed, rep.Failed, rep.Skipped)
	if n := rep.NewFailed(); n > 0 {
		tally += fmt.Sprintf(" (%d of the failed are new since your revision %d)", n, rep.Revision)
	}
	fmt.Fprintf(w, "%s (%v)\n", tally, rep.Took.Round(100*time.Millisecond))
}

// conformCases are the rules as JUnit cases: a failed rule is a
// failure, a skipped one skipped.
func conformCases(rep conform.Report) []report.Case {
	var cases []report.Case
	for _, r := range rep.Results {
		c := report.Case{Name: r.Rule, Out: r.Doc + " (docs/protocol.md: " + r.Section + ")"}
		switch r.Verdict {
		case conform.Fail:
			c.Failure, c.Text = r.Detail, r.Detail
			if c.Failure == "" {
				c.Failure = "failed"
			}
			if r.New {
				c.Failure = fmt.Sprintf("new since your revision %d (arrived in revision %d): %s", rep.Revision, r.Since, c.Failure)
			}
		case conform.Skip:
			c.Skipped = r.Detail
		}
		cases = append(cases, c)
	}
	return cases
}

// writeReport stores rep as dir/name and the cases as dir/junit.xml.
func writeReport(dir, name string, rep any, suite string, props map[string]string, cases []report.Case, took time.Duration) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, report.JUnitFile))
	if err != nil {
		return err
	}
	if err := report.WriteCases(f, suite, props, cases, took); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

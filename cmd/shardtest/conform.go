package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/conform"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
)

func newConformCmd() *cobra.Command {
	var (
		o        run.Options
		results  string
		binary   string
		basePort int
	)
	cmd := &cobra.Command{
		Use:   "conform",
		Short: "Check, rule by rule, that an implementation serves the node protocol as the harness relies on",
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

Exit status: 0 every rule that applies passed, 1 a rule failed, 3 the
cluster could not be started.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Nodes < 1 || o.Nodes > 9 {
				return &exitError{exitCannotRun, fmt.Errorf("--nodes %d: want 1 to 9", o.Nodes)}
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
			rep := conform.Run(cmd.Context(), nodes)
			if err := cl.Stop(cmd.Context(), dir); err != nil {
				logger.Warn("stopping the cluster", "err", err)
			}
			out := cmd.OutOrStdout()
			printConform(out, rep)
			if err := writeConform(dir, what, rep); err != nil {
				return &exitError{exitCannotRun, err}
			}
			fmt.Fprintf(out, "results: %s\njunit: %s\n", dir, filepath.Join(dir, report.JUnitFile))
			if cmd.Context().Err() != nil {
				return &exitError{exitCannotRun, fmt.Errorf("interrupted: %w", cmd.Context().Err())}
			}
			if !rep.OK() {
				return &exitError{exitInvalid, fmt.Errorf("%d of %d rules failed", rep.Failed, rep.Passed+rep.Failed)}
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
	return cmd
}

// printConform lists every rule's verdict, what was wrong and the tally.
func printConform(w io.Writer, rep conform.Report) {
	impl := rep.Implementation
	if impl == "" {
		impl = "(capabilities unreadable)"
	}
	fmt.Fprintf(w, "conform: %s on %d nodes, capabilities %s\n", impl, rep.Nodes, strings.Join(rep.Capabilities, ", "))
	for _, r := range rep.Results {
		fmt.Fprintf(w, "  %-4s %-28s %s (%s)\n", strings.ToUpper(string(r.Verdict)), r.Rule, r.Doc, r.Section)
		if r.Detail != "" {
			fmt.Fprintf(w, "       %s\n", r.Detail)
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped (%v)\n", rep.Passed, rep.Failed, rep.Skipped, rep.Took.Round(100*time.Millisecond))
}

// writeConform stores conform.json and junit.xml in dir.
func writeConform(dir, what string, rep conform.Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "conform.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	var cases []report.Case
	for _, r := range rep.Results {
		c := report.Case{Name: r.Rule, Out: r.Doc + " (docs/protocol.md: " + r.Section + ")"}
		switch r.Verdict {
		case conform.Fail:
			c.Failure, c.Text = r.Detail, r.Detail
			if c.Failure == "" {
				c.Failure = "failed"
			}
		case conform.Skip:
			c.Skipped = r.Detail
		}
		cases = append(cases, c)
	}
	f, err := os.Create(filepath.Join(dir, report.JUnitFile))
	if err != nil {
		return err
	}
	props := map[string]string{"implementation": rep.Implementation, "tested": what, "capabilities": strings.Join(rep.Capabilities, ",")}
	if err := report.WriteCases(f, "conform", props, cases, rep.Took); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

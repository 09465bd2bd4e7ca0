package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/workloads"
)

// listKinds are what list can show, in order.
var listKinds = []string{"workloads", "nemeses", "checkers", "scenarios"}

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list [workloads|nemeses|checkers|scenarios]",
		Short: "List the available workloads, nemeses, checkers and scenarios",
		Long: `List what a test can be composed of: workloads (with the node capability
each needs and what a correct system must show), nemeses and checkers; and
the scenarios (shardtest run --scenario, shardtest test-all), each with its
danger, its cluster and fault schedule, what must hold, and the deliberate
bug it is meant to catch. With no argument all are listed. Takes no flags.`,
		ValidArgs: listKinds,
		Args:      cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kinds := listKinds
			if len(args) == 1 {
				if !isListKind(args[0]) {
					return fmt.Errorf("list %q: unknown kind; want one of %s", args[0], strings.Join(listKinds, ", "))
				}
				kinds = args
			}
			return writeList(cmd.OutOrStdout(), kinds)
		},
	}
}

func isListKind(k string) bool {
	for _, v := range listKinds {
		if k == v {
			return true
		}
	}
	return false
}

func writeList(w io.Writer, kinds []string) error {
	for i, k := range kinds {
		if i > 0 {
			fmt.Fprintln(w)
		}
		switch k {
		case "workloads":
			fmt.Fprintln(w, "Workloads:")
			all := workloads.All()
			if len(all) == 0 {
				fmt.Fprintln(w, "  none")
			}
			for _, wl := range all {
				fmt.Fprintf(w, "  %s (needs %s)\n", wl.Name(), describeNeeds(wl.Needs()))
				for _, line := range wrap(wl.Doc(), 72) {
					fmt.Fprintf(w, "      %s\n", line)
				}
			}
		case "nemeses":
			fmt.Fprintln(w, "Nemeses: (--nemesis takes full names or families: partition, loss, kill, pause, clock, member)")
			for _, f := range nemesis.Catalog() {
				fmt.Fprintf(w, "  %s\n", f.Name)
				for _, line := range wrap(f.Doc, 72) {
					fmt.Fprintf(w, "      %s\n", line)
				}
			}
		case "checkers":
			fmt.Fprintln(w, "Checkers: (name, the runs it judges, what it proves)")
			for _, e := range checker.Registry() {
				fmt.Fprintf(w, "  %-20s %s\n", e.Name, checkerRuns(e))
				for _, line := range wrap(e.Doc, 72) {
					fmt.Fprintf(w, "      %s\n", line)
				}
			}
		case "scenarios":
			fmt.Fprintln(w, "Scenarios: (shardtest run --scenario NAME; shardtest test-all [--smoke])")
			for _, s := range scenario.Catalog() {
				tags := ""
				if s.Smoke {
					tags += " [smoke]"
				}
				if s.Docker {
					tags += " [docker or sim]"
				}
				fmt.Fprintf(w, "  %s%s\n", s.Name, tags)
				bug := "none of the reference node's deliberate bugs is about this situation"
				if len(s.Bugs) > 0 {
					var cs []string
					for _, b := range s.Bugs {
						cs = append(cs, fmt.Sprintf("%s (caught by %s: %s)", b.Name, b.Checker, b.Why))
					}
					bug = strings.Join(cs, "; ")
				}
				for _, field := range []struct{ label, text string }{
					{"danger", s.Danger},
					{"cluster", clusterDoc(s)},
					{"faults", s.FaultDoc()},
					{"holds", s.Holds},
					{"catches", bug},
				} {
					for j, line := range wrap(field.text, 64) {
						label := ""
						if j == 0 {
							label = field.label + ":"
						}
						fmt.Fprintf(w, "      %-9s %s\n", label, line)
					}
				}
			}
		}
	}
	return nil
}

// wrap breaks s into lines of at most width characters at spaces.
func wrap(s string, width int) []string {
	var lines []string
	var cur strings.Builder
	for _, word := range strings.Fields(s) {
		if cur.Len() > 0 && cur.Len()+1+len(word) > width {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(word)
	}
	if cur.Len() > 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// checkerRuns says which runs a checker judges, and what it needs.
func checkerRuns(e checker.Entry) string {
	var parts []string
	switch {
	case slices.Contains(e.Workloads, checker.Every):
		parts = append(parts, "every workload")
	case len(e.Workloads) > 0:
		parts = append(parts, "workload "+strings.Join(e.Workloads, ", "))
	}
	if e.WithFaults {
		parts = append(parts, "every run with faults")
	}
	if len(e.Workloads) == 0 && !e.WithFaults {
		var by []string
		for _, s := range scenario.Catalog() {
			if slices.ContainsFunc(s.Expect, func(x checker.Spec) bool { return x.Name == e.Name }) {
				by = append(by, s.Name)
			}
		}
		parts = append(parts, "added by scenarios: "+strings.Join(by, ", "))
	}
	if len(e.Params) > 0 {
		parts = append(parts, "parameters: "+strings.Join(e.Params, ", "))
	}
	if e.Capabilities != nil {
		parts = append(parts, "implementations with "+strings.Join(e.Capabilities, " or "))
	}
	if len(e.Reads) > 0 {
		parts = append(parts, "reads "+strings.Join(e.Reads, ", "))
	}
	return strings.Join(parts, "; ")
}

// clusterDoc describes a scenario's cluster in one line.
func clusterDoc(s scenario.Scenario) string {
	doc := fmt.Sprintf("%d nodes, workload %s over %d entities, %v main phase", s.Nodes, s.Workload, s.Entities, s.Limit)
	if len(s.Settings) > 0 {
		doc += "; settings " + run.SettingsString(s.Settings)
	}
	return doc
}

// describeNeeds says what a workload needs an implementation to declare.
func describeNeeds(n workloads.Needs) string {
	var parts []string
	for _, c := range n.Capabilities {
		parts = append(parts, "capability "+c)
	}
	for _, t := range n.EntityTypes {
		parts = append(parts, "entity type "+t)
	}
	for _, s := range n.Singletons {
		parts = append(parts, "singleton "+s)
	}
	return strings.Join(parts, ", ")
}

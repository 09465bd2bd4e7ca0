package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/shrink"
	"github.com/shardtest/shardtest/nemesis"
)

func newShrinkCmd() *cobra.Command {
	var (
		results, checkerName, binary string
		basePort                     int
		o                            shrink.Options
	)
	cmd := &cobra.Command{
		Use:   "shrink RUN_DIR",
		Short: "Search for the smallest test that still fails like a stored invalid run",
		Long: `Take a stored invalid run (its test.json and results.json) and search for
the smallest test that still fails the same checker: fewer fault steps
(delta debugging over the run's fault schedule, each inject with its heal,
their times and targets kept), shorter holds and main phase, fewer entities
and workers, a lower rate, fewer nodes where the faults allow. Each candidate
is run again --tries times on the run's runtime, image and node arguments,
and counts as failing when --need of them fail (failures are probabilistic);
the search stops at --budget with the smallest failing test so far.

A line per candidate says what was removed, its tries and its failures. The
result lands in <results>/shrink/<time>/: schedule.json (the minimal fault
schedule, docs/schedules.md), shrink.json (every candidate), summary.md,
index.html linking every try's run, and the command that reproduces it:
  shardtest run --schedule .../schedule.json --seed N ...

Exit status: 0 a failing test was found (the original, if nothing smaller
fails); 2 the run did not fail again in --need of --tries; 3 the run cannot be
shrunk (not invalid, unreadable, or its runtime cannot start).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			var orig run.Options
			if err := readJSONFile(filepath.Join(dir, "test.json"), &orig); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %w", err)}
			}
			var res run.Result
			if err := readJSONFile(filepath.Join(dir, "results.json"), &res); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %w", err)}
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
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %s is %s: no checker said invalid, nothing to shrink", dir, res.Verdict)}
			}
			if o.Tries < 1 || o.Need < 1 || o.Need > o.Tries {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: --need %d of --tries %d: want 1 ≤ need ≤ tries", o.Need, o.Tries)}
			}
			logger, err := newLogger("warn", "text")
			if err != nil {
				return err
			}
			rt, err := newRuntime(orig, binary, basePort, logger)
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			start, err := shrink.From(orig, rt)
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			outDir := filepath.Join(results, "shrink", time.Now().UTC().Format("20060102T150405Z"))
			runner := &shrink.Runs{Original: orig, Checker: checkerName, Runtime: rt, Results: filepath.Join(outDir, "runs"), Log: logger}
			// What the first try would refuse (its ports taken, its faults
			// unfit) is refused before the shrink's folder exists.
			if err := (&run.Test{Options: runner.Options(start), Runtime: rt}).Precheck(); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %w", err)}
			}
			if err := os.MkdirAll(outDir, 0o755); err != nil {
				return &exitError{exitCannotRun, err}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "shrinking %s (%s invalid): %d fault steps, %v main phase, %d nodes, %d entities, %d workers; %d tries a candidate, failing at %d\n",
				dir, checkerName, len(start.Steps), start.TimeLimit, start.Nodes, start.Entities, start.Concurrency, o.Tries, o.Need)
			n := 0
			o.Progress = func(c shrink.Candidate) {
				n++
				verdict := "passes"
				if c.Failing {
					verdict = "fails: kept"
				}
				could := ""
				if len(c.Errors) > 0 {
					could = fmt.Sprintf(" (%d could not run: %s)", len(c.Errors), c.Errors[0])
				}
				fmt.Fprintf(out, "candidate %d: %s: %d of %d tries failed%s: %s\n", n, c.What, c.Failures, c.Tries, could, verdict)
			}
			r, err := shrink.Shrink(cmd.Context(), start, runner, o)
			if werr := writeShrink(outDir, dir, checkerName, orig, runner, r); werr != nil {
				return &exitError{exitCannotRun, werr}
			}
			fmt.Fprintf(out, "\n%s", shrinkSummary(outDir, checkerName, runner, r))
			switch {
			case err != nil:
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %w", err)}
			case !r.Reproduced:
				return &exitError{exitUnknown, fmt.Errorf("shrink: %s did not fail again (%s of %d tries)", dir, r.Rate(), o.Tries)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&results, "results", "results", "results root folder")
	f.StringVar(&checkerName, "checker", "", "the checker that must say invalid (default: the run's first invalid one)")
	f.IntVar(&o.Tries, "tries", 3, "runs of each candidate")
	f.IntVar(&o.Need, "need", 2, "failing runs (of --tries) for a candidate to count as failing")
	f.DurationVar(&o.Budget, "budget", time.Hour, "stop the search after this long, with the smallest failing test so far")
	f.StringVar(&binary, "binary", "", "docker: static shardtest binary for the reference image (as run's)")
	f.IntVar(&basePort, "base-port", 17400, "local: journal port of the tries' clusters (as run's)")
	return cmd
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// reproduceCommand is the shardtest run command that runs t.
func reproduceCommand(outDir string, runner *shrink.Runs, t shrink.Test) string {
	o := runner.Options(t)
	parts := []string{"shardtest run", "--schedule " + filepath.Join(outDir, "schedule.json"),
		"--runtime " + o.Runtime, "--workload " + o.Workload, fmt.Sprintf("--seed %d", o.Seed),
		fmt.Sprintf("--nodes %d", o.Nodes), "--time-limit " + o.TimeLimit.String(),
		fmt.Sprintf("--entities %d", o.Entities), fmt.Sprintf("--concurrency %d", o.Concurrency),
		fmt.Sprintf("--per-entity %d", o.PerEntity), "--op-timeout " + o.OpTimeout.String()}
	if o.Rate > 0 {
		parts = append(parts, fmt.Sprintf("--rate %g", o.Rate))
	}
	if o.Image != "" {
		parts = append(parts, "--image "+o.Image)
	}
	for _, a := range o.NodeArgs {
		parts = append(parts, "--node-arg "+a)
	}
	if len(o.NodeSettings) > 0 {
		parts = append(parts, "# with the node settings of the original run's test.json")
	}
	return strings.Join(parts, " ")
}

// failingEvidence is the checker's summary and first evidence lines in the
// first failing try of c.
func failingEvidence(c shrink.Candidate, checkerName string) string {
	for _, d := range c.Dirs {
		var res run.Result
		if readJSONFile(filepath.Join(d, "results.json"), &res) != nil {
			continue
		}
		for _, ch := range res.Checks {
			if ch.Checker == checkerName && ch.Verdict == checker.Invalid {
				ev := ch.Evidence
				if len(ev) > 5 {
					ev = append(ev[:5:5], fmt.Sprintf("... %d more lines in %s", len(ch.Evidence)-5, filepath.Join(d, report.IndexFile)))
				}
				return fmt.Sprintf("in %s: %s\n  %s", d, ch.Summary, strings.Join(ev, "\n  "))
			}
		}
	}
	return "(no failing try's results could be read)"
}

func shrinkSummary(outDir, checkerName string, runner *shrink.Runs, r shrink.Result) string {
	var b strings.Builder
	s := r.Smallest
	switch {
	case !r.Reproduced:
		fmt.Fprintf(&b, "the run did not fail again: %s of its tries failed %s\n", r.Rate(), checkerName)
	default:
		fmt.Fprintf(&b, "smallest failing test (%s, failing %s of its tries; %d candidates):\n", checkerName, r.Rate(), len(r.Candidates))
		if r.OutOfBudget {
			b.WriteString("  (the budget ran out: a smaller one may exist)\n")
		}
		for _, st := range s.Test.Steps {
			what := "inject"
			if st.Heal {
				what = "heal"
			}
			fmt.Fprintf(&b, "  at %-8v %s %s\n", st.At, what, st.Fault)
		}
		fmt.Fprintf(&b, "  main phase %v, %d nodes, %d entities, %d workers, rate %s\n", s.Test.TimeLimit, s.Test.Nodes, s.Test.Entities, s.Test.Concurrency, rate(s.Test.Rate))
		fmt.Fprintf(&b, "evidence %s\n", failingEvidence(s, checkerName))
		fmt.Fprintf(&b, "reproduce: %s\n", reproduceCommand(outDir, runner, s.Test))
	}
	fmt.Fprintf(&b, "searched %d candidates in %d tries, %s\n", len(r.Candidates), r.Tries(), r.Took.Round(time.Second))
	fmt.Fprintf(&b, "results: %s\n", filepath.Join(outDir, report.IndexFile))
	return b.String()
}

func rate(r float64) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g ops/s", r)
}

// writeShrink writes the search's folder: the minimal schedule, every
// candidate, the summary and an index page linking every try.
func writeShrink(outDir, runDir, checkerName string, orig run.Options, runner *shrink.Runs, r shrink.Result) error {
	var sched bytes.Buffer
	if len(r.Smallest.Test.Steps) > 0 {
		if err := nemesis.WriteSchedule(&sched, r.Smallest.Test.Steps); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(outDir, "schedule.json"), sched.Bytes(), 0o644); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(struct {
		Run     string        `json:"run"`
		Checker string        `json:"checker"`
		Result  shrink.Result `json:"result"`
	}{runDir, checkerName, r}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, "shrink.json"), b, 0o644); err != nil {
		return err
	}
	summary := shrinkSummary(outDir, checkerName, runner, r)
	if err := os.WriteFile(filepath.Join(outDir, "summary.md"), []byte("```\n"+summary+"```\n"), 0o644); err != nil {
		return err
	}
	var page bytes.Buffer
	writeShrinkIndex(&page, outDir, runDir, summary, r)
	return os.WriteFile(filepath.Join(outDir, report.IndexFile), page.Bytes(), 0o644)
}

func writeShrinkIndex(w io.Writer, outDir, runDir, summary string, r shrink.Result) {
	esc := html.EscapeString
	fmt.Fprintf(w, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>shardtest shrink: %s</title>\n", esc(runDir))
	fmt.Fprint(w, "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}.kept{color:#a31515;font-weight:bold}pre{background:#f6f6f6;padding:1em}</style></head><body>\n")
	fmt.Fprintf(w, "<h1>shrink of %s</h1>\n<pre>%s</pre>\n", esc(runDir), esc(summary))
	fmt.Fprint(w, "<table><tr><th>#</th><th>candidate</th><th>failed</th><th>tries</th></tr>\n")
	for i, c := range r.Candidates {
		var links []string
		for k, d := range c.Dirs {
			page := filepath.Join(d, report.IndexFile)
			if rel, err := filepath.Rel(outDir, page); err == nil {
				links = append(links, fmt.Sprintf("<a href=\"%s\">%d</a>", esc(filepath.ToSlash(rel)), k+1))
			}
		}
		class := ""
		if c.Failing {
			class = " class=\"kept\""
		}
		fmt.Fprintf(w, "<tr%s><td>%d</td><td>%s</td><td>%d of %d</td><td>%s</td></tr>\n", class, i+1, esc(c.What), c.Failures, c.Tries, strings.Join(links, " "))
	}
	fmt.Fprint(w, "</table></body></html>\n")
}

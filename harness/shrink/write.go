package shrink

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

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/nemesis"
)

// ReproduceCommand is the shardtest run command that runs t, with the
// schedule written in outDir.
func (r *Runs) ReproduceCommand(outDir string, t Test) string {
	return run.ReproduceCommand(r.Options(t), filepath.Join(outDir, "schedule.json"))
}

// failingEvidence is the checker's summary and first evidence lines in the
// first failing try of c.
func failingEvidence(c Candidate, checkerName string) string {
	for _, d := range c.Dirs {
		res, err := run.ReadResult(d)
		if err != nil {
			continue
		}
		if ch, caught, _ := checker.Caught(res.Checks, checkerName); caught {
			ev := ch.Evidence
			if len(ev) > 5 {
				ev = append(ev[:5:5], fmt.Sprintf("... %d more lines in %s", len(ch.Evidence)-5, filepath.Join(d, report.IndexFile)))
			}
			return fmt.Sprintf("in %s: %s\n  %s", d, ch.Summary, strings.Join(ev, "\n  "))
		}
	}
	return "(no failing try's results could be read)"
}

// Summary says what the search found, for people: the smallest failing
// test, its evidence, the command that reproduces it, and what the search
// cost.
func (r *Runs) Summary(outDir string, res Result) string {
	checkerName := r.Checker
	var b strings.Builder
	s := res.Smallest
	switch {
	case !res.Reproduced:
		fmt.Fprintf(&b, "the run did not fail again: %s of its tries failed %s\n", res.Rate(), checkerName)
	default:
		fmt.Fprintf(&b, "smallest failing test (%s, failing %s of its tries; %d candidates):\n", checkerName, res.Rate(), len(res.Candidates))
		if res.OutOfBudget {
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
		fmt.Fprintf(&b, "reproduce: %s\n", r.ReproduceCommand(outDir, s.Test))
	}
	fmt.Fprintf(&b, "searched %d candidates in %d tries, %s\n", len(res.Candidates), res.Tries(), res.Took.Round(time.Second))
	fmt.Fprintf(&b, "results: %s\n", filepath.Join(outDir, report.IndexFile))
	return b.String()
}

func rate(r float64) string {
	if r == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%g ops/s", r)
}

// Write writes the search's folder outDir: the minimal schedule, every
// candidate, the summary and an index page linking every try of the
// shrink of the run in runDir.
func (r *Runs) Write(outDir, runDir string, res Result) error {
	checkerName := r.Checker
	var sched bytes.Buffer
	if len(res.Smallest.Test.Steps) > 0 {
		if err := nemesis.WriteSchedule(&sched, res.Smallest.Test.Steps); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(outDir, "schedule.json"), sched.Bytes(), 0o644); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(struct {
		Run     string `json:"run"`
		Checker string `json:"checker"`
		Result  Result `json:"result"`
	}{runDir, checkerName, res}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, "shrink.json"), b, 0o644); err != nil {
		return err
	}
	summary := r.Summary(outDir, res)
	if err := os.WriteFile(filepath.Join(outDir, "summary.md"), []byte("```\n"+summary+"```\n"), 0o644); err != nil {
		return err
	}
	var page bytes.Buffer
	writeIndex(&page, outDir, runDir, summary, res)
	return os.WriteFile(filepath.Join(outDir, report.IndexFile), page.Bytes(), 0o644)
}

func writeIndex(w io.Writer, outDir, runDir, summary string, r Result) {
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

package suite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/internal/regular"
)

// Files of a suite's folder.
const (
	SummaryFile         = "summary.json"
	SummaryMarkdownFile = "summary.md"
)

// Summary is summary.json: the suite's outcome (the exit status's
// meaning: a proven violation outranks everything) and every run.
type Summary struct {
	// Outcome is valid, invalid, unknown or could-not-run; with
	// --with-bugs, caught or not-caught instead of valid and invalid.
	Outcome    string `json:"outcome"`
	ExitStatus int    `json:"exit_status"`
	// WithBugs: the runs had the deliberate bugs on (--with-bugs).
	WithBugs bool `json:"with_bugs,omitempty"`
	// Took is the suite's time (merged: the sum of its parts').
	Took time.Duration `json:"took_ns,omitempty"`
	Runs []Run         `json:"runs"`
	// Coverage sums up what the runs exercised (coverage.json beside it
	// has every behaviour with the scenarios that showed it); absent when
	// a run, or a merged part, had none.
	Coverage *coverage.SuiteSummary `json:"coverage,omitempty"`
}

// Outcome names a suite's exit status: with bugs on, a valid suite caught
// every bug and an invalid one missed one.
func Outcome(exit int, withBugs bool) string {
	switch {
	case exit == run.ExitCannotRun:
		return "could-not-run"
	case withBugs && exit == run.ExitValid:
		return "caught"
	case withBugs && exit == run.ExitInvalid:
		return "not-caught"
	}
	return run.VerdictFor(exit)
}

// Explain says what a suite's exit status means, for its error line.
func Explain(exit int, withBugs bool) string {
	switch {
	case exit == run.ExitCannotRun:
		return "a run could not start"
	case withBugs && exit == run.ExitInvalid:
		return "a bug went uncaught"
	}
	return run.VerdictFor(exit)
}

// WithBugs reports whether every run of runs had a bug on (and there was
// one): a --with-bugs suite.
func WithBugs(runs []Run) bool {
	return len(runs) > 0 && !slices.ContainsFunc(runs, func(r Run) bool { return r.Bug == "" })
}

// Write writes a suite's folder: its JUnit file, its summaries and its
// index page.
func Write(dir string, res Result) error {
	var jb bytes.Buffer
	if err := report.WriteJUnit(&jb, res.JUnit); err != nil {
		return err
	}
	return write(dir, res.Runs, jb.Bytes(), res.Exit, res.Took, res.Coverage)
}

func write(dir string, runs []Run, junit []byte, exit int, took time.Duration, cov *coverage.Suite) error {
	if err := os.WriteFile(filepath.Join(dir, report.JUnitFile), junit, 0o644); err != nil {
		return err
	}
	withBugs := WithBugs(runs)
	outcome := Outcome(exit, withBugs)
	sum := Summary{Outcome: outcome, ExitStatus: exit, WithBugs: withBugs, Took: took, Runs: runs}
	if cov != nil && len(cov.Runs) > 0 {
		if err := coverage.WriteSuite(dir, cov); err != nil {
			return err
		}
		cs := cov.Summary()
		sum.Coverage = &cs
	}
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, SummaryFile), b, 0o644); err != nil {
		return err
	}
	var md bytes.Buffer
	WriteTable(&md, runs, took)
	if sum.Coverage != nil {
		sum.Coverage.WriteMarkdown(&md)
	}
	if err := os.WriteFile(filepath.Join(dir, SummaryMarkdownFile), md.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, report.IndexFile), index(dir, runs, outcome, took), 0o644)
}

// ReadSummary reads a suite's summary.json (a regular file only,
// internal/regular).
func ReadSummary(path string) (Summary, error) {
	var s Summary
	b, err := regular.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	if s.Outcome == "" {
		return s, fmt.Errorf("%s: not a test-all summary (no outcome)", path)
	}
	return s, nil
}

// ReadTimings reads each scenario's median run time from an earlier
// suite's summary.json (runs that ran; skipped ones say nothing): the
// weights of --shard's split.
func ReadTimings(path string) (map[string]time.Duration, error) {
	s, err := ReadSummary(path)
	if err != nil {
		return nil, fmt.Errorf("--timings: %w", err)
	}
	by := map[string][]time.Duration{}
	for _, r := range s.Runs {
		if r.Skipped == "" && r.Duration > 0 {
			by[r.Scenario] = append(by[r.Scenario], r.Duration)
		}
	}
	out := map[string]time.Duration{}
	for name, ds := range by {
		out[name] = median(ds)
	}
	return out, nil
}

// median of ds (not empty); sorts ds.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// Merge combines the suite folders dirs (test-all --shard's parts) into
// out, a new folder: one JUnit file with every part's test suites, one
// summary and index page; the parts in the order given. Nothing is
// written unless every folder reads as a suite and all were run the same
// way (all with bugs, or none).
func Merge(dirs []string, out string) (Summary, error) {
	var (
		runs   []Run
		junits []io.Reader
		worst  = run.ExitValid
		took   time.Duration
		first  Summary
		// cov is the parts' coverage merged; nil once a part has none.
		cov = coverage.NewSuite()
	)
	for i, dir := range dirs {
		s, err := ReadSummary(filepath.Join(dir, SummaryFile))
		if err != nil {
			return Summary{}, err
		}
		if i == 0 {
			first = s
		} else if s.WithBugs != first.WithBugs {
			return Summary{}, fmt.Errorf("%s was run with --with-bugs %v, %s with %v: not parts of one suite", dirs[0], first.WithBugs, dir, s.WithBugs)
		}
		// Copied into the merged file: a regular file only.
		j, err := regular.ReadFile(filepath.Join(dir, report.JUnitFile))
		if err != nil {
			return Summary{}, err
		}
		switch pc, ok, err := coverage.ReadSuite(dir); {
		case err != nil:
			return Summary{}, err
		case !ok:
			cov = nil
		case cov != nil:
			cov.Merge(pc)
		}
		runs = append(runs, s.Runs...)
		junits = append(junits, bytes.NewReader(j))
		worst = run.Worse(worst, s.ExitStatus)
		took += s.Took
	}
	var jb bytes.Buffer
	if err := report.MergeJUnit(&jb, junits...); err != nil {
		return Summary{}, err
	}
	if _, err := os.Stat(out); err == nil {
		return Summary{}, fmt.Errorf("--out %s exists: give a new folder", out)
	} else if !errors.Is(err, os.ErrNotExist) {
		return Summary{}, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Summary{}, err
	}
	if err := write(out, runs, jb.Bytes(), worst, took, cov); err != nil {
		return Summary{}, err
	}
	return ReadSummary(filepath.Join(out, SummaryFile))
}

// index is the suite's index page: its outcome and one row per run,
// linked to the run's report where the run folder is reachable from dir.
func index(dir string, runs []Run, outcome string, took time.Duration) []byte {
	var b bytes.Buffer
	esc := html.EscapeString
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>shardtest suite: %s</title>\n", esc(outcome))
	b.WriteString("<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}" +
		".valid,.caught{color:#176317}.invalid,.not-caught{color:#a31515;font-weight:bold}.unknown,.could-not-run{color:#8a5a00}</style></head><body>\n")
	fmt.Fprintf(&b, "<h1>shardtest suite: <span class=\"%s\">%s</span></h1>\n<p>%s, %s in all. <a href=\"%s\">%s</a> · <a href=\"%s\">%s</a> · <a href=\"%s\">%s</a></p>\n",
		esc(outcome), esc(outcome), esc(Count(runs)), took.Round(time.Second), SummaryMarkdownFile, SummaryMarkdownFile, report.JUnitFile, report.JUnitFile, SummaryFile, SummaryFile)
	b.WriteString("<table><tr><th>scenario</th><th>seed</th><th>outcome</th><th>time</th><th>report</th></tr>\n")
	for _, r := range runs {
		class := string(r.Verdict)
		switch {
		case r.Skipped != "":
			class = ""
		case r.Error != "":
			class = "could-not-run"
		case r.Bug != "" && r.Caught:
			class = "caught"
		case r.Bug != "":
			class = "not-caught"
		}
		link := "—"
		if r.Dir != "" {
			page := filepath.Join(r.Dir, report.IndexFile)
			if rel, err := filepath.Rel(dir, page); err == nil {
				if _, err := os.Stat(page); err == nil {
					link = fmt.Sprintf("<a href=\"%s\">%s</a>", esc(filepath.ToSlash(rel)), esc(r.Dir))
				} else {
					link = esc(r.Dir)
				}
			}
		}
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td><td class=\"%s\">%s</td><td>%s</td><td>%s</td></tr>\n",
			esc(r.Scenario), r.Seed, class, esc(r.Outcome()), r.Duration.Round(time.Second), link)
	}
	b.WriteString("</table></body></html>\n")
	return b.Bytes()
}

// WriteTable writes summary.md's table: one row per scenario (and bug)
// with its seeds' outcomes, the correct node's runs first, then the bugs'.
func WriteTable(w io.Writer, runs []Run, took time.Duration) {
	var correct, bugs []Run
	for _, r := range runs {
		if r.Bug == "" {
			correct = append(correct, r)
		} else {
			bugs = append(bugs, r)
		}
	}
	if len(correct) > 0 || len(bugs) == 0 {
		fmt.Fprintln(w, "| scenario | seeds | valid | invalid | unknown | median run time |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, g := range groups(correct) {
			var valid, invalid, unknown int
			for _, r := range g.ran {
				switch r.Verdict {
				case checker.Valid:
					valid++
				case checker.Invalid:
					invalid++
				default:
					unknown++
				}
			}
			if len(g.ran) == 0 {
				fmt.Fprintf(w, "| %s | skipped: %s | — | — | — | — |\n", mdCell(g.scenario), mdCell(g.skipped))
				continue
			}
			fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %s |\n", mdCell(g.scenario), len(g.ran), valid, invalid, unknown, g.median())
		}
	}
	if len(bugs) > 0 {
		if len(correct) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "| scenario | bug | caught | median run time |")
		fmt.Fprintln(w, "|---|---|---|---|")
		for _, g := range groups(bugs) {
			if len(g.ran) == 0 {
				fmt.Fprintf(w, "| %s | `%s` skipped: %s | — | — |\n", mdCell(g.scenario), mdCell(g.bug), mdCell(g.skipped))
				continue
			}
			caught := 0
			for _, r := range g.ran {
				if r.Caught {
					caught++
				}
			}
			fmt.Fprintf(w, "| %s | `%s` | %d of %d runs | %s |\n", mdCell(g.scenario), mdCell(g.bug), caught, len(g.ran), g.median())
		}
	}
	fmt.Fprintf(w, "\n%s, %s in all.\n", Count(runs), took.Round(time.Second))
}

// group is the runs of one scenario (and bug) in a summary table.
type group struct {
	scenario, bug, skipped string
	ran                    []Run
}

func (g group) median() string {
	var ds []time.Duration
	for _, r := range g.ran {
		ds = append(ds, r.Duration)
	}
	return median(ds).Round(time.Second).String()
}

// groups gathers runs by scenario and bug, in the order they first come.
func groups(runs []Run) []*group {
	var out []*group
	by := map[[2]string]*group{}
	for _, r := range runs {
		k := [2]string{r.Scenario, r.Bug}
		g := by[k]
		if g == nil {
			g = &group{scenario: r.Scenario, bug: r.Bug}
			by[k] = g
			out = append(out, g)
		}
		if r.Skipped != "" {
			g.skipped = r.Skipped
			continue
		}
		g.ran = append(g.ran, r)
	}
	return out
}

// Count says how many runs ran and how many were skipped.
func Count(runs []Run) string {
	skipped := 0
	for _, r := range runs {
		if r.Skipped != "" {
			skipped++
		}
	}
	s := fmt.Sprintf("%d runs", len(runs)-skipped)
	if skipped > 0 {
		s += fmt.Sprintf(" (%d skipped)", skipped)
	}
	return s
}

// mdCell makes text one Markdown table cell: on one line, with its pipes
// escaped (a skip reason can be a multi-line error).
func mdCell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
)

// Exit statuses of every command (run.Exit*, the one table).
const (
	exitValid     = run.ExitValid
	exitInvalid   = run.ExitInvalid
	exitUnknown   = run.ExitUnknown
	exitCannotRun = run.ExitCannotRun
)

// exitError carries an exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// cannotRun is err as a command's failure to run (exit 3).
func cannotRun(err error) error { return &exitError{exitCannotRun, err} }

// verdictError is the error of a command whose verdict is code's (nil:
// valid).
func verdictError(code int, what string) error {
	if code == exitValid {
		return nil
	}
	return &exitError{code, errors.New(what)}
}

func printChecks(w io.Writer, results []checker.Result) {
	if len(results) == 0 {
		fmt.Fprintln(w, "  (no checker for this workload yet: verdict unknown)")
	}
	// A line per checker, then what failed: when, the smallest
	// counterexample, the first lines of evidence (the report has the
	// rest). An unknown checker's first lines say why it could not decide.
	for _, r := range results {
		fmt.Fprintf(w, "  %-14s %-8s %s\n", r.Checker, r.Verdict, r.Summary)
	}
	const lines = 3
	for _, r := range results {
		if r.Verdict == checker.Valid || len(r.Evidence) == 0 && r.Detection == nil && r.Smallest == nil {
			continue
		}
		fmt.Fprintf(w, "%s (%s):\n", r.Checker, r.Verdict)
		if r.Detection != nil {
			fmt.Fprintf(w, "    %s\n", r.Detection)
		}
		if s := r.Smallest; s != nil {
			fmt.Fprintf(w, "    smallest counterexample: %s (%d operations)", s.What, s.Ops)
			if s.File != "" {
				fmt.Fprintf(w, ": %s", s.File)
			}
			fmt.Fprintln(w)
		}
		for i, e := range r.Evidence {
			if i == lines {
				fmt.Fprintf(w, "    ... %d more lines in the report\n", len(r.Evidence)-lines)
				break
			}
			fmt.Fprintf(w, "    %s\n", e)
		}
	}
}

// printReports prints the paths of the run's report page and JUnit file,
// those that were written.
func printReports(w io.Writer, dir string) {
	for _, f := range []struct{ label, name string }{{"report", report.IndexFile}, {"junit", report.JUnitFile}} {
		p := filepath.Join(dir, f.name)
		if _, err := os.Stat(p); err == nil {
			fmt.Fprintf(w, "%s: %s\n", f.label, p)
		}
	}
}

// isTerminal reports whether w is a terminal (progress lines are for
// people; CI logs get none).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine rewrites one line on w with the check's progress, at most
// twice a second.
func progressLine(w io.Writer) func(checker.Progress) {
	var last time.Time
	return func(p checker.Progress) {
		if time.Since(last) < 500*time.Millisecond && !p.Done {
			return
		}
		last = time.Now()
		fmt.Fprintf(w, "\r\033[K%s", p)
	}
}

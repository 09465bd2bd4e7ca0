// Package results reads the results store that `shardtest run` writes:
// <root>/<test name>/<UTC timestamp>/ folders holding test.json,
// results.json, history.jsonl and node logs, next to the relative
// symlinks <root>/latest and <root>/<test name>/latest.
//
// Reading is tolerant: a folder that is not a run is skipped, and a run
// whose files are missing or malformed is still listed, with a verdict
// saying so and an Error describing the problem.
package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/regular"
)

// Latest is the name of the symlinks to the newest run.
const Latest = "latest"

// Verdicts besides those results.json holds ("unchecked", "valid",
// "invalid", "unknown").
const (
	// VerdictIncomplete: results.json is missing; the harness was killed or
	// is still running.
	VerdictIncomplete = "incomplete"
	// VerdictUnreadable: results.json exists but cannot be read or parsed.
	VerdictUnreadable = "unreadable"
)

// TimestampLayout is the layout of a run folder's name (UTC).
const TimestampLayout = "20060102T150405.000Z"

// Options is test.json, as shardtest run writes it (one definition, so
// the store cannot drift from what runs record).
type Options = run.Options

// Run is one stored run.
type Run struct {
	// Name is the test name: the run folder's parent folder.
	Name string
	// Dir is the run folder's path (root joined with RelDir).
	Dir string
	// RelDir is the run folder relative to the root, with forward slashes.
	RelDir string
	// Started is when the run started: from results.json, else from the
	// folder name, else the folder's modification time.
	Started time.Time
	// Duration is from results.json; 0 when unknown.
	Duration time.Duration
	// Options is test.json; nil when it is missing or malformed.
	Options *Options
	// Verdict is results.json's verdict, VerdictIncomplete when
	// results.json is missing, or VerdictUnreadable when it is malformed.
	Verdict string
	// Summary holds results.json's counts (zero when it is missing).
	Summary history.Summary
	// Files are the run folder's regular files, relative to Dir with
	// forward slashes, sorted; symlinks are left out.
	Files []string
	// Error describes what could not be read; empty when all is well.
	Error string
}

type resultFile struct {
	Started  time.Time       `json:"started"`
	Duration time.Duration   `json:"duration_ns"`
	Summary  history.Summary `json:"summary"`
	Verdict  string          `json:"verdict"`
}

// List lists the runs under root, newest first. It fails only when root
// itself cannot be read; anything odd inside is skipped or reported in the
// affected Run's Error.
func List(root string) ([]Run, error) {
	st, err := os.Stat(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("results directory %s does not exist", root)
		}
		return nil, fmt.Errorf("results directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("results directory %s is not a directory", root)
	}
	tests, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("results directory: %w", err)
	}
	var runs []Run
	for _, t := range tests {
		if !t.IsDir() || t.Name() == Latest { // symlinks and stray files
			continue
		}
		entries, err := os.ReadDir(filepath.Join(root, t.Name()))
		if err != nil {
			continue // unreadable test folder: nothing to list
		}
		for _, e := range entries {
			if !e.IsDir() || e.Name() == Latest {
				continue
			}
			dir := filepath.Join(root, t.Name(), e.Name())
			if !isRun(dir) {
				continue
			}
			runs = append(runs, read(root, t.Name(), e.Name()))
		}
	}
	sort.SliceStable(runs, func(i, j int) bool {
		if !runs[i].Started.Equal(runs[j].Started) {
			return runs[i].Started.After(runs[j].Started)
		}
		return runs[i].RelDir > runs[j].RelDir
	})
	return runs, nil
}

// isRun reports whether dir holds any of a run's own files.
func isRun(dir string) bool {
	for _, f := range []string{report.TestFile, report.ResultsFile, history.HistoryFile} {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

// read reads one run folder; it never fails, recording problems in Error.
func read(root, name, stamp string) Run {
	dir := filepath.Join(root, name, stamp)
	r := Run{Name: name, Dir: dir, RelDir: name + "/" + stamp}
	var problems []string

	var o Options
	switch err := readJSON(filepath.Join(dir, report.TestFile), &o); {
	case errors.Is(err, fs.ErrNotExist):
		problems = append(problems, "no "+report.TestFile)
	case err != nil:
		problems = append(problems, err.Error())
	default:
		r.Options = &o
	}

	var res resultFile
	switch err := readJSON(filepath.Join(dir, report.ResultsFile), &res); {
	case errors.Is(err, fs.ErrNotExist):
		r.Verdict = VerdictIncomplete
		problems = append(problems, "no "+report.ResultsFile+": the run did not finish (harness killed or still running)")
	case err != nil:
		r.Verdict = VerdictUnreadable
		problems = append(problems, err.Error())
	default:
		r.Verdict = res.Verdict
		if r.Verdict == "" {
			r.Verdict = "unknown"
		}
		r.Started = res.Started
		r.Duration = res.Duration
		r.Summary = res.Summary
	}
	if r.Started.IsZero() {
		if t, err := time.Parse(TimestampLayout, stamp); err == nil {
			r.Started = t
		} else if st, err := os.Stat(dir); err == nil {
			r.Started = st.ModTime().UTC()
		}
	}

	files, err := listFiles(dir)
	if err != nil {
		problems = append(problems, "listing files: "+err.Error())
	}
	r.Files = files
	for i, p := range problems {
		if i > 0 {
			r.Error += "; "
		}
		r.Error += p
	}
	return r
}

func readJSON(path string, v any) error {
	// Only a regular file: opening a FIFO blocks until a writer comes.
	b, err := regular.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return fmt.Errorf("%s: %w", filepath.Base(path), err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: malformed JSON: %w", filepath.Base(path), err)
	}
	return nil
}

// listFiles lists dir's regular files recursively, relative, slash-separated.
func listFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // skip what cannot be read
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return nil
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	sort.Strings(files)
	return files, err
}

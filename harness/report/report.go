// Package report writes a run's human and CI reports into its results
// folder: index.html, a self-contained page (verdicts with their evidence,
// the checkers' files, the options, the history's counts and a timeline of
// faults and operations per node), and junit.xml, one testsuite with one
// testcase per checker.
//
// The page opens from disk with no network: no scripts, no external CSS,
// fonts or images, only relative links to files beside it. Its size is
// bounded whatever the history's size: the timeline has at most
// maxBuckets time buckets and the lists are capped, with a note saying
// what was left out.
//
// Everything shown comes from histories and checker output, which may be
// odd or hostile: the page goes through html/template, junit.xml through
// encoding/xml, and links are made only to files that exist inside the
// run folder.
package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/atomicfile"
)

// File names in a run folder: those this package writes and those it
// links to.
const (
	IndexFile   = "index.html"
	JUnitFile   = "junit.xml"
	TestFile    = "test.json"
	ResultsFile = "results.json"
)

// Input is what a report shows about one run.
type Input struct {
	// Test is the test's name.
	Test string
	// Started is the run's wall-clock start; Duration how long it took.
	Started  time.Time
	Duration time.Duration
	// Verdict combines the checkers' verdicts; Checks are their results,
	// whose Files are relative to the run folder.
	Verdict checker.Verdict
	Checks  []checker.Result
	// Summary counts the history's entries.
	Summary history.Summary
	// History is the run's history; nil when it could not be read (the
	// page then shows the counts of Summary only).
	History *history.File
	// Analyzed, when set, has seen every entry of the history as it
	// streamed past (checker.CheckFile's pass), and History may then hold
	// only its outline: the page is drawn from it, the history never held.
	Analyzed *Analyzer
	// Options is test.json as stored (any JSON; nil when missing).
	Options json.RawMessage
	// Coverage is the run's behaviour coverage (nil: not computed), and
	// CoverageSummary its counts against the results store.
	Coverage        *coverage.Coverage
	CoverageSummary *coverage.Summary
	// Rechecked, when set, is when `shardtest check` re-ran the checkers:
	// the page then says that its verdict may differ from results.json's,
	// which check leaves as the run wrote it.
	Rechecked time.Time
}

// Write writes index.html and junit.xml into the run folder dir. Each
// file is written whole or not at all (a temporary file renamed), so a
// server or a browser never sees half a page. Both are attempted even if
// one fails.
func Write(dir string, in Input) error {
	// junit.xml first: the page links it only if it exists.
	var page, junit bytes.Buffer
	jerr := WriteJUnitSuite(&junit, Run{Dir: dir, Input: in})
	if jerr == nil {
		jerr = atomicfile.Write(dir, JUnitFile, junit.Bytes())
	}
	herr := WriteHTML(&page, dir, in)
	if herr == nil {
		herr = atomicfile.Write(dir, IndexFile, page.Bytes())
	}
	return errors.Join(jerr, herr)
}

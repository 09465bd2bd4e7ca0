// Package checker holds the checkers: each reads a recorded history and
// returns a verdict (valid, invalid or unknown) with evidence a person can
// follow. Checkers depend only on the history format (package
// history, docs/history.md), never on the rest of the harness, so a
// stored run can be checked again later.
//
// Conventions shared by the checkers: a completion belongs to its process's
// last invocation; fail means the operation certainly did not take effect;
// info, and an invocation with no completion (the harness stopped first),
// mean the outcome is unknown: it may or may not have taken effect, at any
// time after its invocation. Only the harness's monotonic time orders ops.
package checker

import (
	"context"
	"fmt"
	"time"

	"github.com/shardtest/shardtest/history"
)

// Verdict is a checker's conclusion.
type Verdict string

// Verdicts.
const (
	// Valid: the history satisfies the property.
	Valid Verdict = "valid"
	// Invalid: the history violates it; the evidence shows where.
	Invalid Verdict = "invalid"
	// Unknown: the checker could not decide (nothing to check, too costly,
	// timed out, unreadable values).
	Unknown Verdict = "unknown"
)

// Result is one checker's verdict with its evidence.
type Result struct {
	Checker string  `json:"checker"`
	Verdict Verdict `json:"verdict"`
	// Summary is one line for people.
	Summary string `json:"summary"`
	// Evidence is what a person can follow: entities, ops (indexes,
	// times), values.
	Evidence []string `json:"evidence,omitempty"`
	// Files are written by the checker (e.g. porcupine visualizations),
	// relative to the output directory.
	Files []string `json:"files,omitempty"`
	// FirstViolation is, for invalid, the earliest time (history clock,
	// ns) by which the history proves a violation: the completion that
	// completes the proof. 0: not known.
	FirstViolation int64 `json:"first_violation_ns,omitempty"`
	// Detection says how long after the last fault took effect the first
	// violation was proven (set by Detect).
	Detection *Detection `json:"detection,omitempty"`
	// Smallest is, for invalid, the counterexample with the fewest
	// operations: the one to read first.
	Smallest *Counterexample `json:"smallest,omitempty"`
}

// Counterexample names one violation a person can follow.
type Counterexample struct {
	// What it is about (an entity) and how many operations show it.
	What string `json:"what"`
	Ops  int    `json:"ops"`
	// File is its visualization, relative to the output directory ("":
	// none).
	File string `json:"file,omitempty"`
}

// proven notes a violation proven by time t (the earliest one is kept).
func (r *Result) proven(t int64) {
	if t > 0 && (r.FirstViolation == 0 || t < r.FirstViolation) {
		r.FirstViolation = t
	}
}

// Detection is the time from the last fault's effect to the first proven
// violation: how long the checker needed the history to run on to show
// what the fault did.
type Detection struct {
	// Fault is the last fault that took effect at or before the
	// violation, FaultAt when (ns); empty when none had.
	Fault   string `json:"fault,omitempty"`
	FaultAt int64  `json:"fault_at_ns,omitempty"`
	// At is the first proven violation (ns) and After = At - FaultAt.
	At    int64         `json:"at_ns"`
	After time.Duration `json:"after_ns,omitempty"`
}

// String says it for people.
func (d Detection) String() string {
	at := time.Duration(d.At).Round(time.Millisecond)
	if d.Fault == "" {
		return fmt.Sprintf("first violation proven at %v, before any fault took effect", at)
	}
	return fmt.Sprintf("first violation proven at %v, %v after %s took effect (at %v)", at, d.After.Round(time.Millisecond), d.Fault, time.Duration(d.FaultAt).Round(time.Millisecond))
}

// Detect sets the Detection of every invalid result that knows its first
// violation: the time from the last fault (an inject that took effect,
// not a failed one) at or before it.
func Detect(results []Result, h *history.File) {
	spans, _ := history.Faults(h.Ops)
	for i := range results {
		r := &results[i]
		if r.Verdict != Invalid || r.FirstViolation <= 0 {
			continue
		}
		d := &Detection{At: r.FirstViolation}
		for _, s := range spans {
			if s.Failed() || s.Inject.At > r.FirstViolation {
				continue
			}
			if d.Fault == "" || s.Inject.At >= d.FaultAt {
				d.Fault, d.FaultAt = s.Fault(), s.Inject.At
			}
		}
		if d.Fault != "" {
			d.After = time.Duration(d.At - d.FaultAt)
		}
		r.Detection = d
	}
}

// Checker checks one property of a history and what was recorded with
// it (Inputs). Check writes any files under in.Out (nothing if it is
// empty) and never panics on odd histories.
type Checker interface {
	Name() string
	Check(ctx context.Context, h *history.File, in Inputs) Result
}

// Combine is the verdict of several checkers: invalid if any is invalid,
// else unknown if any is unknown, else valid. No results is unknown.
func Combine(results []Result) Verdict {
	if len(results) == 0 {
		return Unknown
	}
	v := Valid
	for _, r := range results {
		switch r.Verdict {
		case Invalid:
			return Invalid
		case Valid:
		default:
			v = Unknown
		}
	}
	return v
}

// maxEvidence bounds the evidence lines of one kind a checker lists.
const maxEvidence = 20

// truncatedNote is the evidence line for a cut-off history.
func truncatedNote(h *history.File) []string {
	if h.Truncated {
		return []string{"the history's last line was cut off (the harness died writing it); it was left out, so an invocation it completed counts as unknown"}
	}
	return nil
}

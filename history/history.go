// Package history is the record of a test run: every operation's invocation
// and completion, and every nemesis action, stamped with the harness's own
// monotonic clock. It is written incrementally as JSON lines (one Op per
// line, after a header line), so a harness that crashes still leaves a
// readable history. docs/history.md documents the format; Version changes
// when it does.
package history

import (
	"encoding/json"
	"time"
)

// Format names the file format in the header line.
const Format = "shardtest-history"

// Version is the format version this package writes and reads.
const Version = 1

// The files of a run's folder that hold what the harness recorded (the
// history, the node events, the status samples; docs/history.md).
const (
	HistoryFile = "history.jsonl"
	EventsFile  = "events.jsonl"
	StatusFile  = "status.jsonl"
)

// Kinds of entries.
const (
	// Invoke: a client sent an operation.
	Invoke = "invoke"
	// OK: the operation completed and took effect.
	OK = "ok"
	// Fail: the operation definitely did not take effect.
	Fail = "fail"
	// Info: the outcome is unknown (timeout, lost connection): it may or
	// may not have taken effect. Never a failure.
	Info = "info"
	// Nemesis: a fault was injected or healed.
	Nemesis = "nemesis"
	// Phase: the run entered a phase (warm-up, main, final).
	Phase = "phase"
)

// Header is the first line of a history file.
type Header struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Test names the test; Started is the wall-clock start (for people;
	// times in ops are monotonic nanoseconds since the run started).
	Test    string    `json:"test"`
	Started time.Time `json:"started"`
}

// Reply is what a completion learned about where it was served.
type Reply struct {
	// Node and Incarnation that answered the request.
	Node        string `json:"node,omitempty"`
	Incarnation string `json:"incarnation,omitempty"`
	// Shard, HostNode (member uid) and EntityIncarnation of an entity op.
	Shard             string `json:"shard,omitempty"`
	HostNode          string `json:"host_node,omitempty"`
	EntityIncarnation string `json:"entity_incarnation,omitempty"`
	// Singleton instance of a singleton op: node@incarnation#instance.
	Singleton string `json:"singleton,omitempty"`
	// Status is the HTTP status of an error reply (fail or info): the
	// node answered, with the protocol's error body. Absent on ok and
	// when no reply arrived (a timeout, a lost connection).
	Status int `json:"status,omitempty"`
}

// Answered reports whether a completion carries a reply from the node: ok,
// or an error reply (Reply.Status). An info without one is silence.
func (o Op) Answered() bool {
	return o.Kind == OK || o.Reply != nil && o.Reply.Status != 0
}

// Op is one history entry.
type Op struct {
	// Index is the entry's position in the history, from 0.
	Index int64 `json:"index"`
	// Time is nanoseconds since the run started, on the harness's
	// monotonic clock: the only clock checkers may order by.
	Time int64  `json:"time"`
	Kind string `json:"kind"`
	// Process is the client worker (from 0); -1 for the nemesis and phases.
	Process int `json:"process"`
	// F is the operation: read, write, cas, append, tell, next-id, ...
	F string `json:"f"`
	// Entity is "type/id" for entity operations.
	Entity string `json:"entity,omitempty"`
	// Node is the node the client contacted.
	Node string `json:"node,omitempty"`
	// Value: for an invoke the operation's arguments; for ok its result.
	Value json.RawMessage `json:"value,omitempty"`
	// Reply says where a completion was served.
	Reply *Reply `json:"reply,omitempty"`
	// Error is the failure's or unknown outcome's reason (code: message).
	Error string `json:"error,omitempty"`
}

// Completion reports whether op completes an invocation.
func (o Op) Completion() bool { return o.Kind == OK || o.Kind == Fail || o.Kind == Info }

// Phases of a run, in order; a run that recorded faults has a recovery
// phase between main and final. PhaseEnd is written once the final
// read-back is over: a history without it stopped early (the harness was
// interrupted or killed) and cannot show what the final phase would have.
const (
	PhaseWarmUp   = "warm-up"
	PhaseMain     = "main"
	PhaseRecovery = "recovery"
	PhaseFinal    = "final"
	PhaseEnd      = "end"
)

// Recovery is the value of the final phase's entry in a run with faults:
// whether, after the last heal, the cluster converged (every node ready,
// reaching every member, counting every node up) before the harness gave
// up waiting, and how long that took.
type Recovery struct {
	Converged bool `json:"converged"`
	// Waited is how long the harness waited after the last heal (ns).
	Waited int64 `json:"waited_ns"`
	// Why says what was still wrong when the harness gave up.
	Why string `json:"why,omitempty"`
}

// Recovery returns the recovery outcome the history recorded, and whether
// it recorded one (a run with faults that reached its final phase).
func (f *File) Recovery() (Recovery, bool) {
	for i := range f.Ops {
		op := &f.Ops[i]
		if op.Kind == Phase && op.F == PhaseFinal && len(op.Value) > 0 {
			var r Recovery
			if json.Unmarshal(op.Value, &r) == nil {
				return r, true
			}
		}
	}
	return Recovery{}, false
}

// Ended reports whether the history is whole: its run reached the end of
// its final phase and no line was cut off. If not, why says what is
// missing, for verdicts that must not claim more than the history shows.
func (f *File) Ended() (ok bool, why string) {
	final, end := false, false
	for i := range f.Ops {
		if f.Ops[i].Kind != Phase {
			continue
		}
		switch f.Ops[i].F {
		case PhaseFinal:
			final = true
		case PhaseEnd:
			end = true
		}
	}
	switch {
	case f.Truncated:
		return false, "the history is cut off (the harness stopped while writing it)"
	case end:
		return true, ""
	case final:
		return false, "the run ended during its final read-back"
	}
	return false, "the run ended before its final read-back"
}

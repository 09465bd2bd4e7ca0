// Package journal is the shardtest journal's API and its Go client: the
// durable event store the harness runs beside every cluster (`shardtest
// journal`, its URL in SHARDTEST_JOURNAL), which implementations under test
// may use to keep state that must survive crashes (the reference node keeps
// its up-numbers, the singleton's counter, the coordinators' allocations and
// its persistent entities there).
//
// The model: events are appended to a persistence id (pid) under an
// expected sequence number, so two writers on one id conflict instead of
// interleaving; they are replayed from a sequence number; and a writer
// fences an id with a new epoch, after which appends under older epochs are
// refused, so a stale incarnation cannot write over its successor.
//
// The HTTP API (JSON bodies, every answer JSON):
//
//	POST /v1/append  {"pid", "expected_seq", "epoch", "events": [base64, ...]}
//	                 → {"last_seq": n}
//	POST /v1/replay  {"pid", "from", "max"}
//	                 → {"events": [{"pid", "seq", "global", "epoch", "written", "data": base64}, ...]}
//	POST /v1/fence   {"pid", "token"}  → {"epoch": e, "highest": n}
//	POST /v1/highest {"pid"}           → {"highest": n}
//	GET  /v1/health                    → {"ok": true}
//
// What the fields mean:
//   - expected_seq is the highest sequence number the writer has seen: 0
//     for an id it believes new; the append is refused (seq-conflict)
//     unless it is the id's highest stored sequence number. -1 (AnySeq)
//     appends after whatever is there: for allocations (the reference
//     node's up-numbers), never for event-sourced state. It is required.
//   - epoch is the writer epoch the append is made under: refused (fenced)
//     if a higher epoch has fenced the id. 0 (NoEpoch) skips fencing.
//   - events are opaque bytes (base64 in JSON), 1 to 10,000 per append, each
//     at most 4 MiB, the request at most 8 MiB; all are written, or none. last_seq is the sequence
//     number of the last one written. Sequence numbers start at 1 and have
//     no gaps.
//   - replay returns the events of pid with seq >= from (from is
//     inclusive; 0 and 1 both mean from the start), in order, at most max
//     of them (0: no limit); an unknown pid has none. global is the
//     journal-wide commit order, epoch the epoch written under, written the
//     journal's clock (informational).
//   - fence gives pid a new epoch, higher than any before, and returns it
//     with the highest sequence number stored at that moment. With a token
//     (up to 64 bytes of [A-Za-z0-9_-]) it is idempotent: repeated with
//     the same token (a retry after a lost answer) it returns the epoch the
//     first one gave instead of fencing the very writer that asked. The
//     journal remembers each pid's last 16 tokens.
//   - highest is the highest sequence number stored for pid (0: none).
//   - pid is 1 to 1024 bytes of UTF-8. A request body with invalid UTF-8
//     or a lone surrogate escape (\ud800 with no low half after it, or
//     \udfff alone) is refused (invalid): decoded, both become U+FFFD, and
//     distinct pids would append to one stream.
//
// Errors are protocol.ErrorBody, {"error": message, "code": code,
// "outcome": "fail"|"unknown"}, with the codes, statuses and outcomes of
// protocol's table (protocol.ScopeJournal): seq-conflict (409), fenced
// (409), invalid (400: malformed request, bad pid, no events, too many),
// too-large (413), not-found (404), method-not-allowed (405) are all
// outcome "fail": nothing was written. unavailable (503: the store timed
// out) and internal (500) are "unknown": the append may or may not have
// been written, so re-read (highest, replay) before writing again. A reply
// that never arrives is unknown too.
//
// Client implements all of this with retries where they are safe; Store
// (package impl/persistence) is the bbolt-backed journal the server runs.
package journal

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// AnySeq as an expected sequence number appends after whatever is there:
// used for allocations (up-numbers), never by event-sourced writers.
const AnySeq int64 = -1

// NoEpoch as an epoch skips fencing for that append.
const NoEpoch uint64 = 0

// Event is one stored event.
type Event struct {
	// PersistenceID is the id the event belongs to.
	PersistenceID string `json:"pid"`
	// Seq is its sequence number within the id, from 1, gapless.
	Seq int64 `json:"seq"`
	// Global is the journal-wide commit order: strictly increasing across
	// all ids, so checkers can read the journal's write order.
	Global uint64 `json:"global"`
	// Epoch is the writer epoch the event was appended under (0: unfenced).
	Epoch uint64 `json:"epoch"`
	// Written is the journal server's clock at commit (informational).
	Written time.Time `json:"written"`
	// Data is the payload, opaque to the journal.
	Data []byte `json:"data"`
}

// Journal is an event journal.
type Journal interface {
	// Append writes events after expectedSeq (the highest sequence number
	// the writer has seen; 0 for a new id; AnySeq for "after whatever is
	// there"). With epoch != NoEpoch the append is refused if a higher epoch
	// has fenced the id. All events are written, or none. It returns the
	// sequence number of the last event written.
	Append(ctx context.Context, pid string, expectedSeq int64, epoch uint64, data [][]byte) (lastSeq int64, err error)
	// Replay returns up to max events (0: no limit) of pid with Seq >= from,
	// in order.
	Replay(ctx context.Context, pid string, from int64, max int) ([]Event, error)
	// Fence gives pid a new writer epoch, higher than any before, and
	// returns it with the highest sequence number stored at that moment.
	// Appends under older epochs are refused from then on.
	Fence(ctx context.Context, pid string) (epoch uint64, highest int64, err error)
	// Highest returns the highest sequence number stored for pid (0: none).
	Highest(ctx context.Context, pid string) (int64, error)
}

// OnceFencer is a Journal whose fences can be made idempotent: a fence
// repeated with the same token returns the epoch the first one gave rather
// than a higher one. Store implements it, and the server uses it for
// requests with a token, which Client sends: one token per Fence call, the
// same on each of its retries.
type OnceFencer interface {
	FenceOnce(ctx context.Context, pid, token string) (epoch uint64, highest int64, err error)
}

// Definite failures: the journal did not write anything.
var (
	// ErrSeqConflict: expectedSeq was not the highest stored sequence number.
	ErrSeqConflict = errors.New("journal: sequence number conflict")
	// ErrFenced: a newer writer epoch holds the id.
	ErrFenced = errors.New("journal: fenced by a newer writer epoch")
	// ErrInvalid: the request itself was malformed (empty id, no events, ...).
	ErrInvalid = errors.New("journal: invalid request")
)

// ErrUnavailable wraps errors where the journal could not be reached or did
// not answer in time. For an Append the outcome is then unknown: the events
// may or may not have been written, and a writer must re-read before it
// writes again.
var ErrUnavailable = errors.New("journal: unavailable")

// IsDefinite reports whether err means the operation certainly had no effect.
func IsDefinite(err error) bool {
	return errors.Is(err, ErrSeqConflict) || errors.Is(err, ErrFenced) || errors.Is(err, ErrInvalid)
}

// Limits on what one call may ask of the journal. They keep a single
// request from monopolising the writer or the server's memory.
const (
	// MaxPIDBytes is the longest persistence id accepted.
	MaxPIDBytes = 1024
	// MaxEventBytes is the largest single event payload accepted.
	MaxEventBytes = 4 << 20
	// MaxAppendEvents is the most events one Append may write.
	MaxAppendEvents = 10_000
)

// ValidatePID rejects ids the journal cannot store faithfully. Ids must be
// valid UTF-8 because the HTTP API carries them as JSON strings, which would
// silently rewrite invalid bytes and store under a different id. (A lone
// surrogate escape in the JSON is the server's to refuse, with
// protocol.CheckSurrogates on the body: decoded, it is already U+FFFD.)
func ValidatePID(pid string) error {
	switch {
	case pid == "":
		return fmt.Errorf("%w: empty persistence id", ErrInvalid)
	case len(pid) > MaxPIDBytes:
		return fmt.Errorf("%w: persistence id of %d bytes exceeds %d", ErrInvalid, len(pid), MaxPIDBytes)
	case !utf8.ValidString(pid):
		return fmt.Errorf("%w: persistence id is not valid UTF-8", ErrInvalid)
	}
	return nil
}

// ValidateAppend checks everything about an append that does not depend on
// what is stored. The Client runs it too, so bad calls fail the same way
// locally and remotely without a round trip.
func ValidateAppend(pid string, expectedSeq int64, data [][]byte) error {
	if err := ValidatePID(pid); err != nil {
		return err
	}
	if expectedSeq < AnySeq {
		return fmt.Errorf("%w: expected seq %d (must be >= 0, or AnySeq)", ErrInvalid, expectedSeq)
	}
	if len(data) == 0 {
		return fmt.Errorf("%w: no events", ErrInvalid)
	}
	if len(data) > MaxAppendEvents {
		return fmt.Errorf("%w: %d events exceed %d per append", ErrInvalid, len(data), MaxAppendEvents)
	}
	for i, d := range data {
		if len(d) > MaxEventBytes {
			return fmt.Errorf("%w: event %d is %d bytes, more than %d", ErrInvalid, i, len(d), MaxEventBytes)
		}
	}
	return nil
}

// MaxRequestBytes bounds an HTTP request body: one event of MaxEventBytes
// base64-encoded fits, with room to spare. Real events are tiny; the bound
// (with the server's bound on requests in flight) keeps a stranger's large
// appends from taking the journal's memory.
const MaxRequestBytes = 8 << 20

// API paths.
const (
	PathAppend  = "/v1/append"
	PathReplay  = "/v1/replay"
	PathFence   = "/v1/fence"
	PathHighest = "/v1/highest"
	PathHealth  = "/v1/health"
)

// AppendRequest is POST /v1/append.
type AppendRequest struct {
	PID string `json:"pid"`
	// ExpectedSeq is a pointer so a missing field is an error rather than
	// a silent "0: new id".
	ExpectedSeq *int64   `json:"expected_seq"`
	Epoch       uint64   `json:"epoch"`
	Events      [][]byte `json:"events"`
}

// AppendReply answers an append.
type AppendReply struct {
	LastSeq int64 `json:"last_seq"`
}

// ReplayRequest is POST /v1/replay.
type ReplayRequest struct {
	PID  string `json:"pid"`
	From int64  `json:"from"`
	Max  int    `json:"max"`
}

// ReplayReply answers a replay.
type ReplayReply struct {
	Events []Event `json:"events"`
}

// PIDRequest is POST /v1/highest.
type PIDRequest struct {
	PID string `json:"pid"`
}

// FenceRequest is POST /v1/fence: Token (optional) makes a repeated fence return the epoch
// the first one gave (OnceFencer).
type FenceRequest struct {
	PID   string `json:"pid"`
	Token string `json:"token,omitempty"`
}

// FenceReply answers a fence.
type FenceReply struct {
	Epoch   uint64 `json:"epoch"`
	Highest int64  `json:"highest"`
}

// HighestReply answers POST /v1/highest.
type HighestReply struct {
	Highest int64 `json:"highest"`
}

// HealthReply answers GET /v1/health.
type HealthReply struct {
	OK bool `json:"ok"`
}

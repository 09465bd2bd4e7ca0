// Package persistence is the durable event journal: events appended to a
// persistence id under an expected sequence number (so two writers on one id
// conflict instead of interleaving), replayed from a sequence number, and
// fenced by writer epochs (so a stale incarnation's writes are refused once a
// newer one has taken the id over).
//
// Store is the bbolt-backed journal; Server serves a Store over HTTP/JSON
// (the "distributed journal" of `shardtest journal`); Client is what nodes
// use to reach it. Store and Client both implement Journal.
package persistence

import (
	"context"
	"errors"
	"time"
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

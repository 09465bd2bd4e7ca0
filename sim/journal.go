package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/shardtest/shardtest/protocol/journal"
)

// Journal is the journal of a simulation: the semantics of the reference
// journal (impl/persistence.Store: gapless sequence numbers per id, the
// expected-sequence check, writer epochs that fence older writers, a
// journal-wide commit order) kept in memory, because a simulated run
// appends tens of thousands of events and the file's transactions cost
// more than the rest of the simulation together. sim/nodes's
// TestJournalsAgree holds the two to the same answers on the same calls.
// Written is the world's virtual time. Not safe for concurrent use (a
// world is one goroutine).
type Journal struct {
	now    func() time.Time
	ids    map[string]*journalID
	global uint64
}

type journalID struct {
	epoch  uint64
	events []journal.Event
}

// NewJournal is an empty journal; now stamps what is written.
func NewJournal(now func() time.Time) *Journal {
	return &Journal{now: now, ids: map[string]*journalID{}}
}

func (j *Journal) id(pid string) *journalID {
	id := j.ids[pid]
	if id == nil {
		id = &journalID{}
		j.ids[pid] = id
	}
	return id
}

// Append implements journal.Journal.
func (j *Journal) Append(ctx context.Context, pid string, expectedSeq int64, epoch uint64, data [][]byte) (int64, error) {
	if err := journal.ValidateAppend(pid, expectedSeq, data); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	id := j.id(pid)
	if epoch != journal.NoEpoch && epoch < id.epoch {
		return 0, fmt.Errorf("%w: pid %q: epoch %d is older than current epoch %d", journal.ErrFenced, pid, epoch, id.epoch)
	}
	highest := int64(len(id.events))
	if expectedSeq != journal.AnySeq && expectedSeq != highest {
		return 0, fmt.Errorf("%w: pid %q: expected seq %d, highest is %d", journal.ErrSeqConflict, pid, expectedSeq, highest)
	}
	written := j.now()
	for _, d := range data {
		j.global++
		id.events = append(id.events, journal.Event{PersistenceID: pid, Seq: int64(len(id.events)) + 1, Global: j.global,
			Epoch: epoch, Written: written, Data: append([]byte{}, d...)})
	}
	return int64(len(id.events)), nil
}

// Replay implements journal.Journal.
func (j *Journal) Replay(ctx context.Context, pid string, from int64, max int) ([]journal.Event, error) {
	if err := journal.ValidatePID(pid); err != nil {
		return nil, err
	}
	if max < 0 {
		return nil, fmt.Errorf("%w: negative max %d", journal.ErrInvalid, max)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	from = min(max64(from, 1), int64(len(j.id(pid).events))+1)
	evs := j.id(pid).events[from-1:]
	if max > 0 && len(evs) > max {
		evs = evs[:max]
	}
	out := make([]journal.Event, len(evs))
	for i, e := range evs {
		e.Data = append([]byte{}, e.Data...)
		out[i] = e
	}
	return out, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// Fence implements journal.Journal.
func (j *Journal) Fence(ctx context.Context, pid string) (uint64, int64, error) {
	if err := journal.ValidatePID(pid); err != nil {
		return 0, 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	id := j.id(pid)
	id.epoch++
	return id.epoch, int64(len(id.events)), nil
}

// Highest implements journal.Journal.
func (j *Journal) Highest(ctx context.Context, pid string) (int64, error) {
	if err := journal.ValidatePID(pid); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return int64(len(j.id(pid).events)), nil
}

// Package entities holds the entity types the node protocol offers to test
// workloads: a register (read, write, compare-and-set) and an append-only
// log. Both are persistent: every change is an event appended to the journal
// (persistence id "entity/<type>/<id>") before the reply, and a starting
// incarnation fences the id and replays its events before it handles its
// first message. Two incarnations of one entity can therefore never both
// persist: the older one's next append is refused, and it stops.
package entities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/protocol"
)

// Errors an entity returns. Rejections carry codes of shardtest/1
// (protocol.Code): the node that took the request answers with them as
// they are.
var (
	// ErrBadRequest: unknown op or malformed payload; nothing happened.
	ErrBadRequest = sharding.Reject(protocol.CodeBadRequest, errors.New("entity: bad request"))
	// ErrStale: a newer incarnation holds the entity; this one wrote
	// nothing and must stop (it wraps sharding.ErrEntityFailed).
	ErrStale = sharding.Reject(protocol.CodeEntityStale, fmt.Errorf("entity: stale incarnation: %w", sharding.ErrEntityFailed))
	// ErrUnknown: the journal did not answer; the change may or may not
	// have been persisted.
	ErrUnknown = errors.New("entity: outcome unknown (journal did not answer)")
)

// IsDefinite reports whether an entity error certainly had no effect.
func IsDefinite(err error) bool {
	return errors.Is(err, ErrBadRequest) || errors.Is(err, ErrStale) || errors.Is(err, ErrUnknownBeforeWrite)
}

// Options switch deliberate bugs on; the zero value is correct.
type Options struct {
	// SkipReplay is a DELIBERATE BUG: a starting incarnation does not
	// replay its events, so it serves stale (empty) state — the checkers'
	// linearizability test must catch it. It still fences, so its writes
	// land after the old ones.
	SkipReplay bool
}

// journaled is the persistence both entity types share: a fenced writer
// on one persistence id.
type journaled struct {
	j     journal.Journal
	clock clock.Clock
	pid   string
	epoch uint64
	seq   int64
	// resync: the last append's outcome is unknown; re-read before the
	// next write (under our epoch nobody else can have written).
	resync bool
}

// applier applies one replayed event's data to an entity's state. It is
// handed to each call that replays rather than kept in journaled: a
// func field and the closure it holds cost an idle entity 24 bytes.
type applier func(data []byte) error

// newJournaled is the journal of the entity ec of type typ.
func newJournaled(ec sharding.EntityContext, typ string) journaled {
	c := ec.Clock
	if c == nil {
		c = clock.Real()
	}
	return journaled{j: ec.Journal, clock: c, pid: pid(typ, ec)}
}

func (p *journaled) recover(ctx context.Context, opts Options, apply applier) error {
	epoch, highest, err := p.j.Fence(ctx, p.pid)
	if err != nil {
		return fmt.Errorf("fence %s: %w", p.pid, err)
	}
	p.epoch = epoch
	if opts.SkipReplay {
		p.seq = highest
		return nil
	}
	return p.replayFrom(ctx, 1, apply)
}

func (p *journaled) replayFrom(ctx context.Context, from int64, apply applier) error {
	evs, err := p.j.Replay(ctx, p.pid, from, 0)
	if err != nil {
		return fmt.Errorf("replay %s: %w", p.pid, err)
	}
	for _, e := range evs {
		if e.Seq != p.seq+1 {
			return fmt.Errorf("replay %s: gap at seq %d after %d", p.pid, e.Seq, p.seq)
		}
		if err := apply(e.Data); err != nil {
			return fmt.Errorf("replay %s seq %d: %w", p.pid, e.Seq, err)
		}
		p.seq = e.Seq
	}
	return nil
}

// sync brings the state up to date after an append whose outcome was
// unknown: every op, reads included, must see that write if it happened.
func (p *journaled) sync(ctx context.Context, apply applier) error {
	if !p.resync {
		return nil
	}
	if err := p.replayFrom(ctx, p.seq+1, apply); err != nil {
		return fmt.Errorf("%w: %v", ErrUnknownBeforeWrite, err)
	}
	p.resync = false
	return nil
}

// persist appends one event; the caller applies it only on success. The
// caller has synced first.
//
// When the journal does not answer, the append's outcome is unknown, and
// persist spends what is left of ctx settling it rather than giving up:
// it repeats the very same append, under the same expected sequence number
// and epoch. The expected sequence number makes that safe: exactly one
// event can ever be stored after it, so either the repeat stores ours (and
// the first attempt, if it is still on its way, will be refused), or the
// slot is taken and one replayed event tells whose it is. Only when ctx
// runs out first is the outcome reported unknown.
func (p *journaled) persist(ctx context.Context, event any) error {
	data, err := json.Marshal(event)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	last, err := p.j.Append(ctx, p.pid, p.seq, p.epoch, [][]byte{data})
	if err != nil && !journal.IsDefinite(err) {
		last, err = p.settle(ctx, data, err)
	}
	switch {
	case err == nil:
		p.seq = last
		return nil
	case errors.Is(err, journal.ErrFenced), errors.Is(err, journal.ErrSeqConflict):
		return ErrStale
	case journal.IsDefinite(err):
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	default:
		p.resync = true
		return fmt.Errorf("%w: %v", ErrUnknown, err)
	}
}

// Settling an unknown append: the pause between attempts (doubling up to
// the maximum), and how long to keep trying when the caller set no
// deadline.
const (
	settlePause    = 100 * time.Millisecond
	settleMaxPause = time.Second
	settleNoLimit  = 30 * time.Second
)

// settle decides the outcome of an append of data after p.seq that ended
// with the unknown error first. It returns the new highest sequence number
// if the event is stored, a definite error if it never will be, or an
// unknown error if ctx ran out before the journal answered.
func (p *journaled) settle(ctx context.Context, data []byte, first error) (int64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = clock.WithTimeout(ctx, p.clock, settleNoLimit)
		defer cancel()
	}
	err, pause := first, settlePause
	for {
		t := p.clock.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, err
		case <-t.C():
		}
		pause = min(2*pause, settleMaxPause)
		var last int64
		last, err = p.j.Append(ctx, p.pid, p.seq, p.epoch, [][]byte{data})
		switch {
		case err == nil:
			return last, nil
		case errors.Is(err, journal.ErrFenced), errors.Is(err, journal.ErrSeqConflict):
			// The slot after p.seq is taken, or a newer incarnation
			// fenced the id (so nothing of ours can land any more):
			// either way the event there, if any, is final.
			evs, rerr := p.j.Replay(ctx, p.pid, p.seq+1, 1)
			if rerr != nil {
				err = rerr
				continue
			}
			if len(evs) == 1 && evs[0].Seq == p.seq+1 && evs[0].Epoch == p.epoch && bytes.Equal(evs[0].Data, data) {
				return evs[0].Seq, nil // the first attempt was stored
			}
			return 0, err
		case journal.IsDefinite(err):
			return 0, err
		}
	}
}

// ErrUnknownBeforeWrite: the journal could not be read before an op, so
// the op did nothing: a definite failure.
var ErrUnknownBeforeWrite = sharding.Reject(protocol.CodeJournalUnavailable, errors.New("entity: journal unavailable; nothing done"))

// parsed turns the kit's refusal of an op or payload (kit.ParseRegister,
// ParseLog, ParseSender: the protocol's one reading of them) into
// ErrBadRequest.
func parsed(err error) error {
	if err == nil {
		return nil
	}
	var ke *kit.Error
	if errors.As(err, &ke) {
		return fmt.Errorf("%w: %s", ErrBadRequest, ke.Message)
	}
	return fmt.Errorf("%w: %v", ErrBadRequest, err)
}

func pid(typ string, ec sharding.EntityContext) string { return "entity/" + typ + "/" + ec.EntityID }

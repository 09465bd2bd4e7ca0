package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol/journal"
)

// OpNextID is the ID generator's only operation. Its reply is IDReply.
const OpNextID = "next-id"

// IDReply is the ID generator's answer to OpNextID.
type IDReply struct {
	ID int64 `json:"id"`
}

// IDGeneratorOptions switch deliberate bugs on; the zero value is correct.
type IDGeneratorOptions struct {
	// NoFencing is a DELIBERATE BUG for proving that checkers catch
	// duplicate ids: the instance does not fence the journal, appends with
	// NoEpoch after whatever is there (AnySeq), and hands out ids from an
	// in-memory counter read once at start instead of the journal's
	// sequence number. Two instances alive at once then hand out the same
	// ids.
	NoFencing bool
}

// IDGenerator is the factory of the ID generator singleton (Akka's
// IdProvider): ids are the sequence numbers of its events in journal j under
// persistence id pid, so an id is persisted before it is handed out and is
// never handed out twice, across hand-overs and failovers. On start the
// instance fences pid: a stale instance still running elsewhere can no
// longer append and fails (ErrInstanceFailed) instead of handing out ids.
func IDGenerator(j journal.Journal, pid string) Factory {
	return IDGeneratorWith(j, pid, IDGeneratorOptions{})
}

// IDGeneratorWith is IDGenerator with options.
func IDGeneratorWith(j journal.Journal, pid string, opts IDGeneratorOptions) Factory {
	return func(ctx context.Context) (Instance, error) {
		g := &idGen{j: j, pid: pid, opts: opts}
		if opts.NoFencing {
			h, err := j.Highest(ctx, pid)
			if err != nil {
				return nil, fmt.Errorf("id generator %s: read highest: %w", pid, err)
			}
			g.current = h
			return g, nil
		}
		epoch, h, err := j.Fence(ctx, pid)
		if err != nil {
			return nil, fmt.Errorf("id generator %s: fence: %w", pid, err)
		}
		g.epoch, g.current = epoch, h
		return g, nil
	}
}

type idGen struct {
	j    journal.Journal
	pid  string
	opts IDGeneratorOptions

	epoch   uint64
	current int64
	// reread: the outcome of the last append is unknown; read the highest
	// sequence number before appending again (the epoch keeps others out,
	// so what is there is this instance's).
	reread bool
}

// idEvent is the event an id allocation stores.
type idEvent struct {
	Type string `json:"type"`
	ID   int64  `json:"id"`
}

func (g *idGen) Handle(ctx context.Context, req Request) (json.RawMessage, error) {
	if req.Op != OpNextID {
		return nil, fmt.Errorf("%w: id generator: unknown op %q (want %q)", ErrBadRequest, req.Op, OpNextID)
	}
	if g.opts.NoFencing {
		return g.nextUnfenced(ctx)
	}
	if g.reread {
		h, err := g.j.Highest(ctx, g.pid)
		if err != nil {
			// Nothing was written by this request.
			return nil, fmt.Errorf("%w: id generator: re-read after an unknown outcome: %w", ErrUnavailable, err)
		}
		g.current, g.reread = h, false
	}
	data, err := json.Marshal(idEvent{Type: "id-generated", ID: g.current + 1})
	if err != nil {
		return nil, fmt.Errorf("%w: encode event: %w", ErrInstanceFailed, err)
	}
	last, err := g.j.Append(ctx, g.pid, g.current, g.epoch, [][]byte{data})
	switch {
	case err == nil:
	case errors.Is(err, journal.ErrFenced), errors.Is(err, journal.ErrSeqConflict):
		return nil, fmt.Errorf("%w: id generator %s (epoch %d) is stale: %w", ErrInstanceFailed, g.pid, g.epoch, err)
	case journal.IsDefinite(err):
		return nil, fmt.Errorf("id generator %s: append: %w", g.pid, err)
	default:
		g.reread = true
		return nil, fmt.Errorf("%w: id generator %s: append: %w", ErrUnknownOutcome, g.pid, err)
	}
	g.current = last
	return json.Marshal(IDReply{ID: last})
}

// nextUnfenced is the NoFencing bug: the id comes from memory.
func (g *idGen) nextUnfenced(ctx context.Context) (json.RawMessage, error) {
	id := g.current + 1
	data, err := json.Marshal(idEvent{Type: "id-generated", ID: id})
	if err != nil {
		return nil, fmt.Errorf("%w: encode event: %w", ErrInstanceFailed, err)
	}
	if _, err := g.j.Append(ctx, g.pid, journal.AnySeq, journal.NoEpoch, [][]byte{data}); err != nil {
		if journal.IsDefinite(err) {
			return nil, fmt.Errorf("id generator %s: append: %w", g.pid, err)
		}
		return nil, fmt.Errorf("%w: id generator %s: append: %w", ErrUnknownOutcome, g.pid, err)
	}
	g.current = id
	return json.Marshal(IDReply{ID: id})
}

func (g *idGen) Stop(context.Context) error { return nil }

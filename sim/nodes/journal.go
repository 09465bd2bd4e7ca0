package nodes

import (
	"context"
	"fmt"

	"github.com/shardtest/shardtest/protocol/journal"
)

// nodeJournal is the journal as one node reaches it: the cluster's, or an
// unavailable one while the node is cut off from it (a journal cut). A
// call is answered at once: the simulation does not model the journal's
// latency. A cut fails before anything is written, but says so as the
// real client does (unavailable: the outcome of an append unknown), so the
// writer re-reads before it writes again.
type nodeJournal struct {
	c    *Cluster
	node string
}

func (j nodeJournal) cut() error {
	if !j.c.journalReachable(j.node) {
		return fmt.Errorf("%w: %s does not reach the journal", journal.ErrUnavailable, j.node)
	}
	return nil
}

func (j nodeJournal) Append(ctx context.Context, pid string, expectedSeq int64, epoch uint64, data [][]byte) (int64, error) {
	if err := j.cut(); err != nil {
		return 0, err
	}
	return j.c.cfg.Journal.Append(ctx, pid, expectedSeq, epoch, data)
}

func (j nodeJournal) Replay(ctx context.Context, pid string, from int64, max int) ([]journal.Event, error) {
	if err := j.cut(); err != nil {
		return nil, err
	}
	return j.c.cfg.Journal.Replay(ctx, pid, from, max)
}

func (j nodeJournal) Fence(ctx context.Context, pid string) (uint64, int64, error) {
	if err := j.cut(); err != nil {
		return 0, 0, err
	}
	return j.c.cfg.Journal.Fence(ctx, pid)
}

func (j nodeJournal) Highest(ctx context.Context, pid string) (int64, error) {
	if err := j.cut(); err != nil {
		return 0, err
	}
	return j.c.cfg.Journal.Highest(ctx, pid)
}

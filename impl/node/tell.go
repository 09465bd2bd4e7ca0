package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/shardtest/shardtest/impl/sharding"
)

// tellLimit bounds the fire-and-forget messages queued per sender.
const tellLimit = 1000

// errTellQueueFull: the sender's queue of fire-and-forget messages is full.
var errTellQueueFull = errors.New("fire-and-forget queue of this sender is full")

// tells delivers fire-and-forget messages: one FIFO queue per sender,
// drained by one goroutine at a time, so one sender's tells reach an entity
// in the order they were accepted (at most once: a tell that fails is not
// retried). Tells are pipelined: the next one is submitted as soon as the
// previous one is queued at its shard, not when it has been processed. The goroutines are owned by the incarnation's context.
type tells struct {
	ctx     context.Context
	timeout time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	queues  map[string][]tellItem
	wg      sync.WaitGroup
	failed  uint64
	dropped uint64
}

type tellItem struct {
	region *sharding.Region
	msg    sharding.Message
}

func newTells(ctx context.Context, timeout time.Duration, log *slog.Logger) *tells {
	return &tells{ctx: ctx, timeout: timeout, log: log, queues: map[string][]tellItem{}}
}

// enqueue accepts a tell, or refuses it (definitely) when the sender's
// queue is full or the incarnation is stopping.
func (t *tells) enqueue(region *sharding.Region, msg sharding.Message) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return sharding.ErrRegionStopped
	}
	q, running := t.queues[msg.Sender]
	if len(q) >= tellLimit {
		t.dropped++
		return errTellQueueFull
	}
	t.queues[msg.Sender] = append(q, tellItem{region, msg})
	if !running {
		t.wg.Add(1)
		go t.drain(msg.Sender)
	}
	return nil
}

// drain delivers the sender's queue in order until it is empty.
func (t *tells) drain(sender string) {
	defer t.wg.Done()
	for {
		t.mu.Lock()
		q := t.queues[sender]
		if len(q) == 0 || t.ctx.Err() != nil {
			t.dropped += uint64(len(q))
			delete(t.queues, sender)
			t.mu.Unlock()
			return
		}
		item := q[0]
		t.queues[sender] = q[1:]
		t.mu.Unlock()
		// Submit returns once the message's place in its shard's order is
		// fixed, so the next tell of this sender may follow at once (several
		// can wait in one mailbox or region buffer, as with Akka's tell);
		// the reply is awaited apart.
		ctx, cancel := context.WithTimeout(t.ctx, t.timeout)
		wait := item.region.Submit(ctx, item.msg)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer cancel()
			if _, err := wait(); err != nil {
				t.mu.Lock()
				t.failed++
				t.mu.Unlock()
				t.log.Debug("fire-and-forget message not delivered", "entity", item.msg.EntityID, "err", err)
			}
		}()
	}
}

// wait returns once every drain has stopped (after the context ended).
func (t *tells) wait() { t.wg.Wait() }

// TellStatus counts fire-and-forget messages that were not delivered.
type TellStatus struct {
	Queued  int    `json:"queued"`
	Failed  uint64 `json:"failed"`
	Dropped uint64 `json:"dropped"`
}

func (t *tells) status() TellStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := TellStatus{Failed: t.failed, Dropped: t.dropped}
	for _, q := range t.queues {
		st.Queued += len(q)
	}
	return st
}

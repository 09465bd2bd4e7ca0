package sharding

import (
	"context"
	"fmt"
	"sync/atomic"
)

// Envelope states. An envelope waits in a buffer or mailbox (queued) until
// someone takes it to deliver it (taken); its caller may give up on it only
// while it is queued (abandoned). These transitions are atomic so that a
// message is either certainly never sent (definite failure) or was taken,
// in which case the taker always answers.
const (
	envQueued int32 = iota
	envTaken
	envAbandoned
)

type result struct {
	reply Reply
	err   error
}

// envelope carries one Deliver call through buffers and mailboxes.
type envelope struct {
	ctx   context.Context
	msg   Message
	shard string
	state atomic.Int32
	reply chan result // buffered 1; written once
	// id names the envelope to the region's routing machine; owner (if
	// set) is told when its caller gave up while it was queued, so that it
	// leaves the region's buffer at once.
	id    uint64
	owner interface{ abandon(*envelope) }
}

// rmsg is the envelope as the routing machine sees it.
func (e *envelope) rmsg() RegionMsg {
	return RegionMsg{ID: e.id, Shard: e.shard, Entity: e.msg.EntityID}
}

func newEnvelope(ctx context.Context, msg Message, shard string) *envelope {
	return &envelope{ctx: ctx, msg: msg, shard: shard, reply: make(chan result, 1)}
}

// take claims a queued envelope for delivery; false if its caller gave up.
func (e *envelope) take() bool { return e.state.CompareAndSwap(envQueued, envTaken) }

// finish answers a taken envelope.
func (e *envelope) finish(r Reply, err error) { e.reply <- result{reply: r, err: err} }

// requeue gives a taken envelope back (it was not delivered after all). If
// the caller's context has ended meanwhile, the envelope is answered with
// ErrNotDelivered instead and requeue returns false.
func (e *envelope) requeue() bool {
	e.state.CompareAndSwap(envTaken, envQueued)
	if err := e.ctx.Err(); err != nil {
		e.fail(fmt.Errorf("%w: deadline passed while buffered: %w", ErrNotDelivered, err))
		return false
	}
	return true
}

// fail answers a queued envelope with a definite error (never sent);
// nothing happens if it was taken or abandoned.
func (e *envelope) fail(err error) bool {
	if e.state.CompareAndSwap(envQueued, envAbandoned) {
		e.reply <- result{err: err}
		return true
	}
	return false
}

// abandoned reports whether the envelope no longer needs delivering.
func (e *envelope) abandoned() bool { return e.state.Load() == envAbandoned }

// waitServing is wait for the caller that enqueued e itself: if its
// entity was parked, the caller carries out its own message (serve, not
// nil) before it waits.
func (e *envelope) waitServing(serve entityWork, ok bool) func() (Reply, error) {
	if !ok {
		return e.wait
	}
	return func() (Reply, error) {
		serve.serveInline()
		return e.wait()
	}
}

// wait blocks until the envelope is answered. If the caller's context ends
// while it is still queued, it is abandoned: never sent, a definite error.
func (e *envelope) wait() (Reply, error) {
	select {
	case r := <-e.reply:
		return r.reply, r.err
	case <-e.ctx.Done():
		if e.state.CompareAndSwap(envQueued, envAbandoned) {
			if e.owner != nil {
				e.owner.abandon(e)
			}
			return Reply{}, fmt.Errorf("%w: deadline passed while buffered: %w", ErrNotDelivered, e.ctx.Err())
		}
		// Taken: whoever holds it answers soon (it uses e.ctx).
		r := <-e.reply
		return r.reply, r.err
	}
}

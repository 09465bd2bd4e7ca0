package sharding

import (
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"sync"
)

// shard is a shard hosted by this region: its entities by id. It exists
// only because the coordinator told the region to host it (host-shard),
// and it is removed only after all its entities have stopped (hand-off),
// which is what lets the coordinator guarantee that an entity never runs
// in two places: the new home is allocated after the old one answered.
//
// Lock order: Region.mu before shard.mu; shard code never calls back into
// the region while holding shard.mu.
type shard struct {
	r  *Region
	id string

	mu       sync.Mutex
	entities map[string]*entity
	// held are messages for entities that are passivating: they go to the
	// next incarnation once the current one has stopped.
	held map[string][]*envelope
	// closed: a hand-off has begun; new deliveries buffer at the region
	// level. A host-shard for the shard reopens it (an aborted hand-off).
	closed bool
	// stopping: final; the shard is being removed.
	stopping bool
	alive    sync.WaitGroup // running entities

	handOffOnce sync.Once
	gone        chan struct{} // closed once every entity stopped (or was given up)
}

func newShard(r *Region, id string) *shard {
	return &shard{r: r, id: id, entities: map[string]*entity{}, held: map[string][]*envelope{}, gone: make(chan struct{})}
}

func (sh *shard) event(typ, detail string) {
	sh.r.d.Events.Append(protocol.Event{Type: typ, Member: sh.r.self, EntityType: sh.r.s.TypeName, Shard: sh.id, Detail: detail})
}

// enqueue gives a queued envelope to its entity's mailbox, starting the
// entity on its first message. It fails with ErrShardNotHere if the shard
// no longer accepts deliveries; the envelope is then untouched.
//
// byCaller is set by the goroutine that will wait for env's reply (not by
// one that passes on another caller's message): if the entity is parked,
// serve is returned, and that goroutine must call serve.serveFor(env)
// before it waits (entity.push).
func (sh *shard) enqueue(env *envelope, byCaller bool) (serve *entity, err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.closed || sh.stopping {
		return nil, fmt.Errorf("%w: shard %s is being handed off", ErrShardNotHere, sh.id)
	}
	id := env.msg.EntityID
	e := sh.entities[id]
	if e != nil && e.passivating {
		sh.held[id] = append(sh.held[id], env)
		return nil, nil
	}
	if e == nil {
		e = sh.startLocked(id)
	}
	ok, serveHere := e.push(env, byCaller)
	if !ok {
		env.fail(fmt.Errorf("%w: %s failed to start", ErrEntityUnavailable, id))
	}
	if serveHere {
		return e, nil
	}
	return nil, nil
}

func (sh *shard) startLocked(id string) *entity {
	e := newEntity(sh, id, sh.r.nextIncarnation())
	sh.entities[id] = e
	sh.alive.Add(1)
	go e.run()
	return e
}

// passivate is EntityContext.Passivate: the current incarnation stops
// after what is already in its mailbox; messages arriving meanwhile wait
// in held for the next incarnation.
func (sh *shard) passivate(e *entity) {
	sh.mu.Lock()
	if sh.entities[e.id] != e || e.passivating {
		sh.mu.Unlock()
		return
	}
	e.passivating = true
	sh.mu.Unlock()
	e.event(protocol.EventEntityPassivated, "")
	e.requestStop()
}

// retire stops a failed incarnation at once (after the message it just
// handled): messages still in its mailbox move, in order, ahead of those
// held for the next incarnation, which the next message (or entityDone,
// if some are held) starts.
func (sh *shard) retire(e *entity) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.mu.Lock()
	pending := e.queue
	e.queue = nil
	e.stopReq = true
	e.mu.Unlock()
	e.passivating = true // the entity is current: it leaves the map only in entityDone
	sh.held[e.id] = append(pending, sh.held[e.id]...)
}

// entityDone is called by an entity's goroutine once it has stopped.
func (sh *shard) entityDone(e *entity) {
	sh.mu.Lock()
	if sh.entities[e.id] == e {
		delete(sh.entities, e.id)
	}
	held := sh.held[e.id]
	delete(sh.held, e.id)
	if sh.r.s.Bugs.DropPassivationBuffer {
		// Deliberate bug: what was held for the next incarnation is
		// forgotten; the callers wait for their deadline.
		held = nil
	}
	var back []*envelope
	if len(held) > 0 {
		if sh.closed || sh.stopping {
			back = held
		} else {
			ne := sh.startLocked(e.id)
			for _, env := range held {
				if ok, _ := ne.push(env, false); !ok {
					env.fail(fmt.Errorf("%w: %s failed to start", ErrEntityUnavailable, e.id))
				}
			}
		}
	}
	sh.mu.Unlock()
	if len(back) > 0 {
		// Held messages never reached an entity: they follow the shard to
		// its next home through the region's buffer.
		sh.r.rebuffer(sh.id, back)
	}
	sh.alive.Done()
}

// close stops new deliveries (begin-hand-off).
func (sh *shard) close() {
	sh.mu.Lock()
	sh.closed = true
	sh.mu.Unlock()
}

// reopen undoes close if the shard is not being removed; false if it is.
func (sh *shard) reopen() bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.stopping {
		return false
	}
	sh.closed = false
	return true
}

// handOff stops every entity after the messages already in its mailbox
// and returns once all have stopped — or, after HandOffTimeout, gives up
// on the stragglers (their contexts are cancelled and queued messages
// fail). Concurrent and repeated calls wait for the same hand-off.
func (sh *shard) handOff() (forced int) {
	sh.handOffOnce.Do(func() {
		sh.mu.Lock()
		sh.closed, sh.stopping = true, true
		ents := make([]*entity, 0, len(sh.entities))
		for _, e := range sh.entities {
			ents = append(ents, e)
		}
		sh.mu.Unlock()
		for _, e := range ents {
			e.requestStop()
		}
		forced = sh.await(ents, fmt.Errorf("%w: shard %s hand-off timed out before the message's turn", ErrNotDelivered, sh.id))
		close(sh.gone)
	})
	<-sh.gone
	return forced
}

// stopNow stops every entity at once (region stopped, node downed):
// queued and held messages fail definitely, Stop runs after the message
// being handled.
func (sh *shard) stopNow() {
	sh.handOffOnce.Do(func() {
		sh.mu.Lock()
		sh.closed, sh.stopping = true, true
		ents := make([]*entity, 0, len(sh.entities))
		for _, e := range sh.entities {
			ents = append(ents, e)
		}
		held := sh.held
		sh.held = map[string][]*envelope{}
		sh.mu.Unlock()
		for _, envs := range held {
			for _, env := range envs {
				env.fail(fmt.Errorf("%w: region stopped", ErrRegionStopped))
			}
		}
		for _, e := range ents {
			e.stopNow(fmt.Errorf("%w: region stopped before the message's turn", ErrRegionStopped))
		}
		sh.await(ents, ErrRegionStopped)
		close(sh.gone)
	})
	<-sh.gone
}

// await waits for ents to stop, at most HandOffTimeout; it gives up on the
// rest and returns how many.
func (sh *shard) await(ents []*entity, why error) int {
	t := sh.r.d.Clock.NewTimer(sh.r.s.HandOffTimeout)
	defer t.Stop()
	for i, e := range ents {
		select {
		case <-e.done:
		case <-t.C():
			n := 0
			for _, rest := range ents[i:] {
				select {
				case <-rest.done:
				default:
					n++
					rest.stopNow(why)
					rest.cancel()
				}
			}
			sh.r.log.Warn("entities did not stop within the hand-off timeout; given up", "shard", sh.id, "count", n)
			return n
		}
	}
	return 0
}

// entityStatus lists the current entities.
func (sh *shard) status() protocol.ShardStatus {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	st := protocol.ShardStatus{ID: sh.id, HandingOff: sh.closed || sh.stopping, Entities: []protocol.EntityStatus{}}
	for id, e := range sh.entities {
		st.Entities = append(st.Entities, protocol.EntityStatus{ID: id, Incarnation: e.inc, Passivating: e.passivating})
	}
	return st
}

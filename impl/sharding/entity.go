package sharding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"sync"
	"sync/atomic"
	"time"
)

// entity runs one incarnation of an entity behind a mailbox: messages are
// handled one at a time in the order they were pushed, and Stop comes after
// the messages queued before the stop was requested (like a PoisonPill), so
// that passivation and hand-off lose nothing already accepted.
type entity struct {
	sh  *shard
	id  string
	inc string

	// ctx is the incarnation's lifetime: given to the factory and Stop,
	// cancelled when the shard stops waiting for it (forced hand-off).
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	queue   []*envelope
	stopReq bool
	// running: someone holds the entity's turn to run and serves the
	// mailbox now — a goroutine of its own, or a caller in serveFor. An
	// idle entity has none (it is parked), so it costs no goroutine stack;
	// push and the stop requests start one again.
	running bool
	inst    Entity // set once started; used only by whoever holds the turn to run (running)

	// passivating is guarded by the shard's mutex: once set, the shard
	// holds new messages for this id until this incarnation has stopped.
	passivating bool
	// lastActive is the clock's Elapsed reading at the last message pushed
	// or handled, for idle passivation (a bump must not passivate everyone).
	lastActive atomic.Int64
	started    atomic.Bool

	done chan struct{}
}

func newEntity(sh *shard, id, inc string) *entity {
	e := &entity{sh: sh, id: id, inc: inc, running: true, done: make(chan struct{})}
	e.ctx, e.cancel = context.WithCancel(context.WithoutCancel(sh.r.ctx))
	e.touch()
	return e
}

func (e *entity) touch() { e.lastActive.Store(int64(e.sh.r.d.Clock.Elapsed())) }

func (e *entity) idleFor(now time.Duration) time.Duration {
	return now - time.Duration(e.lastActive.Load())
}

// resumeLocked starts a serving goroutine if the entity is parked; the
// caller holds e.mu.
func (e *entity) resumeLocked() {
	if !e.running {
		e.running = true
		go e.serve()
	}
}

// push appends env to the mailbox; ok is false if the entity no longer
// accepts messages (it stopped on its own after a failed start).
//
// byCaller is set by the goroutine that will wait for env's reply. If the
// entity is parked, that goroutine takes the entity's turn to run instead
// of a new goroutine (serveHere: it must call serveFor(env) before it
// waits): a message to an idle entity, the common case, then costs no
// goroutine start and no hand-off to it and back.
func (e *entity) push(env *envelope, byCaller bool) (ok, serveHere bool) {
	e.mu.Lock()
	if e.stopReq {
		e.mu.Unlock()
		return false, false
	}
	e.queue = append(e.queue, env)
	if byCaller && !e.running {
		e.running = true
		serveHere = true
	} else {
		e.resumeLocked()
	}
	e.mu.Unlock()
	e.touch()
	return true, serveHere
}

// requestStop enqueues the termination: Stop runs after the messages
// already queued.
func (e *entity) requestStop() {
	e.mu.Lock()
	e.stopReq = true
	e.resumeLocked()
	e.mu.Unlock()
}

// stopNow terminates without handling what is queued; queued messages fail
// definitely with why (they never reached the entity).
func (e *entity) stopNow(why error) {
	e.mu.Lock()
	e.stopReq = true
	pending := e.queue
	e.queue = nil
	e.resumeLocked()
	e.mu.Unlock()
	for _, env := range pending {
		if env.take() {
			env.finish(Reply{}, why)
		}
	}
}

// next returns the next message, or nil with stop set when the entity is
// to stop, or nil without stop when the mailbox is empty — then the entity
// has parked and the caller's goroutine must end.
func (e *entity) next() (env *envelope, stop bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.queue) > 0 {
		env := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		if len(e.queue) == 0 {
			e.queue = nil // let an idle entity hold no backing array
		}
		return env, false
	}
	if e.stopReq {
		return nil, true
	}
	e.running = false
	return nil, false
}

func (e *entity) event(typ, detail string) {
	r := e.sh.r
	r.d.Events.Append(protocol.Event{Type: typ, Member: r.self, EntityType: r.s.TypeName, Shard: e.sh.id,
		Entity: e.id, EntityIncarnation: e.inc, Detail: detail})
}

// run starts the entity and serves its mailbox; the first goroutine of an
// incarnation.
func (e *entity) run() {
	r := e.sh.r
	ec := EntityContext{
		TypeName: r.s.TypeName, EntityID: e.id, ShardID: e.sh.id, Incarnation: e.inc, Node: r.self,
		Clock: r.d.Clock, Journal: r.d.Journal, Logger: r.log,
		Passivate: func() { e.sh.passivate(e) },
	}
	inst, err := e.start(ec)
	if err != nil {
		r.log.Warn("entity failed to start", "entity", e.id, "err", err)
		e.stopNow(fmt.Errorf("%w: %s: %w", ErrEntityUnavailable, e.id, err))
		e.finish()
		return
	}
	e.inst = inst
	e.started.Store(true)
	e.event(protocol.EventEntityStarted, "")
	e.serve()
}

// serve handles queued messages until the mailbox is empty (the entity
// parks and the goroutine ends) or the entity is to stop (it stops).
func (e *entity) serve() {
	for {
		env, stop := e.next()
		if stop {
			break
		}
		if env == nil {
			return // parked
		}
		e.serveOne(env)
	}
	detail := ""
	if serr := e.stop(e.inst); serr != nil {
		detail = "stopped with error: " + serr.Error()
	}
	e.event(protocol.EventEntityStopped, detail)
	e.finish()
}

// serveFor serves the mailbox on the calling goroutine, which pushed own
// and took the parked entity's turn to run (push's serveHere), until own
// has been handled — or has left the mailbox another way (the entity was
// stopped or retired; whoever did that answers own or passes it on). Then
// it gives the turn back: the entity parks if nothing else is queued, and
// otherwise a goroutine of its own serves the rest (and any stop), so the
// caller never works for other callers after its own message.
func (e *entity) serveFor(own *envelope) {
	for {
		env, stop := e.next()
		if stop {
			go e.serve() // finds the stop at once and runs it
			return
		}
		if env == nil {
			return // parked: own is no longer queued here
		}
		if env == own && own.ctx.Err() != nil {
			// As wait does for a message its caller gave up on while it
			// was queued: never handled, a definite failure.
			own.fail(fmt.Errorf("%w: deadline passed while queued: %w", ErrNotDelivered, own.ctx.Err()))
		} else {
			e.serveOne(env)
		}
		if env == own {
			break
		}
	}
	e.mu.Lock()
	if len(e.queue) == 0 && !e.stopReq {
		e.running = false
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	go e.serve()
}

// serveOne handles one message taken from the mailbox, by whoever holds
// the entity's turn to run.
func (e *entity) serveOne(env *envelope) {
	if !env.take() {
		return
	}
	r := e.sh.r
	res, herr := e.handle(e.inst, env)
	e.touch()
	if herr != nil {
		env.finish(Reply{}, &EntityError{Entity: e.id, Err: herr})
		if errors.Is(herr, ErrEntityFailed) {
			// Stale or broken: stop this incarnation; what is still in
			// its mailbox goes to the next one.
			r.log.Warn("entity failed; stopping this incarnation", "entity", e.id, "incarnation", e.inc, "err", herr)
			e.sh.retire(e)
		}
		return
	}
	if len(res) == 0 {
		res = json.RawMessage("null")
	}
	env.finish(Reply{Payload: res, Node: r.self, Shard: e.sh.id, EntityIncarnation: e.inc}, nil)
}

// finish ends the incarnation: its context, its done channel, and the
// shard's bookkeeping.
func (e *entity) finish() {
	e.cancel()
	close(e.done)
	e.sh.entityDone(e)
}

func (e *entity) start(ec EntityContext) (inst Entity, err error) {
	defer func() {
		if p := recover(); p != nil {
			inst, err = nil, fmt.Errorf("panic in entity factory: %v", p)
		}
	}()
	inst, err = e.sh.r.d.Factory(e.ctx, ec)
	if err == nil && inst == nil {
		err = fmt.Errorf("entity factory returned no entity")
	}
	return inst, err
}

func (e *entity) handle(inst Entity, env *envelope) (res json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("panic in Handle: %v", p)
		}
	}()
	return inst.Handle(env.ctx, env.msg)
}

func (e *entity) stop(inst Entity) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in Stop: %v", p)
		}
	}()
	return inst.Stop(e.ctx)
}

package sharding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/shardtest/shardtest/protocol"
)

// shard drives the entity runner (ShardState) of a shard hosted by this
// region: it starts incarnations, runs Handle and Stop, answers callers
// and steps the outcomes back. The machine is guarded by the region's
// mutex; the entities' own code (factory, Handle, Stop) runs outside it.
//
// A shard exists only because the coordinator told the region to host it
// (host-shard), and it is removed only after all its entities have
// stopped (hand-off), which is what lets the coordinator guarantee that an
// entity never runs in two places: the new home is allocated after the old
// one answered.
type shard struct {
	r  *Region
	id string
	st *ShardState // guarded by r.mu

	gone   chan struct{} // closed once the shard's end is complete
	forced int           // entities given up at the end (set before gone closes)
}

// entityRun is the driver's part of an incarnation.
//
// It holds no context while the entity idles: the factory and Stop each
// get one of their own, which ends when they return or when the shard
// stops waiting for the incarnation (forced hand-off). A context kept for
// the incarnation's lifetime cost an idle entity about 460 of its 853
// bytes on a node with a remote journal: each timeout the journal client
// derived from it left behind a children map and a Done channel, which
// outlive the child (issue 30). Atomics rather than a mutex keep it at 32
// bytes.
type entityRun struct {
	inst Entity // set once started

	inFlight atomic.Pointer[context.CancelFunc] // the start's or stop's context, while it runs
	givenUp  atomic.Bool                        // the shard stopped waiting for it
}

// begin returns the context of the incarnation's start or stop, from
// parent; end releases it once the action has returned. Whichever of
// begin and giveUp comes second ends the context (both may: cancelling
// twice is harmless).
func (run *entityRun) begin(parent context.Context) (ctx context.Context, end func()) {
	ctx, cancel := context.WithCancel(parent)
	run.inFlight.Store(&cancel)
	if run.givenUp.Load() {
		cancel()
	}
	return ctx, func() {
		run.inFlight.Store(nil)
		cancel()
	}
}

// giveUp ends the action in flight, if any, and the contexts of those to
// come.
func (run *entityRun) giveUp() {
	run.givenUp.Store(true)
	if cancel := run.inFlight.Load(); cancel != nil {
		(*cancel)()
	}
}

func newShard(r *Region, id string) *shard {
	sh := &shard{r: r, id: id, gone: make(chan struct{})}
	sh.st = NewShardState(id, ShardConfig{
		TypeName: r.s.TypeName, Self: r.self,
		PassivateIdleAfter: r.s.PassivateIdleAfter, HandOffTimeout: r.s.HandOffTimeout,
		Bugs: r.s.Bugs, NextIncarnation: r.nextIncarnation,
	}, r.log)
	return sh
}

func (sh *shard) event(typ, detail string) {
	sh.r.d.Events.Append(protocol.Event{Type: typ, Member: sh.r.self, EntityType: sh.r.s.TypeName, Shard: sh.id, Detail: detail})
}

// entityWork is one action of an incarnation to carry out (StartEntity,
// HandleMsg or StopEntity), with what it needs.
type entityWork struct {
	sh  *shard
	eff ShardEffect
	run *entityRun
	env *envelope // HandleMsg's; nil if its caller gave up
}

func (entityWork) regionEffect() {}

// shardTimer: the shard's end waits at most After.
type shardTimer struct {
	sh    *shard
	after ShardEffect
}

func (shardTimer) regionEffect() {}

// stepLocked steps the machine (r.mu held) and carries out the effects
// that need no waiting; it returns the rest for the region's carryOut.
func (sh *shard) stepLocked(in ShardInput) []RegionEffect {
	r := sh.r
	var later []RegionEffect
	for _, eff := range sh.st.Step(r.d.Clock.Elapsed(), in) {
		switch e := eff.(type) {
		case StartEntity:
			run := &entityRun{}
			sh.st.Attach(e.Entity, e.Inc, run)
			later = append(later, entityWork{sh: sh, eff: eff, run: run})
		case HandleMsg:
			run, _ := sh.st.Attached(e.Entity, e.Inc).(*entityRun)
			env := r.envs[e.Msg.ID]
			delete(r.envs, e.Msg.ID)
			later = append(later, entityWork{sh: sh, eff: eff, run: run, env: env})
		case StopEntity:
			run, _ := sh.st.Attached(e.Entity, e.Inc).(*entityRun)
			later = append(later, entityWork{sh: sh, eff: eff, run: run})
		case CancelEntity:
			if run, ok := sh.st.Attached(e.Entity, e.Inc).(*entityRun); ok {
				run.giveUp()
			}
		case FailShardMsg:
			if env := r.envs[e.Msg.ID]; env != nil {
				delete(r.envs, e.Msg.ID)
				env.fail(e.Err)
			}
		case ForgetShardMsg:
			delete(r.envs, e.Msg.ID)
		case RebufferMsgs:
			// Held messages never reached an entity: they follow the
			// shard to its next home through the region's buffer.
			var back []RegionMsg
			for _, m := range e.Msgs {
				if env := r.envs[m.ID]; env != nil && !env.abandoned() {
					back = append(back, m)
				} else {
					delete(r.envs, m.ID)
				}
			}
			later = append(later, r.stepLocked(RgRebuffer{Shard: sh.id, Msgs: back})...)
		case EntityEvent:
			r.d.Events.Append(protocol.Event{Type: e.Type, Member: r.self, EntityType: r.s.TypeName, Shard: sh.id,
				Entity: e.Entity, EntityIncarnation: e.Inc, Detail: e.Detail})
		case ArmShardTimer:
			later = append(later, shardTimer{sh: sh, after: eff})
		case ShardDone:
			sh.forced = e.Forced
			close(sh.gone)
		default:
			panic(fmt.Sprintf("sharding: shard effect %T not carried out", eff))
		}
	}
	return later
}

// step steps the machine and carries out all its effects.
func (sh *shard) step(in ShardInput) {
	r := sh.r
	r.mu.Lock()
	later := sh.stepLocked(in)
	r.mu.Unlock()
	r.carryOut(later)
}

// work carries out an incarnation's action on this goroutine, and its
// next ones after it: one goroutine serves an entity while it has work,
// and ends when it parks.
func (w entityWork) work() {
	for {
		in := w.do()
		r := w.sh.r
		r.mu.Lock()
		later := w.sh.stepLocked(in)
		r.mu.Unlock()
		next, ok := takeNextOf(&later, w)
		r.carryOut(later)
		if !ok {
			return
		}
		w = next
	}
}

// serveInline carries out the caller's own message on the caller's
// goroutine (its entity was parked); what follows it is served by a
// goroutine of the entity's own, so the caller never works for other
// callers after its own message.
func (w entityWork) serveInline() {
	in := w.do()
	w.sh.step(in)
}

// takeNextOf removes from later the next action of w's incarnation.
func takeNextOf(later *[]RegionEffect, w entityWork) (entityWork, bool) {
	for i, eff := range *later {
		if n, ok := eff.(entityWork); ok && n.sh == w.sh && n.run == w.run {
			*later = append((*later)[:i], (*later)[i+1:]...)
			return n, true
		}
	}
	return entityWork{}, false
}

// do carries out the action and returns the input that reports it.
func (w entityWork) do() ShardInput {
	r := w.sh.r
	switch e := w.eff.(type) {
	case StartEntity:
		ec := EntityContext{
			TypeName: r.s.TypeName, EntityID: e.Entity, ShardID: w.sh.id, Incarnation: e.Inc, Node: r.self,
			Clock: r.d.Clock, Journal: r.d.Journal, Logger: r.log,
			Passivate: func() { w.sh.step(ShPassivate{Entity: e.Entity, Inc: e.Inc}) },
		}
		ctx, end := w.run.begin(r.entityParent)
		inst, err := CallFactory(r.d.Factory, ctx, ec)
		end()
		w.run.inst = inst
		return ShStarted{Entity: e.Entity, Inc: e.Inc, Err: err}
	case HandleMsg:
		return ShHandled{Entity: e.Entity, Inc: e.Inc, Failed: w.handle(e)}
	case StopEntity:
		ctx, end := w.run.begin(r.entityParent)
		err := CallStop(w.run.inst, ctx)
		end()
		return ShStopped{Entity: e.Entity, Inc: e.Inc, Err: err}
	}
	panic(fmt.Sprintf("sharding: entity action %T", w.eff))
}

// handle hands one message to the incarnation and answers its caller; it
// reports whether the entity said it failed.
func (w entityWork) handle(h HandleMsg) (failed bool) {
	env := w.env
	if env == nil {
		return false // its caller gave up
	}
	if err := env.ctx.Err(); err != nil {
		// Its caller's deadline passed while it was queued: never
		// handled, a definite failure.
		env.fail(fmt.Errorf("%w: deadline passed while queued: %w", ErrNotDelivered, err))
		return false
	}
	if !env.take() {
		return false
	}
	r := w.sh.r
	res, herr := CallHandle(w.run.inst, env.ctx, env.msg)
	if herr != nil {
		env.finish(Reply{}, &EntityError{Entity: h.Entity, Err: herr})
		return errors.Is(herr, ErrEntityFailed)
	}
	if len(res) == 0 {
		res = json.RawMessage("null")
	}
	env.finish(Reply{Payload: res, Node: r.self, Shard: w.sh.id, EntityIncarnation: h.Inc}, nil)
	return false
}

// handOff stops every entity after the messages already in its mailbox
// and returns once all have stopped — or, after HandOffTimeout, gives up
// on the stragglers (their contexts are cancelled and queued messages
// fail). Concurrent and repeated calls wait for the same end.
func (sh *shard) handOff() (forced int) {
	sh.step(ShHandOff{})
	<-sh.gone
	return sh.forced
}

// stopNow stops every entity at once (region stopped, node downed):
// queued and held messages fail definitely, Stop runs after the message
// being handled.
func (sh *shard) stopNow() {
	sh.step(ShStopNow{})
	<-sh.gone
}

// waitEnd steps ShTimeout after the end's deadline unless it ends first.
func (t shardTimer) waitEnd() {
	timer := t.sh.r.d.Clock.NewTimer(t.after.(ArmShardTimer).After)
	defer timer.Stop()
	select {
	case <-t.sh.gone:
	case <-timer.C():
		t.sh.step(ShTimeout{})
	}
}

// CallFactory, CallHandle and CallStop call an entity's code as a shard
// does: a panic in it is an error of the call, never the node's crash.
func CallFactory(f EntityFactory, ctx context.Context, ec EntityContext) (inst Entity, err error) {
	defer func() {
		if p := recover(); p != nil {
			inst, err = nil, fmt.Errorf("panic in entity factory: %v", p)
		}
	}()
	inst, err = f(ctx, ec)
	if err == nil && inst == nil {
		err = fmt.Errorf("entity factory returned no entity")
	}
	return inst, err
}

// CallHandle: see CallFactory.
func CallHandle(inst Entity, ctx context.Context, msg Message) (res json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("panic in Handle: %v", p)
		}
	}()
	return inst.Handle(ctx, msg)
}

// CallStop: see CallFactory.
func CallStop(inst Entity, ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in Stop: %v", p)
		}
	}()
	return inst.Stop(ctx)
}

package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"
	"github.com/shardtest/shardtest/sim"
)

// simShard drives the entity runner (sharding.ShardState) of a shard
// hosted by a simulated region, as the real node's shard does: it starts
// the real entities (register, log) over the node's journal, hands them
// one message at a time, stops them, and steps each outcome back. Each
// action takes a while drawn from the seed.
type simShard struct {
	r    *region
	id   string
	st   *sharding.ShardState
	ents map[string]*simEntity // by incarnation
	// onDone run once the shard's end is complete (with the entities
	// given up on).
	onDone []func(forced int)
	ended  bool
}

// simEntity is a started (or starting) incarnation.
type simEntity struct {
	inst sharding.Entity
	// The current call: cancel ends it (a journal cut outlasting its
	// deadline: see entityJournal); co and resume are its coroutine, when
	// it runs as one; deadline is when its caller gives up.
	cancel   context.CancelFunc
	deadline time.Duration
	co       *sim.Co
	resume   func()
	// gone: the entity's process has ended (a call waiting on the journal
	// must not write once it has).
	gone func() bool
}

func newSimShard(r *region, id string) *simShard {
	n := r.inc.n
	sh := &simShard{r: r, id: id, ents: map[string]*simEntity{}}
	sh.st = sharding.NewShardState(id, sharding.ShardConfig{
		TypeName: r.s.TypeName, Self: r.self(),
		PassivateIdleAfter: r.s.PassivateIdleAfter, HandOffTimeout: r.s.HandOffTimeout, Bugs: r.s.Bugs,
		NextIncarnation: func() string {
			// One count for the process, as the real node's.
			n.entityStarts++
			return r.self() + "/" + strconv.FormatUint(n.entityStarts, 10)
		},
	}, nil)
	return sh
}

func (sh *simShard) event(typ, detail string) {
	r := sh.r
	r.inc.n.emit(protocol.Event{Type: typ, Member: r.self(), EntityType: r.s.TypeName, Shard: sh.id, Detail: detail})
}

// step steps the runner and carries out its effects.
func (sh *simShard) step(in sharding.ShardInput) {
	r := sh.r
	if r.inc.gone() {
		return
	}
	for _, eff := range sh.st.Step(r.inc.n.elapsed(), in) {
		sh.apply(eff)
	}
}

func (sh *simShard) apply(eff sharding.ShardEffect) {
	r := sh.r
	c := r.inc.n.c
	switch e := eff.(type) {
	case sharding.StartEntity:
		ent := &simEntity{gone: r.inc.gone}
		sh.ents[e.Inc] = ent
		r.inc.after(jitter(c, entityStartTime), "", func() {
			ec := sharding.EntityContext{
				TypeName: r.s.TypeName, EntityID: e.Entity, ShardID: sh.id, Incarnation: e.Inc, Node: r.self(),
				Clock: simClock{r.inc.n}, Journal: entityJournal{nodeJournal{c, r.inc.n.Name}, ent}, Logger: slog.New(slog.DiscardHandler),
				Passivate: func() {
					r.inc.after(0, "", func() { sh.step(sharding.ShPassivate{Entity: e.Entity, Inc: e.Inc}) })
				},
			}
			var err error
			sh.call(ent, r.now()+journal.DefaultTimeout, func(ctx context.Context) { ent.inst, err = sharding.CallFactory(r.factory, ctx, ec) },
				func() { sh.step(sharding.ShStarted{Entity: e.Entity, Inc: e.Inc, Err: err}) })
		})
	case sharding.HandleMsg:
		m := r.msgs[e.Msg.ID]
		delete(r.msgs, e.Msg.ID)
		r.inc.after(jitter(c, entityServeTime), "", func() {
			sh.handle(e, m, func(failed bool) {
				sh.step(sharding.ShHandled{Entity: e.Entity, Inc: e.Inc, Failed: failed})
			})
		})
	case sharding.StopEntity:
		r.inc.after(jitter(c, entityStopTime), "", func() {
			var err error
			stopped := func() {
				delete(sh.ents, e.Inc)
				sh.step(sharding.ShStopped{Entity: e.Entity, Inc: e.Inc, Err: err})
			}
			ent := sh.ents[e.Inc]
			if ent == nil || ent.inst == nil {
				stopped()
				return
			}
			sh.call(ent, r.now()+journal.DefaultTimeout, func(ctx context.Context) { err = sharding.CallStop(ent.inst, ctx) }, stopped)
		})
	case sharding.CancelEntity:
		// An entity given up on is never called again; a call of it still
		// waiting on the journal ends.
		if ent := sh.ents[e.Inc]; ent != nil && ent.cancel != nil {
			ent.cancel()
		}
		delete(sh.ents, e.Inc)
	case sharding.FailShardMsg:
		if m := r.msgs[e.Msg.ID]; m != nil {
			delete(r.msgs, e.Msg.ID)
			m.done(sharding.Reply{}, e.Err)
		}
	case sharding.ForgetShardMsg:
		delete(r.msgs, e.Msg.ID)
	case sharding.RebufferMsgs:
		var back []sharding.RegionMsg
		for _, m := range e.Msgs {
			if r.alive(r.msgs[m.ID]) {
				back = append(back, m)
			} else {
				delete(r.msgs, m.ID)
			}
		}
		r.step(sharding.RgRebuffer{Shard: sh.id, Msgs: back})
	case sharding.EntityEvent:
		r.inc.n.emit(protocol.Event{Type: e.Type, Member: r.self(), EntityType: r.s.TypeName, Shard: sh.id,
			Entity: e.Entity, EntityIncarnation: e.Inc, Detail: e.Detail})
	case sharding.ArmShardTimer:
		r.inc.after(e.After, "", func() {
			if !sh.ended {
				sh.step(sharding.ShTimeout{})
			}
		})
	case sharding.ShardDone:
		sh.ended = true
		done := sh.onDone
		sh.onDone = nil
		for _, f := range done {
			f(e.Forced)
		}
	default:
		panic(fmt.Sprintf("sim: shard effect %T not carried out", eff))
	}
}

// handle hands one message to its incarnation, answers its caller and
// then says whether the entity said it failed.
func (sh *simShard) handle(h sharding.HandleMsg, m *regionMsg, then func(failed bool)) {
	r := sh.r
	if m == nil || m.answer == nil {
		then(false) // its caller gave up
		return
	}
	if r.now() >= m.deadline {
		m.done(sharding.Reply{}, fmt.Errorf("%w: deadline passed while queued", sharding.ErrNotDelivered))
		then(false)
		return
	}
	ent := sh.ents[h.Inc]
	if ent == nil || ent.inst == nil {
		m.done(sharding.Reply{}, fmt.Errorf("%w: incarnation %s is gone", sharding.ErrNotDelivered, h.Inc))
		then(false)
		return
	}
	if ss, ok := ent.inst.(*simSender); ok && isFlush(m.msg) {
		// A flush waits for the redeliveries, which the node's does on a
		// channel: the driver answers it.
		ss.flush(m.deadline, func(res json.RawMessage) {
			m.done(sharding.Reply{Payload: res, Node: r.self(), Shard: sh.id, EntityIncarnation: h.Inc}, nil)
			then(false)
		})
		return
	}
	var res json.RawMessage
	var err error
	sh.call(ent, m.deadline, func(ctx context.Context) { res, err = sharding.CallHandle(ent.inst, ctx, m.msg) }, func() {
		if err != nil {
			m.done(sharding.Reply{}, &sharding.EntityError{Entity: h.Entity, Err: err})
			then(errors.Is(err, sharding.ErrEntityFailed))
			return
		}
		if len(res) == 0 {
			res = json.RawMessage("null")
		}
		m.done(sharding.Reply{Payload: res, Node: r.self(), Shard: sh.id, EntityIncarnation: h.Inc}, nil)
		then(false)
	})
}

// call runs f, one call into the entity's code, with a context of its
// own, then then. deadline bounds its waiting on a cut journal: its
// caller's for a message, the journal client's attempt for a start or a
// stop (their contexts have none; the real client gives up on an attempt
// after that). Made while the node is cut off from the journal, the call
// runs as a coroutine of the world (sim.Co), whose journal calls wait, in
// virtual time, until the cut heals or the call's deadline passes, as a
// real entity's writes hang on a cut journal (entityJournal); any other
// call runs at once, as one step.
func (sh *simShard) call(e *simEntity, deadline time.Duration, f func(ctx context.Context), then func()) {
	c := sh.r.inc.n.c
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.deadline = cancel, deadline
	if c.journalReachable(sh.r.inc.n.Name) {
		f(ctx)
		cancel()
		then()
		return
	}
	var co *sim.Co
	co = sim.Go(func(co *sim.Co) {
		defer cancel()
		f(ctx)
	})
	e.co = co
	c.calls[co] = true
	e.resume = func() {
		co.Resume()
		if co.Done() && c.calls[co] {
			delete(c.calls, co)
			e.co, e.resume = nil, nil
			then()
		}
	}
	e.resume()
}

// entityJournal is the node's journal as an entity reaches it. The
// simulation's journal answers at once; while the node is cut off from
// it, a call waits (its coroutine parks) until the cut heals — then it is
// made — or until the entity call's deadline, when the call's context
// ends and the journal is reported unavailable: the entity then reports
// the outcome unknown (and re-reads before its next write), as the real
// one does when a cut outlasts its caller's deadline.
type entityJournal struct {
	nodeJournal
	e *simEntity
}

func (j entityJournal) cutOff() error {
	c := j.c
	for {
		err := j.cut()
		if err == nil {
			return nil
		}
		e := j.e
		co := e.co
		if co == nil || c.World.Now() >= e.deadline {
			if e.cancel != nil {
				e.cancel()
			}
			return err
		}
		// Wait for the heal or the deadline, whichever comes first.
		woken := false
		wake := func() {
			if !woken && e.co == co {
				woken = true
				e.resume()
			}
		}
		c.healed[j.node] = append(c.healed[j.node], wake)
		c.World.At(e.deadline, wake)
		if !co.Park() || e.gone() {
			e.cancel()
			return err
		}
	}
}

func (j entityJournal) Append(ctx context.Context, pid string, expectedSeq int64, epoch uint64, data [][]byte) (int64, error) {
	if err := j.cutOff(); err != nil {
		return 0, err
	}
	return j.nodeJournal.Append(ctx, pid, expectedSeq, epoch, data)
}

func (j entityJournal) Replay(ctx context.Context, pid string, from int64, max int) ([]journal.Event, error) {
	if err := j.cutOff(); err != nil {
		return nil, err
	}
	return j.nodeJournal.Replay(ctx, pid, from, max)
}

func (j entityJournal) Fence(ctx context.Context, pid string) (uint64, int64, error) {
	if err := j.cutOff(); err != nil {
		return 0, 0, err
	}
	return j.nodeJournal.Fence(ctx, pid)
}

// isFlush: msg is a well-formed sender flush.
func isFlush(msg sharding.Message) bool {
	op, err := kit.ParseSender(msg.Op, msg.Payload)
	return err == nil && op.Op == protocol.OpFlush
}

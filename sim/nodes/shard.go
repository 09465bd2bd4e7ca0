package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
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
	// cancel ends the incarnation's current call (CancelEntity, or a
	// journal cut: see entityJournal).
	cancel context.CancelFunc
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
	for _, eff := range sh.st.Step(r.now(), in) {
		sh.apply(eff)
	}
}

func (sh *simShard) apply(eff sharding.ShardEffect) {
	r := sh.r
	c := r.inc.n.c
	switch e := eff.(type) {
	case sharding.StartEntity:
		ent := &simEntity{}
		sh.ents[e.Inc] = ent
		r.inc.after(jitter(c, entityStartTime), "", func() {
			ec := sharding.EntityContext{
				TypeName: r.s.TypeName, EntityID: e.Entity, ShardID: sh.id, Incarnation: e.Inc, Node: r.self(),
				Clock: simClock{c}, Journal: entityJournal{nodeJournal{c, r.inc.n.Name}, ent}, Logger: slog.New(slog.DiscardHandler),
				Passivate: func() {
					r.inc.after(0, "", func() { sh.step(sharding.ShPassivate{Entity: e.Entity, Inc: e.Inc}) })
				},
			}
			var err error
			ent.call(func(ctx context.Context) { ent.inst, err = sharding.CallFactory(r.factory, ctx, ec) })
			sh.step(sharding.ShStarted{Entity: e.Entity, Inc: e.Inc, Err: err})
		})
	case sharding.HandleMsg:
		m := r.msgs[e.Msg.ID]
		delete(r.msgs, e.Msg.ID)
		r.inc.after(jitter(c, entityServeTime), "", func() {
			sh.step(sharding.ShHandled{Entity: e.Entity, Inc: e.Inc, Failed: sh.handle(e, m)})
		})
	case sharding.StopEntity:
		r.inc.after(jitter(c, entityStopTime), "", func() {
			var err error
			if ent := sh.ents[e.Inc]; ent != nil && ent.inst != nil {
				ent.call(func(ctx context.Context) { err = sharding.CallStop(ent.inst, ctx) })
			}
			delete(sh.ents, e.Inc)
			sh.step(sharding.ShStopped{Entity: e.Entity, Inc: e.Inc, Err: err})
		})
	case sharding.CancelEntity:
		// Nothing runs between the simulation's steps: an entity given up
		// on is simply never called again.
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

// handle hands one message to its incarnation and answers its caller; it
// reports whether the entity said it failed.
func (sh *simShard) handle(h sharding.HandleMsg, m *regionMsg) (failed bool) {
	r := sh.r
	if m == nil || m.answer == nil {
		return false // its caller gave up
	}
	if r.now() >= m.deadline {
		m.done(sharding.Reply{}, fmt.Errorf("%w: deadline passed while queued", sharding.ErrNotDelivered))
		return false
	}
	ent := sh.ents[h.Inc]
	if ent == nil || ent.inst == nil {
		m.done(sharding.Reply{}, fmt.Errorf("%w: incarnation %s is gone", sharding.ErrNotDelivered, h.Inc))
		return false
	}
	var res json.RawMessage
	var err error
	ent.call(func(ctx context.Context) { res, err = sharding.CallHandle(ent.inst, ctx, m.msg) })
	if err != nil {
		m.done(sharding.Reply{}, &sharding.EntityError{Entity: h.Entity, Err: err})
		return errors.Is(err, sharding.ErrEntityFailed)
	}
	if len(res) == 0 {
		res = json.RawMessage("null")
	}
	m.done(sharding.Reply{Payload: res, Node: r.self(), Shard: sh.id, EntityIncarnation: h.Inc}, nil)
	return false
}

// call runs f, one call into the entity's code, with a context of its
// own that a journal cut ends (entityJournal).
func (e *simEntity) call(f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	defer cancel()
	f(ctx)
}

// entityJournal is the node's journal as an entity reaches it. The
// simulation's journal answers at once, so an entity's code never waits —
// but for a journal cut: the real entity then retries its append until its
// caller's deadline, which would block the simulation. Here a cut ends
// the call's context at once, so the entity reports the outcome unknown
// (and re-reads before its next write), as the real one does when the cut
// outlasts the deadline. That the cut may heal within the deadline is not
// modelled.
type entityJournal struct {
	nodeJournal
	e *simEntity
}

func (j entityJournal) cutOff() error {
	err := j.cut()
	if err != nil && j.e.cancel != nil {
		j.e.cancel()
	}
	return err
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

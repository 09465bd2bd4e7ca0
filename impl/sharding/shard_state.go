package sharding

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// ShardState is the entity runner of one shard hosted here, as a state
// machine: each entity's mailbox, when it starts, handles its next message
// or stops, passivation (messages arriving meanwhile are held for the next
// incarnation), a failed incarnation's retirement, and the shard's end —
// a hand-off (every entity stops after what it has queued, given up after
// HandOffTimeout) or a stop (at once). Step does no I/O, reads no clock
// and starts nothing: the driver starts entities, runs Handle and Stop and
// steps the outcomes back, one action at a time per entity, which is how
// an entity handles one message at a time in arrival order and stops only
// after the messages queued before its stop was asked for.
//
// Messages are named as the region names them (RegionMsg); what was
// accepted for a shard is never lost silently: it is handled, fails
// definitely, or goes back to the region (RebufferMsgs) to follow the shard
// to its next home.
type ShardState struct {
	id  string
	cfg ShardConfig
	log *slog.Logger

	entities map[string]*entityState
	// held are messages for entities that are passivating: they go to the
	// next incarnation once the current one has stopped.
	held map[string][]RegionMsg
	// closed: a hand-off has begun; deliveries wait at the region. A
	// host-shard reopens it (an aborted hand-off).
	closed bool
	// ending is the shard's end under way (hand-off or stop), nil before.
	ending *shardEnding

	now time.Duration
	out []ShardEffect
}

// ShardConfig is what a ShardState decides with.
type ShardConfig struct {
	TypeName string
	// Self is the member uid of the region.
	Self               string
	PassivateIdleAfter time.Duration
	HandOffTimeout     time.Duration
	Bugs               Bugs
	// NextIncarnation names a new incarnation (unique cluster-wide with
	// the member uid; deterministic in a simulation).
	NextIncarnation func() string
}

type shardEnding struct {
	// why the messages still queued fail when entities are given up.
	why  error
	done bool
}

// entityState is one incarnation of an entity.
type entityState struct {
	inc   string
	queue []RegionMsg
	phase entityPhase
	// stopReq: Stop comes once the mailbox is empty.
	stopReq bool
	// passivating: new messages are held for the next incarnation.
	passivating bool
	// givenUp: the shard's end stopped waiting for it.
	givenUp bool
	// lastActive is the time of the last message queued or handled, for
	// idle passivation.
	lastActive time.Duration
	// runtime is the driver's (the instance, its context); never read here.
	runtime any
}

type entityPhase uint8

const (
	// entityStarting: StartEntity is being carried out.
	entityStarting entityPhase = iota + 1
	// entityIdle: started, nothing being carried out (parked).
	entityIdle
	// entityBusy: a HandleMsg is being carried out.
	entityBusy
	// entityStopping: StopEntity is being carried out.
	entityStopping
)

// NewShardState returns the runner of shard id, with no entity.
func NewShardState(id string, cfg ShardConfig, log *slog.Logger) *ShardState {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ShardState{id: id, cfg: cfg, log: log, entities: map[string]*entityState{}, held: map[string][]RegionMsg{}}
}

// ShardInput is what a ShardState steps on.
type ShardInput interface{ shardInput() }

// ShEnqueue: a message for an entity of this shard (the region's Enqueue).
type ShEnqueue struct{ Msg RegionMsg }

// ShStarted: StartEntity is done (Err: the entity failed to start).
type ShStarted struct {
	Entity, Inc string
	Err         error
}

// ShHandled: HandleMsg is done (its caller is answered). Failed: the
// entity said it failed (ErrEntityFailed): this incarnation retires.
type ShHandled struct {
	Entity, Inc string
	Failed      bool
}

// ShStopped: StopEntity is done (Err: what Stop returned).
type ShStopped struct {
	Entity, Inc string
	Err         error
}

// ShPassivate: the entity asked to be passivated (EntityContext.Passivate).
type ShPassivate struct{ Entity, Inc string }

// ShIdleTick: time to passivate the entities idle for PassivateIdleAfter.
type ShIdleTick struct{}

// ShClose: a hand-off began; ShReopen: it was aborted (host-shard).
type ShClose struct{}

// ShReopen: see ShClose.
type ShReopen struct{}

// ShHandOff: stop every entity after what it has queued, then ShardDone.
type ShHandOff struct{}

// ShStopNow: stop every entity at once (after the message it is
// handling); queued and held messages fail; then ShardDone.
type ShStopNow struct{}

// ShTimeout: the end's timer (ArmShardTimer) fired: give up on the
// entities still running.
type ShTimeout struct{}

func (ShEnqueue) shardInput()   {}
func (ShStarted) shardInput()   {}
func (ShHandled) shardInput()   {}
func (ShStopped) shardInput()   {}
func (ShPassivate) shardInput() {}
func (ShIdleTick) shardInput()  {}
func (ShClose) shardInput()     {}
func (ShReopen) shardInput()    {}
func (ShHandOff) shardInput()   {}
func (ShStopNow) shardInput()   {}
func (ShTimeout) shardInput()   {}

// ShardEffect is what a Step asks its driver to do, in order.
type ShardEffect interface{ shardEffect() }

// StartEntity: create the incarnation (the factory), then step ShStarted.
type StartEntity struct{ Entity, Inc string }

// HandleMsg: hand the message to the incarnation (unless its caller gave
// up), answer its caller, then step ShHandled.
type HandleMsg struct {
	Entity, Inc string
	Msg         RegionMsg
}

// StopEntity: call the incarnation's Stop, then step ShStopped.
type StopEntity struct{ Entity, Inc string }

// CancelEntity: end the incarnation's context (it was given up on).
type CancelEntity struct{ Entity, Inc string }

// FailShardMsg: answer the message with a definite error.
type FailShardMsg struct {
	Msg RegionMsg
	Err error
}

// ForgetShardMsg: let go of the message without answering it (deliberate
// bug: its caller waits for its deadline).
type ForgetShardMsg struct{ Msg RegionMsg }

// RebufferMsgs: messages that never reached an entity go back to the
// region's buffer (RgRebuffer), to follow the shard to its next home.
type RebufferMsgs struct{ Msgs []RegionMsg }

// EntityEvent: append an entity's event to the node's event log.
type EntityEvent struct{ Type, Entity, Inc, Detail string }

// ArmShardTimer: step ShTimeout after the delay.
type ArmShardTimer struct{ After time.Duration }

// ShardDone: the shard's end is complete; Forced entities were given up.
type ShardDone struct{ Forced int }

func (StartEntity) shardEffect()    {}
func (HandleMsg) shardEffect()      {}
func (StopEntity) shardEffect()     {}
func (CancelEntity) shardEffect()   {}
func (FailShardMsg) shardEffect()   {}
func (ForgetShardMsg) shardEffect() {}
func (RebufferMsgs) shardEffect()   {}
func (EntityEvent) shardEffect()    {}
func (ArmShardTimer) shardEffect()  {}
func (ShardDone) shardEffect()      {}

// Step takes one input at time now and returns the effects to carry out.
func (s *ShardState) Step(now time.Duration, in ShardInput) []ShardEffect {
	s.now = now
	s.out = nil
	switch in := in.(type) {
	case ShEnqueue:
		s.enqueue(in.Msg)
	case ShStarted:
		if e := s.current(in.Entity, in.Inc); e != nil && e.phase == entityStarting {
			s.started(in.Entity, e, in.Err)
		}
	case ShHandled:
		if e := s.current(in.Entity, in.Inc); e != nil && e.phase == entityBusy {
			e.phase = entityIdle
			e.lastActive = now
			if in.Failed && !e.givenUp {
				// Stale or broken: this incarnation stops; what is still
				// in its mailbox goes, in order, ahead of what is held
				// for the next one.
				s.log.Warn("entity failed; stopping this incarnation", "entity", in.Entity, "incarnation", e.inc)
				s.held[in.Entity] = append(e.queue, s.held[in.Entity]...)
				e.queue = nil
				e.stopReq, e.passivating = true, true
			}
			s.schedule(in.Entity, e)
		}
	case ShStopped:
		if e := s.current(in.Entity, in.Inc); e != nil && e.phase == entityStopping {
			detail := ""
			if in.Err != nil {
				detail = "stopped with error: " + in.Err.Error()
			}
			s.emit(EntityEvent{Type: protocol.EventEntityStopped, Entity: in.Entity, Inc: e.inc, Detail: detail})
			s.entityDone(in.Entity, e)
		}
	case ShPassivate:
		if e := s.current(in.Entity, in.Inc); e != nil {
			s.passivate(in.Entity, e)
		}
	case ShIdleTick:
		s.idle()
	case ShClose:
		s.closed = true
	case ShReopen:
		if s.ending == nil {
			s.closed = false
		}
	case ShHandOff:
		s.end(false)
	case ShStopNow:
		s.end(true)
	case ShTimeout:
		s.timeout()
	default:
		panic(fmt.Sprintf("sharding: unknown shard input %T", in))
	}
	out := s.out
	s.out = nil
	return out
}

func (s *ShardState) emit(e ShardEffect) { s.out = append(s.out, e) }

// current is the entity's current incarnation if it is inc.
func (s *ShardState) current(entity, inc string) *entityState {
	if e := s.entities[entity]; e != nil && e.inc == inc {
		return e
	}
	return nil
}

func (s *ShardState) enqueue(m RegionMsg) {
	if s.closed || s.ending != nil {
		s.emit(FailShardMsg{Msg: m, Err: fmt.Errorf("%w: shard %s is being handed off", ErrShardNotHere, s.id)})
		return
	}
	e := s.entities[m.Entity]
	if e != nil && e.passivating {
		s.held[m.Entity] = append(s.held[m.Entity], m)
		return
	}
	if e == nil {
		e = s.start(m.Entity)
	}
	e.queue = append(e.queue, m)
	e.lastActive = s.now
	s.schedule(m.Entity, e)
}

func (s *ShardState) start(entity string) *entityState {
	e := &entityState{inc: s.cfg.NextIncarnation(), phase: entityStarting, lastActive: s.now}
	s.entities[entity] = e
	s.emit(StartEntity{Entity: entity, Inc: e.inc})
	return e
}

func (s *ShardState) started(entity string, e *entityState, err error) {
	if err != nil {
		s.log.Warn("entity failed to start", "entity", entity, "err", err)
		for _, m := range e.queue {
			s.emit(FailShardMsg{Msg: m, Err: fmt.Errorf("%w: %s: %w", ErrEntityUnavailable, entity, err)})
		}
		e.queue = nil
		s.entityDone(entity, e)
		return
	}
	e.phase = entityIdle
	s.emit(EntityEvent{Type: protocol.EventEntityStarted, Entity: entity, Inc: e.inc})
	s.schedule(entity, e)
}

// schedule gives a parked incarnation its next action: the next message,
// else its stop if one was asked for.
func (s *ShardState) schedule(entity string, e *entityState) {
	if e.phase != entityIdle {
		return
	}
	switch {
	case len(e.queue) > 0:
		m := e.queue[0]
		e.queue = slices.Delete(e.queue, 0, 1)
		if len(e.queue) == 0 {
			e.queue = nil // let an idle entity hold no backing array
		}
		e.phase = entityBusy
		s.emit(HandleMsg{Entity: entity, Inc: e.inc, Msg: m})
	case e.stopReq:
		e.phase = entityStopping
		s.emit(StopEntity{Entity: entity, Inc: e.inc})
	}
}

func (s *ShardState) passivate(entity string, e *entityState) {
	if e.passivating || e.stopReq {
		return
	}
	e.passivating, e.stopReq = true, true
	s.emit(EntityEvent{Type: protocol.EventEntityPassivated, Entity: entity, Inc: e.inc})
	s.schedule(entity, e)
}

// idle passivates the parked entities idle for PassivateIdleAfter, in the
// order of their ids (only those are sorted: a sweep over a million idle
// entities must not sort them all).
func (s *ShardState) idle() {
	if s.cfg.PassivateIdleAfter <= 0 || s.ending != nil {
		return
	}
	var idle []string
	for id, e := range s.entities {
		if !e.passivating && e.phase == entityIdle && len(e.queue) == 0 && s.now-e.lastActive >= s.cfg.PassivateIdleAfter {
			idle = append(idle, id)
		}
	}
	slices.Sort(idle)
	for _, id := range idle {
		s.passivate(id, s.entities[id])
	}
}

// entityDone: an incarnation has ended; what was held for the entity
// starts its next incarnation, or goes back to the region if the shard
// is closing.
func (s *ShardState) entityDone(entity string, e *entityState) {
	delete(s.entities, entity)
	held := s.held[entity]
	delete(s.held, entity)
	if s.cfg.Bugs.DropPassivationBuffer && len(held) > 0 {
		// Deliberate bug: what was held for the next incarnation is
		// forgotten; the callers wait for their deadline.
		for _, m := range held {
			s.emit(ForgetShardMsg{Msg: m})
		}
		held = nil
	}
	if len(held) > 0 {
		if s.closed || s.ending != nil {
			s.emit(RebufferMsgs{Msgs: held})
		} else {
			ne := s.start(entity)
			ne.queue = held
		}
	}
	s.checkDone()
}

// end begins the shard's end: a hand-off (each entity stops after its
// mailbox) or a stop (queued and held messages fail at once). A second
// end waits for the first.
func (s *ShardState) end(now bool) {
	if s.ending != nil {
		s.checkDone()
		return
	}
	s.closed = true
	s.ending = &shardEnding{why: fmt.Errorf("%w: shard %s hand-off timed out before the message's turn", ErrNotDelivered, s.id)}
	if now {
		s.ending.why = fmt.Errorf("%w: region stopped before the message's turn", ErrRegionStopped)
		for _, id := range slices.Sorted(maps.Keys(s.held)) {
			for _, m := range s.held[id] {
				s.emit(FailShardMsg{Msg: m, Err: fmt.Errorf("%w: the message was held for the entity's next incarnation", ErrRegionStopped)})
			}
		}
		s.held = map[string][]RegionMsg{}
	}
	ids := slices.Sorted(maps.Keys(s.entities))
	for _, id := range ids {
		e := s.entities[id]
		if now {
			s.failQueue(e, s.ending.why)
		}
		e.stopReq = true
		s.schedule(id, e)
	}
	if len(s.entities) > 0 {
		s.emit(ArmShardTimer{After: s.cfg.HandOffTimeout})
	}
	s.checkDone()
}

func (s *ShardState) failQueue(e *entityState, why error) {
	for _, m := range e.queue {
		s.emit(FailShardMsg{Msg: m, Err: why})
	}
	e.queue = nil
}

// timeout gives up on the entities still running at the end's deadline:
// their queued messages fail, their contexts end.
func (s *ShardState) timeout() {
	if s.ending == nil || s.ending.done {
		return
	}
	forced := 0
	for _, id := range slices.Sorted(maps.Keys(s.entities)) {
		e := s.entities[id]
		if e.givenUp {
			continue
		}
		forced++
		e.givenUp, e.stopReq = true, true
		s.failQueue(e, s.ending.why)
		s.emit(CancelEntity{Entity: id, Inc: e.inc})
	}
	s.log.Warn("entities did not stop within the hand-off timeout; given up", "shard", s.id, "count", forced)
	s.ending.done = true
	s.emit(ShardDone{Forced: forced})
}

func (s *ShardState) checkDone() {
	if s.ending == nil || s.ending.done {
		return
	}
	for _, e := range s.entities {
		if !e.givenUp {
			return
		}
	}
	s.ending.done = true
	s.emit(ShardDone{})
}

// Status lists the current entities (sorted by id) as the node protocol
// shows them.
func (s *ShardState) Status() protocol.ShardStatus {
	st := protocol.ShardStatus{ID: s.id, HandingOff: s.closed || s.ending != nil, Entities: make([]protocol.EntityStatus, 0, len(s.entities))}
	for id, e := range s.entities {
		st.Entities = append(st.Entities, protocol.EntityStatus{ID: id, Incarnation: e.inc, Passivating: e.passivating})
	}
	slices.SortFunc(st.Entities, func(a, b protocol.EntityStatus) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return st
}

// Attach keeps the driver's runtime of an incarnation (its instance and
// context) with it; Attached returns it (nil if the incarnation is gone).
func (s *ShardState) Attach(entity, inc string, v any) {
	if e := s.current(entity, inc); e != nil {
		e.runtime = v
	}
}

// Attached: see Attach.
func (s *ShardState) Attached(entity, inc string) any {
	if e := s.current(entity, inc); e != nil {
		return e.runtime
	}
	return nil
}

// Parked reports whether the entity's current incarnation is started and
// has nothing being carried out (no goroutine serves it).
func (s *ShardState) Parked(entity string) bool {
	e := s.entities[entity]
	return e != nil && e.phase == entityIdle
}

// Held counts the messages held for the entity's next incarnation.
func (s *ShardState) Held(entity string) int { return len(s.held[entity]) }

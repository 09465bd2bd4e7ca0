package nodes

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/sim"
)

// The region protocol between nodes: a forwarded message (op "deliver")
// or a coordinator's request (host-shard, begin-hand-off, hand-off) to
// the region of type typ on member to, and its answer. An error is the
// body the real region's endpoint answers (codes of protocol.ScopePeer),
// so that the sender reads it as the real one does.
type (
	regionReq struct {
		typ, op, shard string
		from, to       string
		id             uint64
		msg            sharding.Message
	}
	regionRes struct {
		id   uint64
		rep  sharding.Reply
		body *protocol.ErrorBody
	}
)

// Entity timing, each drawn from the seed up to these: an incarnation's
// start (fencing and replaying its journal), serving one message (its
// journal append), and a stop.
const (
	entityStartTime = 5 * time.Millisecond
	entityServeTime = 2 * time.Millisecond
	entityStopTime  = 2 * time.Millisecond
)

// opDeliver is the region protocol's forwarded message.
const opDeliver = "deliver"

// region drives one member's sharding.RegionState for an entity type, as
// sharding.Region does on the real node: callers' messages and forwarded
// ones in, the coordinator's requests, asks for homes through the
// coordinator's proxy, forwards over the network, and the shards hosted
// here (each a sharding.ShardState driving real entities over the node's
// journal).
type region struct {
	inc     *incarnation
	s       sharding.Settings
	st      *sharding.RegionState
	extract sharding.ExtractShardID
	coord   *proxy
	factory sharding.EntityFactory
	// msgs are the messages the machines may still name, by id.
	msgs   map[uint64]*regionMsg
	last   uint64
	shards map[string]*simShard
	// registeredAt: the coordinator location this region registered with
	// ("\x00": none yet); registering: a registration is in flight, or
	// waits its retry interval after a failed one (the real region's loop
	// sleeps then, deaf to view changes).
	registeredAt string
	registering  bool
	registered   bool
	idle         sim.Event
	// leaving: a graceful leave waits for the shards to go (onEmpty).
	onEmpty    func()
	leaveTimer sim.Event
	// stopping: the region stops; onStopped runs once every shard has.
	stopped   bool
	onStopped func()
}

// regionMsg is a message in the region's hands: answer gets its outcome,
// once (nil afterwards), unless its deadline passed first.
type regionMsg struct {
	id       uint64
	msg      sharding.Message
	shard    string
	deadline time.Duration
	answer   func(sharding.Reply, error)
	// placed, if set, runs once the message's place among its shard's
	// messages is fixed (a tell's next may follow): queued here, buffered,
	// or — sent straight to its home — answered or buffered after all.
	placed func()
	// sending: on its way straight to its home (a caller's direct send).
	sending bool
}

func (m *regionMsg) done(rep sharding.Reply, err error) {
	if a := m.answer; a != nil {
		m.answer = nil
		a(rep, err)
	}
	m.place()
}

func (m *regionMsg) place() {
	if p := m.placed; p != nil {
		m.placed = nil
		p()
	}
}

func newRegion(inc *incarnation, s sharding.Settings, coord *proxy) *region {
	self := inc.m.Self().UID()
	r := &region{inc: inc, s: s, coord: coord, extract: sharding.HashShards(s.NumberOfShards),
		msgs: map[uint64]*regionMsg{}, shards: map[string]*simShard{}, registeredAt: "\x00"}
	r.st = sharding.NewRegionState(self, sharding.RegionConfig{TypeName: s.TypeName, BufferSize: s.BufferSize,
		RetryInterval: s.RetryInterval, NumberOfShards: s.NumberOfShards, Bugs: s.Bugs}, nil)
	if s.PassivateIdleAfter > 0 {
		r.armIdle(max(s.PassivateIdleAfter/2, time.Millisecond))
	}
	return r
}

func (r *region) self() string { return r.inc.m.Self().UID() }
func (r *region) now() time.Duration {
	return r.inc.n.c.World.Now()
}

// askTimeout and hostTimeout are the real region's (sharding.Settings).
func (r *region) askTimeout() time.Duration  { return max(10*r.s.RetryInterval, 2*r.hostTimeout()) }
func (r *region) hostTimeout() time.Duration { return max(4*r.s.RetryInterval, 500*time.Millisecond) }

// coordinatorAt is the member uid the coordinator is looked for on.
func (r *region) coordinatorAt() string {
	if o, ok := r.inc.m.Snapshot().Oldest(r.s.Role); ok {
		return o.UID()
	}
	return ""
}

// viewChanged registers again when the coordinator moves, as the real
// region does.
func (r *region) viewChanged() {
	r.inc.after(0, "", r.register)
}

func (r *region) register() {
	if r.stopped || r.registering || r.coordinatorAt() == r.registeredAt {
		return
	}
	at := r.coordinatorAt()
	r.registering = true
	payload, _ := json.Marshal(sharding.RegisterRequest{Region: r.self()})
	r.coord.call(singleton.Request{Op: sharding.OpRegister, Payload: payload}, r.askTimeout(), func(_ json.RawMessage, err error) {
		if r.inc.gone() {
			return
		}
		if err != nil {
			r.inc.after(r.s.RetryInterval, "", func() {
				r.registering = false
				r.register()
			})
			return
		}
		r.registering = false
		r.registered, r.registeredAt = true, at
		r.register() // it may have moved meanwhile
	})
}

// deliver routes a caller's message; answer gets its outcome (never if
// the process ends first: the caller's own timeout ends the wait), placed
// (if set) runs once its place among its shard's messages is fixed.
func (r *region) deliver(msg sharding.Message, placed func(), answer func(sharding.Reply, error)) {
	r.deliverBy(msg, r.now()+r.inc.n.c.cfg.RequestTimeout, placed, answer)
}

// deliverBy is deliver with the caller's deadline (an entity's own
// delivery attempts have one of their own).
func (r *region) deliverBy(msg sharding.Message, deadline time.Duration, placed func(), answer func(sharding.Reply, error)) {
	fail := func(err error) {
		answer(sharding.Reply{}, err)
		if placed != nil {
			placed()
		}
	}
	if r.stopped {
		fail(fmt.Errorf("%w: %s", sharding.ErrRegionStopped, r.s.TypeName))
		return
	}
	if msg.EntityID == "" {
		fail(fmt.Errorf("%w: empty entity id", sharding.ErrBadMessage))
		return
	}
	m := r.newMsg(msg, answer)
	m.deadline, m.placed = deadline, placed
	r.whenFresh(m, func() {
		r.step(sharding.RgSubmit{Msg: r.rmsg(m)})
		if !m.sending {
			m.place()
		}
	})
}

// whenFresh runs f once the member may serve (not just thawed), checking
// every 20 ms as the real region does; if the message's deadline comes
// first it fails, definitely (it went nowhere).
func (r *region) whenFresh(m *regionMsg, f func()) {
	if r.inc.m.Fresh(r.inc.n.elapsed()) {
		f()
		return
	}
	if r.now() >= m.deadline || r.stopped {
		delete(r.msgs, m.id)
		m.done(sharding.Reply{}, fmt.Errorf("%w: this member is not fresh (it was frozen or starved) and did not become so in time", sharding.ErrEntityUnavailable))
		return
	}
	r.inc.after(20*time.Millisecond, "", func() { r.whenFresh(m, f) })
}

func (r *region) newMsg(msg sharding.Message, answer func(sharding.Reply, error)) *regionMsg {
	r.last++
	m := &regionMsg{id: r.last, msg: msg, shard: r.extract(msg.EntityID), deadline: r.now() + r.inc.n.c.cfg.RequestTimeout, answer: answer}
	r.msgs[m.id] = m
	return m
}

func (r *region) rmsg(m *regionMsg) sharding.RegionMsg {
	return sharding.RegionMsg{ID: m.id, Shard: m.shard, Entity: m.msg.EntityID}
}

// alive: the message's caller still waits.
func (r *region) alive(m *regionMsg) bool {
	return m != nil && m.answer != nil && r.now() < m.deadline
}

// step steps the routing machine and carries out its effects; claim, if
// set, may take an effect for the caller (returning true).
func (r *region) step(in sharding.RegionInput) { r.stepWith(in, nil) }

func (r *region) stepWith(in sharding.RegionInput, claim func(sharding.RegionEffect) bool) {
	if r.inc.gone() {
		return
	}
	for _, eff := range r.st.Step(in) {
		if claim != nil && claim(eff) {
			continue
		}
		r.apply(eff)
	}
}

func (r *region) apply(eff sharding.RegionEffect) {
	switch e := eff.(type) {
	case sharding.Enqueue:
		m := r.msgs[e.Msg.ID]
		sh := r.shards[e.Shard]
		if sh == nil {
			delete(r.msgs, e.Msg.ID)
			if m != nil {
				m.done(sharding.Reply{}, fmt.Errorf("%w: shard %s", sharding.ErrShardNotHere, e.Shard))
			}
			return
		}
		sh.step(sharding.ShEnqueue{Msg: e.Msg})
	case sharding.Forward:
		r.forward(e)
	case sharding.AskHome:
		r.askHome(e)
	case sharding.ArmRetry:
		r.inc.after(e.After, "", func() { r.step(sharding.RgRetry{Shard: e.Shard}) })
	case sharding.FailMsg:
		if m := r.msgs[e.Msg.ID]; m != nil {
			delete(r.msgs, e.Msg.ID)
			m.done(sharding.Reply{}, e.Err)
		}
	case sharding.ForgetMsg:
		delete(r.msgs, e.Msg.ID)
	case sharding.StartShard:
		r.shards[e.Shard] = newSimShard(r, e.Shard)
	case sharding.CloseShard:
		if sh := r.shards[e.Shard]; sh != nil {
			sh.step(sharding.ShClose{})
		}
	case sharding.ReopenShard:
		if sh := r.shards[e.Shard]; sh != nil {
			sh.step(sharding.ShReopen{})
		}
	case sharding.StopShard:
		r.stopShard(e.Shard, e.Now, nil)
	case sharding.EmitRegionEvent:
		r.inc.n.emit(e.Event)
	case sharding.LocalChanged:
		r.checkEmpty()
	case sharding.HostResult, sharding.Refused:
		// Only a coordinator's request's step answers; serveCoordinator
		// claims it.
	default:
		panic(fmt.Sprintf("sim: region effect %T not carried out", eff))
	}
}

// forward sends a message to the region home; the outcome is stepped
// back as RgForwarded.
func (r *region) forward(f sharding.Forward) {
	m := r.msgs[f.Msg.ID]
	delete(r.msgs, f.Msg.ID)
	if !r.alive(m) {
		// Its caller gave up: go on with the next one.
		if m != nil && m.answer != nil {
			m.done(sharding.Reply{}, fmt.Errorf("%w: deadline passed while buffered", sharding.ErrNotDelivered))
		}
		r.step(sharding.RgForwarded{Msg: f.Msg, Home: f.Home, Flush: f.Flush, Delivered: true})
		return
	}
	requeue := func() {
		ok := r.alive(m)
		if ok {
			r.msgs[m.id] = m
		} else {
			m.done(sharding.Reply{}, fmt.Errorf("%w: deadline passed before the shard's home was found", sharding.ErrNotDelivered))
		}
		r.step(sharding.RgForwarded{Msg: f.Msg, Home: f.Home, Flush: f.Flush, Requeued: ok})
	}
	ms, ok := r.inc.m.Find(f.Home)
	if !ok || ms.Status.Final() {
		requeue()
		return
	}
	m.sending = !f.Flush
	r.inc.callRegion(ms, regionReq{typ: r.s.TypeName, op: opDeliver, msg: m.msg}, m.deadline-r.now(), func(res regionRes, sent bool) {
		if r.inc.gone() {
			return
		}
		var err error
		rebuffer := !sent
		rep := res.rep
		switch {
		case !sent:
		case res.body == nil && res.id == 0:
			err = fmt.Errorf("%w: forward to %s: no answer before the deadline", sharding.ErrUnknownOutcome, f.Home)
		case res.body != nil:
			rep, err, rebuffer = sharding.ClassifyForward(&peer.RemoteError{Body: *res.body}, m.msg.EntityID, f.Home)
		}
		if rebuffer {
			requeue()
			m.place()
			return
		}
		m.done(rep, err)
		r.step(sharding.RgForwarded{Msg: f.Msg, Home: f.Home, Flush: f.Flush, Delivered: true})
	})
}

// askHome asks the coordinator for a shard's home.
func (r *region) askHome(a sharding.AskHome) {
	payload, _ := json.Marshal(sharding.GetShardHomeRequest{Shard: a.Shard, Region: r.self(), NotHere: a.NotHere})
	r.coord.call(singleton.Request{Op: sharding.OpGetShardHome, Payload: payload}, r.askTimeout(), func(res json.RawMessage, err error) {
		if r.inc.gone() || r.stopped {
			return
		}
		home := ""
		if err == nil {
			var rep sharding.ShardHomeReply
			if jerr := json.Unmarshal(res, &rep); jerr != nil || rep.Region == "" {
				err = fmt.Errorf("sharding: bad get-shard-home answer %s: %v", res, jerr)
			}
			home = rep.Region
		}
		r.step(sharding.RgHome{Shard: a.Shard, Home: home, Err: err})
	})
}

// stopShard stops a hosted shard: at once (the region stops), or after
// what its entities have queued (a hand-off); done, if set, runs when the
// shard is gone.
func (r *region) stopShard(id string, now bool, done func()) {
	sh := r.shards[id]
	if sh == nil {
		if done != nil {
			done()
		}
		return
	}
	sh.onDone = append(sh.onDone, func(forced int) {
		if r.shards[id] == sh {
			delete(r.shards, id)
			detail := "region stopped"
			if !now {
				detail = "handed off"
				if forced > 0 {
					detail = fmt.Sprintf("handed off; %d entities did not stop within %v and were given up", forced, r.s.HandOffTimeout)
				}
				r.step(sharding.RgShardRemoved{Shard: id})
			}
			sh.event(protocol.EventShardStopped, detail)
		}
		if done != nil {
			done()
		}
		r.checkEmpty()
		r.checkStopped()
	})
	if now {
		sh.step(sharding.ShStopNow{})
	} else {
		sh.step(sharding.ShHandOff{})
	}
}

// serveCoordinator serves a coordinator's request (host-shard,
// begin-hand-off, hand-off) and answers it.
func (r *region) serveCoordinator(from string, q regionReq, answer func(error)) {
	by := sharding.ByCoordinator{From: from, Coordinator: r.coordinatorAt()}
	var refused error
	stop := false
	var in sharding.RegionInput
	switch q.op {
	case "host-shard":
		in = sharding.RgHostShard{Shard: q.shard, By: by}
	case "begin-hand-off":
		in = sharding.RgBeginHandOff{Shard: q.shard, By: by}
	case "hand-off":
		in = sharding.RgHandOff{Shard: q.shard, By: by}
	default:
		answer(fmt.Errorf("no such endpoint: %s", q.op))
		return
	}
	r.stepWith(in, func(e sharding.RegionEffect) bool {
		switch e := e.(type) {
		case sharding.HostResult:
			refused = e.Err
			return true
		case sharding.Refused:
			refused = e.Err
			return true
		case sharding.StopShard:
			if e.Shard == q.shard && !e.Now && q.op == "hand-off" {
				stop = true
				return true
			}
		}
		return false
	})
	switch {
	case refused != nil:
		answer(refused)
	case stop:
		r.stopShard(q.shard, false, func() { answer(nil) })
	default:
		answer(nil)
	}
}

// peerDeliver serves a forwarded message: only to a shard hosted and
// accepting here; never routed further.
func (r *region) peerDeliver(msg sharding.Message, answer func(sharding.Reply, error)) {
	if r.stopped {
		answer(sharding.Reply{}, fmt.Errorf("%w: %s", sharding.ErrRegionStopped, r.s.TypeName))
		return
	}
	m := r.newMsg(msg, answer)
	r.whenFresh(m, func() {
		r.stepWith(sharding.RgPeerDeliver{Msg: r.rmsg(m)}, func(e sharding.RegionEffect) bool {
			if f, ok := e.(sharding.FailMsg); ok && f.Msg.ID == m.id {
				delete(r.msgs, m.id)
				m.done(sharding.Reply{}, f.Err)
				return true
			}
			return false
		})
	})
}

// leave asks the coordinator to hand off every shard hosted here
// (graceful-shutdown), again every RebalanceInterval, and calls done once
// none is left.
func (r *region) leave(done func()) {
	r.onEmpty = done
	var send func()
	send = func() {
		if r.onEmpty == nil || r.stopped {
			return
		}
		payload, _ := json.Marshal(sharding.GracefulShutdownRequest{Region: r.self()})
		r.coord.call(singleton.Request{Op: sharding.OpGracefulShutdown, Payload: payload}, r.askTimeout(), func(_ json.RawMessage, err error) {
			d := r.s.RebalanceInterval
			if err != nil {
				d = r.s.RetryInterval
			}
			r.leaveTimer = r.inc.after(d, "", send)
		})
	}
	send()
	r.checkEmpty()
}

// stopLeaving: the leave goes on without waiting for this region.
func (r *region) stopLeaving() {
	r.onEmpty = nil
	r.leaveTimer.Cancel()
}

func (r *region) checkEmpty() {
	if r.onEmpty != nil && len(r.shards) == 0 {
		done := r.onEmpty
		r.stopLeaving()
		done()
	}
}

// stop ends the region (its member ends): buffered messages fail, every
// shard's entities stop at once; done runs once all have.
func (r *region) stop(done func()) {
	if r.stopped {
		done()
		return
	}
	r.stopped, r.onStopped = true, done
	r.idle.Cancel()
	r.stopLeaving()
	r.step(sharding.RgStop{})
	r.checkStopped()
}

func (r *region) checkStopped() {
	if r.stopped && r.onStopped != nil && len(r.shards) == 0 {
		done := r.onStopped
		r.onStopped = nil
		done()
	}
}

// armIdle passivates idle entities every d, as the real region's ticker.
func (r *region) armIdle(d time.Duration) {
	r.idle = r.inc.after(d, "idle-"+r.s.TypeName, func() {
		for _, id := range slices.Sorted(maps.Keys(r.shards)) {
			if sh := r.shards[id]; sh != nil {
				sh.step(sharding.ShIdleTick{})
			}
		}
		if !r.stopped {
			r.armIdle(d)
		}
	})
}

// status is the region's part of the node's sharding status.
func (r *region) status() protocol.RegionStatus {
	st := protocol.RegionStatus{Shards: []protocol.ShardStatus{}, Buffered: r.st.Buffered(), Dropped: r.st.Dropped(), Coordinator: r.coordinatorAt()}
	for _, id := range slices.Sorted(maps.Keys(r.shards)) {
		st.Shards = append(st.Shards, r.shards[id].st.Status())
	}
	slices.SortFunc(st.Shards, func(a, b protocol.ShardStatus) int { return strings.Compare(a.ID, b.ID) })
	return st
}

// callRegion sends a region protocol request to member ms; done gets the
// answer (sent true), or sent false if it certainly never arrived (the
// connection was refused), or a zero answer with sent true if none came
// before timeout (its outcome unknown).
func (inc *incarnation) callRegion(ms interface{ UID() string }, q regionReq, timeout time.Duration, done func(res regionRes, sent bool)) {
	c := inc.n.c
	m, ok := inc.m.Find(ms.UID())
	switch {
	case !ok || m.GossipAddr == "":
		done(regionRes{}, false) // nowhere to send it
		return
	case timeout <= 0:
		done(regionRes{}, true) // no time left: its outcome is its caller's to tell
		return
	}
	inc.regionID++
	id := inc.regionID
	q.id, q.from, q.to = id, inc.m.Self().UID(), m.UID()
	finished := false
	finish := func(res regionRes, sent bool) {
		if finished || inc.gone() {
			return
		}
		finished = true
		delete(inc.regionCalls, id)
		done(res, sent)
	}
	deadline := inc.after(timeout, "", func() { finish(regionRes{}, true) })
	inc.regionCalls[id] = func(res regionRes) {
		deadline.Cancel()
		finish(res, true)
	}
	c.Net.SendReliable(inc.n.addr, m.GossipAddr, q, timeout, func(err error) {
		if strings.HasSuffix(err.Error(), "connection refused") {
			deadline.Cancel()
			finish(regionRes{}, false)
		}
	})
}

// serveRegion serves another member's region protocol request.
func (inc *incarnation) serveRegion(fromAddr string, q regionReq) {
	c := inc.n.c
	reply := func(res regionRes) {
		res.id = q.id
		c.Net.SendReliable(inc.n.addr, fromAddr, res, c.cfg.RequestTimeout, nil)
	}
	fail := func(err error, code string) {
		body := protocol.ErrorBody{Error: err.Error(), Code: code}
		_, body = protocol.ErrorReply(protocol.ScopePeer, 0, body)
		reply(regionRes{body: &body})
	}
	r := inc.regionOf(q.typ)
	switch {
	case r == nil:
		fail(errors.New("no region for entity type "+q.typ+" on this node"), protocol.CodeNotFound)
		return
	case q.to != inc.m.Self().UID():
		fail(fmt.Errorf("region %s is gone; this is %s", q.to, inc.m.Self().UID()), protocol.CodeRegionStopped)
		return
	}
	if q.op == opDeliver {
		r.peerDeliver(q.msg, func(rep sharding.Reply, err error) {
			if err == nil {
				reply(regionRes{rep: rep})
				return
			}
			body := sharding.DeliverErrorBody(err)
			_, body = protocol.ErrorReply(protocol.ScopePeer, 0, body)
			reply(regionRes{body: &body})
		})
		return
	}
	r.serveCoordinator(q.from, q, func(err error) {
		if err == nil {
			reply(regionRes{})
			return
		}
		fail(err, protocol.CodeRegionStopped)
	})
}

// regionAnswered takes the answer to a region protocol request.
func (inc *incarnation) regionAnswered(res regionRes) {
	if f := inc.regionCalls[res.id]; f != nil {
		f(res)
	}
}

// Deliver gives msg to the region of typ on node name; done gets the
// outcome, once. A node whose process is not running answers nothing: the
// caller's own timeout ends the wait.
func (c *Cluster) Deliver(name, typ string, msg sharding.Message, done func(sharding.Reply, error)) {
	n := c.Node(name)
	if n == nil || n.inc == nil {
		return
	}
	n.run("", func() {
		inc := n.inc
		if inc == nil {
			return
		}
		r := inc.regionOf(typ)
		if r == nil {
			done(sharding.Reply{}, fmt.Errorf("%w: no entity type %q", sharding.ErrBadMessage, typ))
			return
		}
		r.deliver(msg, nil, done)
	})
}

// tellLimit bounds the fire-and-forget messages queued per sender, as the
// real node's.
const tellLimit = 1000

// Tell accepts a fire-and-forget message for the region of typ on node
// name, as the real node does: one FIFO queue per sender, the next
// message submitted once the previous one's place is fixed, so that one
// sender's tells reach an entity in order (at most once). It reports
// false if the message was refused (the sender's queue is full, or the
// node runs no such type); the process must be running and not paused
// (its caller is in it).
func (c *Cluster) Tell(name, typ string, msg sharding.Message) bool {
	n := c.Node(name)
	if n == nil || n.inc == nil || n.inc.regionOf(typ) == nil {
		return false
	}
	inc := n.inc
	q := inc.tells[msg.Sender]
	if len(q) >= tellLimit {
		return false
	}
	inc.tells[msg.Sender] = append(q, tell{typ, msg})
	if len(q) == 0 {
		inc.drainTells(msg.Sender)
	}
	return true
}

// tell is a queued fire-and-forget message.
type tell struct {
	typ string
	msg sharding.Message
}

// drainTells submits the sender's first queued tell, and the next once
// its place is fixed.
func (inc *incarnation) drainTells(sender string) {
	q := inc.tells[sender]
	if len(q) == 0 || inc.gone() {
		delete(inc.tells, sender)
		return
	}
	t := q[0]
	next := func() {
		inc.tells[sender] = inc.tells[sender][1:]
		inc.drainTells(sender)
	}
	r := inc.regionOf(t.typ)
	r.deliver(t.msg, next, func(sharding.Reply, error) {})
}

// Sharding is the node's sharding status (nil when its process is not
// running): per entity type, its region and whether the type's
// coordinator runs here.
func (n *Node) Sharding() []protocol.ShardingStatus {
	if n.inc == nil {
		return nil
	}
	var out []protocol.ShardingStatus
	for _, r := range n.inc.regions {
		st := protocol.ShardingStatus{Type: r.s.TypeName, Region: r.status()}
		if m := n.inc.manager(sharding.CoordinatorName(r.s.TypeName)); m != nil && m.inst != nil && m.inst.live {
			st.CoordinatorRunning = true
		}
		out = append(out, st)
	}
	return out
}

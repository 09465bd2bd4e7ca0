package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/sim"
)

// SingletonName is the singleton every simulated node's manager runs.
const SingletonName = "id-generator"

// The messages between managers.
type (
	// managerMsg is a manager's request to the manager of member To.
	managerMsg struct {
		name, op, from, to string
		id                 uint64
	}
	// managerReply answers it: Said is the state the receiver answered,
	// err why it did not.
	managerReply struct {
		name string
		id   uint64
		said string
		err  string
	}
)

// Instance timing, each drawn from the seed up to these: how long the
// factory takes (fencing the journal), a stop, and serving one request
// (its journal append).
const (
	instanceStartTime = 20 * time.Millisecond
	instanceStopTime  = 20 * time.Millisecond
	instanceServeTime = 2 * time.Millisecond
)

// manager drives one member's singleton.ManagerState, as singleton.Manager
// does on the real node: views when the membership changes, requests over
// the network, timers as world events, and an instance whose start and
// stop take a while.
type manager struct {
	inc  *incarnation
	name string
	// newInstance starts an instance (its factory); nil: the ID
	// generator's.
	newInstance func(m *manager) (simInstance, error)
	cfg         singleton.Config
	st          *singleton.ManagerState
	seen        uint64 // the version of the last view stepped

	stateTimer, stopTimer sim.Event
	inst                  *instance
	started               int // instances started by this manager (their number in replies)
	pending               map[uint64]*sent
	nextID                uint64
	// shutDone, when set, is called once the instance has stopped after
	// a shutdown.
	shutDone func()
	// handedOver: the manager said it will not run the singleton (a
	// leave may finish).
	handedOver bool
}

// simInstance is a running instance as the simulated manager serves it:
// handle answers a request through reply, exactly once, now or later;
// stop ends whatever the instance does in the background.
type simInstance interface {
	handle(req singleton.Request, reply func(json.RawMessage, error))
	stop()
}

// idGenerator is the real ID generator over the node's journal, as an
// instance: its Handle answers at once (the journal does), and its reply
// names the instance that served it, as the real node's does.
type idGenerator struct {
	inst singleton.Instance
	host protocol.SingletonInstance
}

func (g idGenerator) handle(req singleton.Request, reply func(json.RawMessage, error)) {
	res, err := g.inst.Handle(context.Background(), req)
	if err == nil {
		res, err = hosted(res, g.host)
	}
	reply(res, err)
}

func (g idGenerator) stop() {}

// sent is a request waiting for its answer.
type sent struct {
	s        singleton.Send
	deadline sim.Event
}

// instance is a running (or starting, or stopping) instance: the real ID
// generator over the node's journal, served one request at a time as the
// real runner serves them.
type instance struct {
	num      int
	life     int // index in Cluster.lives
	live     bool
	stopping bool
	stopNow  bool
	end      sim.Event
	impl     simInstance
	host     protocol.SingletonInstance
	queue    []*instanceRequest
	busy     bool
	failed   error // why it ended on its own (InInstanceDone's Err)
}

// instanceRequest is a request queued for the instance.
type instanceRequest struct {
	req   singleton.Request
	reply func(json.RawMessage, error)
}

// newManager is the manager of singleton name on inc; newInstance nil:
// the ID generator.
func newManager(inc *incarnation, name string, newInstance func(m *manager) (simInstance, error)) (*manager, error) {
	c := inc.n.c
	cfg, err := singleton.Config{Name: name, RetryInterval: c.cfg.RetryInterval,
		DownRemovalMargin: c.cfg.DownRemovalMargin}.Normalized()
	if err != nil {
		return nil, err
	}
	return &manager{inc: inc, name: name, newInstance: newInstance, cfg: cfg, st: singleton.NewManagerState(cfg, nil),
		pending: map[uint64]*sent{}}, nil
}

// isIDGenerator: this manager runs the ID generator (whose lives the
// cluster records).
func (m *manager) isIDGenerator() bool { return m.newInstance == nil }

// viewChanged: the membership's view changed; the manager takes it in a
// step of its own, as the real one does when Changed fires.
func (m *manager) viewChanged() {
	// One pending view per manager while the process is paused (each
	// real manager's loop coalesces Changed on its own), not one for all.
	m.inc.after(0, "view:"+m.name, func() {
		snap := m.inc.m.Snapshot()
		if snap.Version > m.seen {
			m.seen = snap.Version
			m.step(singleton.InView{Snapshot: snap})
		}
	})
	// A running instance that watches the membership (the coordinator:
	// its loop wakes at Membership.Changed) takes the view in a step of
	// its own.
	if in := m.inst; in != nil && in.live {
		if w, ok := in.impl.(interface{ viewChanged() }); ok {
			w.viewChanged()
		}
	}
}

func (m *manager) step(in singleton.Input) {
	if m.inc.gone() {
		return
	}
	for _, e := range m.st.Step(m.inc.n.elapsed(), in) {
		m.apply(e)
	}
}

func (m *manager) apply(e singleton.Effect) {
	inc := m.inc
	n, c := inc.n, inc.n.c
	switch e := e.(type) {
	case singleton.Emit:
		n.emit(e.Event)
	case singleton.Send:
		m.send(e)
	case singleton.StartInstance:
		m.start(e.Num)
	case singleton.StopInstance:
		m.stopInstance(e.Now)
	case singleton.GiveUp:
		if m.inst != nil {
			m.finish(m.inst, e.Reason, nil)
		}
	case singleton.ArmStateTimer:
		m.stateTimer.Cancel()
		m.stateTimer = inc.after(e.After, "", func() { m.step(singleton.InStateTimer{}) })
	case singleton.CancelStateTimer:
		m.stateTimer.Cancel()
	case singleton.ArmStopTimer:
		m.stopTimer.Cancel()
		m.stopTimer = inc.after(e.After, "", func() { m.step(singleton.InStopTimer{}) })
	case singleton.CancelStopTimer:
		m.stopTimer.Cancel()
	case singleton.HandedOver:
		m.handedOver = true
		inc.checkLeave()
	case singleton.Reply:
		// Only a message's step replies; receive takes it.
	default:
		c.tracef("%s: singleton effect %T has no driver", n.Name, e)
	}
}

// start starts instance num: it counts as running from now (the manager
// cannot tell a starting instance from a running one); its factory, the
// real ID generator's, fences the journal after a while, and the instance
// logs its start and serves what was queued meanwhile.
func (m *manager) start(num int) {
	c := m.inc.n.c
	self := m.inc.m.Self()
	life := -1
	if m.isIDGenerator() {
		c.lives = append(c.lives, Life{Node: m.inc.n.Name, Member: self.UID(), Num: num, From: c.World.Now()})
		life = len(c.lives) - 1
	}
	m.started++
	in := &instance{num: num, life: life,
		host: protocol.SingletonInstance{Node: m.inc.n.Name, Incarnation: self.Incarnation, Instance: int64(m.started)}}
	m.inst = in
	m.inc.after(jitter(c, instanceStartTime), "", func() {
		if m.inst != in || in.stopNow {
			if m.inst == in {
				m.finish(in, "", nil) // abandoned before it started
			}
			return
		}
		var impl simInstance
		var err error
		if m.newInstance != nil {
			impl, err = m.newInstance(m)
		} else {
			factory := singleton.IDGeneratorWith(nodeJournal{c, m.inc.n.Name}, "singleton/"+SingletonName,
				singleton.IDGeneratorOptions{NoFencing: c.cfg.NoFencing})
			var inst singleton.Instance
			if inst, err = factory(context.Background()); err == nil {
				impl = idGenerator{inst: inst, host: in.host}
			}
		}
		if err != nil {
			m.failQueue("instance failed to start")
			m.inc.n.emit(protocol.Event{Type: protocol.EventSingletonFailed, Member: self.UID(), Singleton: m.name,
				Detail: fmt.Sprintf("instance %d failed to start: %v", num, err)})
			m.finish(in, "", fmt.Errorf("start: %w", err))
			return
		}
		in.impl, in.live = impl, true
		m.inc.n.emit(protocol.Event{Type: protocol.EventSingletonStarted, Member: self.UID(), Singleton: m.name,
			Detail: fmt.Sprintf("instance %d", num)})
		m.serveNext()
	})
}

// handle queues a request for the instance, as Manager.Handle does; reply
// gets its answer.
func (m *manager) handle(req singleton.Request, reply func(json.RawMessage, error)) {
	in := m.inst
	switch {
	case in == nil:
		reply(nil, fmt.Errorf("%w: singleton %s", singleton.ErrNotRunning, m.name))
		return
	case in.stopping && (in.stopNow || !in.busy && len(in.queue) == 0):
		reply(nil, fmt.Errorf("%w: instance is stopping", singleton.ErrNotRunning))
		return
	}
	in.queue = append(in.queue, &instanceRequest{req: req, reply: reply})
	m.serveNext()
}

// serveNext serves the next queued request after its serving time, one at
// a time; a stop after the queue comes once it is empty.
func (m *manager) serveNext() {
	in := m.inst
	if in == nil || !in.live || in.busy {
		return
	}
	if len(in.queue) == 0 {
		if in.stopping && !in.end.Pending() {
			m.scheduleEnd(in)
		}
		return
	}
	in.busy = true
	r := in.queue[0]
	in.queue = in.queue[1:]
	m.inc.after(jitter(m.inc.n.c, instanceServeTime), "", func() {
		if m.inst != in || !in.live {
			return // ended meanwhile: it failed the queue
		}
		answered := false
		in.impl.handle(r.req, func(res json.RawMessage, err error) {
			if answered {
				return
			}
			answered = true
			r.reply(res, err)
			if m.inst != in || m.inc.gone() {
				return
			}
			in.busy = false
			if singleton.InstanceFailed(err) {
				m.failQueue("instance failed before the request's turn")
				m.inc.n.emit(protocol.Event{Type: protocol.EventSingletonFailed, Member: m.inc.m.Self().UID(), Singleton: m.name,
					Detail: fmt.Sprintf("instance %d: %v", in.num, err)})
				in.stopping = true
				in.failed = err
				m.scheduleEnd(in)
				return
			}
			m.serveNext()
		})
	})
}

// hosted adds the instance that served it to a reply, as the real node
// does (impl/node decorate): {"id": N, "singleton": {...}}.
func hosted(res json.RawMessage, host protocol.SingletonInstance) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if json.Unmarshal(res, &fields) != nil || fields == nil {
		fields = map[string]json.RawMessage{"result": res}
	}
	hb, err := json.Marshal(host)
	if err != nil {
		return nil, err
	}
	fields["singleton"] = hb
	return json.Marshal(fields)
}

// failQueue fails the queued requests: none was served.
func (m *manager) failQueue(why string) {
	if in := m.inst; in != nil {
		q := in.queue
		in.queue = nil
		for _, r := range q {
			r.reply(nil, fmt.Errorf("%w: %s", singleton.ErrNotRunning, why))
		}
	}
}

// stopInstance asks the instance to stop: at once (the queued requests
// fail), or after the requests queued before the stop.
func (m *manager) stopInstance(now bool) {
	in := m.inst
	if in == nil || (in.stopping && (in.stopNow || !now)) {
		return
	}
	in.stopping, in.stopNow = true, now
	if now {
		m.failQueue("instance stopped before the request's turn")
	}
	if !in.live {
		return // the start sees the stop
	}
	if !in.busy && len(in.queue) == 0 && !in.end.Pending() {
		m.scheduleEnd(in)
	}
}

// scheduleEnd: the instance's Stop takes a while, then it has stopped.
func (m *manager) scheduleEnd(in *instance) {
	in.end = m.inc.after(jitter(m.inc.n.c, instanceStopTime), "", func() {
		m.finish(in, fmt.Sprintf("instance %d stopped", in.num), in.failed)
	})
}

// finish: the instance has stopped (or was given up on); failErr is why
// it ended on its own, if it did.
func (m *manager) finish(in *instance, detail string, failErr error) {
	if m.inst != in {
		return
	}
	in.end.Cancel()
	c := m.inc.n.c
	if in.life >= 0 {
		c.lives[in.life].Till = c.World.Now()
	}
	m.failQueue("instance stopped before the request's turn")
	m.inst = nil
	if in.impl != nil {
		in.impl.stop()
	}
	if in.live {
		m.inc.n.emit(protocol.Event{Type: protocol.EventSingletonStopped, Member: m.inc.m.Self().UID(),
			Singleton: m.name, Detail: detail})
	}
	m.step(singleton.InInstanceDone{Err: failErr})
	if m.inst == nil && m.shutDone != nil {
		done := m.shutDone
		m.shutDone = nil
		done()
	}
}

// shutdown stops the manager as the real node does when its member ends:
// the instance is stopped at once, and done is called once it has.
func (m *manager) shutdown(done func()) {
	m.shutDone = done
	m.step(singleton.InShutdown{})
	if m.inst == nil && m.shutDone != nil {
		m.shutDone = nil
		done()
	}
}

// stop: the process ends (killed, or its member replaced): an instance
// still running dies with it, silently.
func (m *manager) stop() {
	m.stateTimer.Cancel()
	m.stopTimer.Cancel()
	if in := m.inst; in != nil {
		c := m.inc.n.c
		in.end.Cancel()
		if in.life >= 0 {
			c.lives[in.life].Till = c.World.Now()
		}
		in.queue = nil // the process is gone: nobody answers
		m.inst = nil
		if in.impl != nil {
			in.impl.stop()
		}
	}
}

// send sends a request to the manager on member s.To; its answer, or the
// attempt's timeout, comes back as an InResult.
func (m *manager) send(s singleton.Send) {
	inc := m.inc
	c := inc.n.c
	ms, ok := inc.m.Find(s.To)
	if !ok || ms.GossipAddr == "" {
		c.tracef("%s: cannot send %s: member %s unknown", inc.n.Name, s.Op, s.To)
		return
	}
	m.nextID++
	id := m.nextID
	timeout := m.cfg.AttemptTimeout()
	p := &sent{s: s}
	p.deadline = inc.after(timeout, "", func() {
		if m.pending[id] == p {
			delete(m.pending, id)
			m.step(singleton.InResult{Gen: s.Gen, Op: s.Op, To: s.To, Err: errAttemptTimeout})
		}
	})
	m.pending[id] = p
	c.Net.SendReliable(inc.n.addr, ms.GossipAddr, managerMsg{name: m.name, op: s.Op, from: inc.m.Self().UID(), to: s.To, id: id}, timeout, nil)
}

var errAttemptTimeout = errors.New("singleton request: no answer before the attempt's timeout")

// receive serves another manager's request and answers it.
func (m *manager) receive(from string, msg managerMsg) {
	inc := m.inc
	c := inc.n.c
	reply := managerReply{name: m.name, id: msg.id}
	if msg.to != inc.m.Self().UID() {
		reply.err = "wrong member: this is " + inc.m.Self().UID()
	} else {
		for _, e := range m.st.Step(inc.n.elapsed(), singleton.InMessage{Op: msg.op, From: msg.from}) {
			if r, ok := e.(singleton.Reply); ok {
				// A refusal is an error answer, as the real node's 409.
				reply.said = r.Answer
				if r.Refused != "" {
					reply.err = "refused: " + r.Refused
				}
				continue
			}
			m.apply(e)
		}
	}
	c.Net.SendReliable(inc.n.addr, from, reply, m.cfg.AttemptTimeout(), nil)
}

// answered takes the answer to a request this manager sent.
func (m *manager) answered(r managerReply) {
	p := m.pending[r.id]
	if p == nil {
		return
	}
	delete(m.pending, r.id)
	p.deadline.Cancel()
	var err error
	if r.err != "" {
		err = errors.New(r.err)
	}
	m.step(singleton.InResult{Gen: p.s.Gen, Op: p.s.Op, To: p.s.To, Said: r.said, Err: err})
}

// Singleton reports whether an instance of the singleton exists on the
// node's member (starting, running or stopping, as the real manager's
// status counts it), and the running one's identity.
func (n *Node) Singleton() (running bool, instance *protocol.SingletonInstance) {
	if n.inc == nil || n.inc.manager(SingletonName).inst == nil {
		return false, nil
	}
	in := n.inc.manager(SingletonName).inst
	if in.live {
		h := in.host
		return true, &h
	}
	return true, nil
}

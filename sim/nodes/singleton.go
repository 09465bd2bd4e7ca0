package nodes

import (
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
		op, from, to string
		id           uint64
	}
	// managerReply answers it: Said is the state the receiver answered,
	// err why it did not.
	managerReply struct {
		id   uint64
		said string
		err  string
	}
)

// Instance timing: how long the factory takes (fencing the journal) and
// how long a stop takes, each drawn from the seed up to these.
const (
	instanceStartTime = 20 * time.Millisecond
	instanceStopTime  = 20 * time.Millisecond
	// instanceDrainTime: a stop after the queued requests waits for them.
	instanceDrainTime = 100 * time.Millisecond
)

// manager drives one member's singleton.ManagerState, as singleton.Manager
// does on the real node: views when the membership changes, requests over
// the network, timers as world events, and an instance whose start and
// stop take a while.
type manager struct {
	inc  *incarnation
	cfg  singleton.Config
	st   *singleton.ManagerState
	seen uint64 // the version of the last view stepped

	stateTimer, stopTimer sim.Event
	inst                  *instance
	numbered              int // instances started by this manager (for their events)
	pending               map[uint64]*sent
	nextID                uint64
	// shutDone, when set, is called once the instance has stopped after
	// a shutdown.
	shutDone func()
}

// sent is a request waiting for its answer.
type sent struct {
	s        singleton.Send
	deadline sim.Event
}

// instance is a running (or starting, or stopping) instance.
type instance struct {
	num      int
	life     int // index in Cluster.lives
	live     bool
	stopping bool
	end      sim.Event
}

func newManager(inc *incarnation) (*manager, error) {
	c := inc.n.c
	cfg, err := singleton.Config{Name: SingletonName, RetryInterval: c.cfg.RetryInterval,
		DownRemovalMargin: c.cfg.DownRemovalMargin}.Normalized()
	if err != nil {
		return nil, err
	}
	return &manager{inc: inc, cfg: cfg, st: singleton.NewManagerState(cfg, nil), pending: map[uint64]*sent{}}, nil
}

// viewChanged: the membership's view changed; the manager takes it in a
// step of its own, as the real one does when Changed fires.
func (m *manager) viewChanged() {
	m.inc.after(0, "view", func() {
		snap := m.inc.m.Snapshot()
		if snap.Version > m.seen {
			m.seen = snap.Version
			m.step(singleton.InView{Snapshot: snap})
		}
	})
}

func (m *manager) step(in singleton.Input) {
	if m.inc.gone() {
		return
	}
	for _, e := range m.st.Step(m.inc.n.c.World.Now(), in) {
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
			m.finish(m.inst, "instance "+fmt.Sprint(m.inst.num)+" given up: "+e.Reason)
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
		inc.handedOver = true
		inc.checkLeave()
	case singleton.Reply:
		// Only a message's step replies; receive takes it.
	default:
		c.tracef("%s: singleton effect %T has no driver", n.Name, e)
	}
}

// start starts instance num: it counts as running from now (the manager
// cannot tell a starting instance from a running one), and logs its start
// once its factory has run.
func (m *manager) start(num int) {
	c := m.inc.n.c
	self := m.inc.m.Self()
	c.lives = append(c.lives, Life{Node: m.inc.n.Name, Member: self.UID(), Num: num, From: c.World.Now()})
	in := &instance{num: num, life: len(c.lives) - 1}
	m.inst = in
	m.inc.after(jitter(c, instanceStartTime), "", func() {
		if m.inst != in || in.stopping {
			return
		}
		in.live = true
		m.inc.n.emit(protocol.Event{Type: protocol.EventSingletonStarted, Member: self.UID(), Singleton: SingletonName,
			Detail: fmt.Sprintf("instance %d", num)})
	})
}

// stopInstance asks the instance to stop: at once, or after the requests
// queued before the stop.
func (m *manager) stopInstance(now bool) {
	in := m.inst
	if in == nil || in.stopping {
		return
	}
	in.stopping = true
	c := m.inc.n.c
	d := jitter(c, instanceStopTime)
	if !now {
		d += jitter(c, instanceDrainTime)
	}
	in.end = m.inc.after(d, "", func() { m.finish(in, fmt.Sprintf("instance %d stopped", in.num)) })
}

// finish: the instance has stopped (or was given up on).
func (m *manager) finish(in *instance, detail string) {
	if m.inst != in {
		return
	}
	in.end.Cancel()
	c := m.inc.n.c
	c.lives[in.life].Till = c.World.Now()
	m.inst = nil
	if in.live {
		m.inc.n.emit(protocol.Event{Type: protocol.EventSingletonStopped, Member: m.inc.m.Self().UID(),
			Singleton: SingletonName, Detail: detail})
	}
	m.step(singleton.InInstanceDone{})
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
		c.lives[in.life].Till = c.World.Now()
		m.inst = nil
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
	c.Net.SendReliable(inc.n.addr, ms.GossipAddr, managerMsg{op: s.Op, from: inc.m.Self().UID(), to: s.To, id: id}, timeout, nil)
}

var errAttemptTimeout = errors.New("singleton request: no answer before the attempt's timeout")

// receive serves another manager's request and answers it.
func (m *manager) receive(from string, msg managerMsg) {
	inc := m.inc
	c := inc.n.c
	reply := managerReply{id: msg.id}
	if msg.to != inc.m.Self().UID() {
		reply.err = "wrong member: this is " + inc.m.Self().UID()
	} else {
		for _, e := range m.st.Step(c.World.Now(), singleton.InMessage{Op: msg.op, From: msg.from}) {
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

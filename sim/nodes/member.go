package nodes

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/sim"
)

// The transport's timing, as memberlist's LAN configuration has it.
const (
	// streamTimeout bounds a push or a push/pull exchange over a stream
	// (memberlist's TCPTimeout).
	streamTimeout = 10 * time.Second
	// transportDeadAfter: a member not heard from for this long has left
	// the transport's member list (memberlist's probes and suspicion), and
	// the rejoin loop will exchange with it again.
	transportDeadAfter = 5 * time.Second
	// transportLeaveTime: how long telling the others of a leave takes.
	transportLeaveTime = 10 * time.Millisecond
)

// The messages between members on the simulated network.
type (
	// datagram is a heartbeat or a down notice (Send).
	datagram struct{ msg []byte }
	// push is a state push (SendReliable); delivered tells the sender's
	// driver that the push is done.
	push struct {
		msg       []byte
		delivered func()
	}
	// exchangeReq is the first half of a push/pull exchange: the sender's
	// state and the metas of the members its transport knows.
	exchangeReq struct {
		state []byte
		metas map[string][]byte
		reply func(exchangeResp)
	}
	// exchangeResp is the answer: the receiver's state as it was before it
	// merged the request's.
	exchangeResp struct {
		state []byte
		metas map[string][]byte
	}
)

// incarnation is one member of a node: the membership machine, its
// driver's state, and the singleton manager running beside it.
type incarnation struct {
	n       *Node
	process int
	m       *cluster.MembershipState
	// mgrs and proxies: the singletons' managers and proxies (the ID
	// generator's, then each entity type's coordinator's); regions: each
	// entity type's region.
	mgrs    []*manager
	proxies []*proxy
	regions []*region
	// heard: when something last arrived from each address (the
	// transport's member list); metas: what each one's Meta gave.
	heard   map[string]time.Duration
	metas   map[string][]byte
	pushing map[string]bool
	bound   bool
	ticking bool
	stopped bool
	// leaving: Leave was asked (the regions hand their shards off, then
	// the member becomes Leaving); shardsOff: the regions are done.
	leaving, shardsOff bool
	leaveTimer         sim.Event
	// answers: per address, the exchanges waiting for its answer, oldest
	// first.
	answers map[string][]*pendingAnswer
	// regionCalls: the region protocol requests waiting for an answer.
	regionCalls map[uint64]func(regionRes)
	regionID    uint64
	// tells: the fire-and-forget messages queued per sender.
	tells map[string][]tell
}

// pendingAnswer is an exchange waiting for its answer (done: answered or
// given up).
type pendingAnswer struct {
	done bool
	take func(exchangeResp)
}

// gone reports whether this incarnation no longer runs (its process was
// killed, or a newer incarnation replaced it).
func (inc *incarnation) gone() bool {
	return inc.stopped || inc.n.inc != inc || inc.n.process != inc.process
}

// after schedules f d from now on this incarnation (kind: see Node.run).
//
// d is of the node's clock (drift makes it longer or shorter in virtual
// time), as every timer of the real node is.
func (inc *incarnation) after(d time.Duration, kind string, f func()) sim.Event {
	return inc.n.c.World.After(inc.n.clock.Real(d), func() {
		if inc.gone() {
			return
		}
		inc.n.run(kind, func() {
			if !inc.gone() {
				f()
			}
		})
	})
}

// stop ends the incarnation: its timers and messages find it gone.
func (inc *incarnation) stop() {
	if inc.stopped {
		return
	}
	inc.stopped = true
	for _, m := range inc.mgrs {
		m.stop()
	}
}

// manager is the manager of singleton name (nil if none).
func (inc *incarnation) manager(name string) *manager {
	for _, m := range inc.mgrs {
		if m.name == name {
			return m
		}
	}
	return nil
}

// proxyOf is the proxy of singleton name (nil if none).
func (inc *incarnation) proxyOf(name string) *proxy {
	for _, p := range inc.proxies {
		if p.name == name {
			return p
		}
	}
	return nil
}

// regionOf is the region of entity type typ (nil if none).
func (inc *incarnation) regionOf(typ string) *region {
	for _, r := range inc.regions {
		if r.s.TypeName == typ {
			return r
		}
	}
	return nil
}

// handedOver: every manager said it will not run its singleton.
func (inc *incarnation) handedOver() bool {
	for _, m := range inc.mgrs {
		if !m.handedOver {
			return false
		}
	}
	return true
}

// shutdown ends the member's sharding and singletons as the real node does
// when its member ends (downed or left): every region stops its entities
// at once, every manager stops its instance; done runs once all have.
func (inc *incarnation) shutdown(done func()) {
	left := len(inc.mgrs) + len(inc.regions)
	one := func() {
		left--
		if left == 0 {
			done()
		}
	}
	if left == 0 {
		done()
		return
	}
	for _, r := range inc.regions {
		r.stop(one)
	}
	for _, m := range inc.mgrs {
		m.shutdown(one)
	}
}

// step steps the membership machine at the node clock's time and carries out
// its effects; it returns the error of a Rejected effect.
func (inc *incarnation) step(in cluster.Input) error {
	if inc.gone() {
		return nil
	}
	var rejected error
	for _, e := range inc.m.Step(inc.n.elapsed(), in) {
		if r, ok := e.(cluster.Rejected); ok {
			rejected = r.Err
		}
		inc.apply(e)
		if inc.gone() {
			return rejected
		}
	}
	if !inc.ticking && inc.m.Joined() {
		inc.ticking = true
		inc.startTicks()
	}
	return rejected
}

func (inc *incarnation) apply(e cluster.Effect) {
	n, c := inc.n, inc.n.c
	switch e := e.(type) {
	case cluster.Emit:
		n.emit(e.Event)
	case cluster.Log:
		c.logRecord(n.Name, e)
	case cluster.ViewChanged:
		for _, m := range inc.mgrs {
			m.viewChanged()
		}
		inc.after(0, "proxy-view", func() {
			for _, p := range inc.proxies {
				p.step(nil)
			}
		})
		for _, r := range inc.regions {
			r.viewChanged()
		}
		inc.checkLeave()
	case cluster.SelfDowned:
		inc.downed()
	case cluster.LeftCluster:
		inc.left()
	case cluster.Rejected:
		c.tracef("%s refused: %v", n.Name, e.Err)
	case cluster.AllocateUpNumber:
		inc.after(e.After, "", func() { inc.allocate(e.Payload) })
	case cluster.JoinSeeds:
		inc.join(e.Addrs)
	case cluster.RetryJoin:
		inc.after(e.After, "", func() { inc.step(cluster.InJoinTick{}) })
	case cluster.Rejoin:
		for _, a := range e.Addrs {
			inc.exchange(a, func(bool) {})
		}
	case cluster.SendDatagram:
		c.Net.Send(n.addr, e.To, datagram{msg: e.Msg})
	case cluster.PushState:
		inc.push(e.To, e.Msg)
	case cluster.AwaitPushes:
		// The pushes are on the network already: they arrive whether or
		// not this process goes on.
	case cluster.LeaveTransport:
		inc.after(transportLeaveTime, "", func() { inc.step(cluster.InTransportLeft{}) })
	}
}

// allocate appends the up-number allocation to the journal, as the real
// driver does, unless the journal is cut off from this node.
func (inc *incarnation) allocate(payload []byte) {
	c := inc.n.c
	// The simulation has no deadlines: a cut journal fails at once.
	seq, err := nodeJournal{c, inc.n.Name}.Append(context.Background(), cluster.UpNumbersID, journal.AnySeq, journal.NoEpoch, [][]byte{payload})
	inc.step(cluster.InUpNumber{UpNumber: seq, Err: err})
	if !inc.bound && inc.m.Self().UpNumber > 0 && !inc.gone() {
		inc.bind()
	}
}

// bind binds the transport and starts joining.
func (inc *incarnation) bind() {
	n := inc.n
	inc.bound = true
	inc.metas = map[string][]byte{}
	inc.step(cluster.InBound{Addr: n.addr})
	n.c.Net.Listen(n.addr, func(from string, msg any) {
		n.run(kindGossip, func() {
			if cur := n.inc; cur != nil && cur.bound {
				cur.receive(from, msg)
			}
		})
	})
	inc.step(cluster.InJoinTick{})
}

// startTicks starts the heartbeat and rejoin tickers, each at a phase of
// its own drawn from the seed (the real nodes' tickers start whenever
// their processes did).
func (inc *incarnation) startTicks() {
	c := inc.n.c
	var tick, rejoin func()
	tick = func() {
		inc.after(c.cfg.HeartbeatInterval, "tick", tick)
		inc.step(cluster.InTick{})
	}
	rejoin = func() {
		inc.after(c.cfg.RejoinInterval, "rejoin", rejoin)
		inc.step(cluster.InRejoinTick{Alive: inc.alive()})
	}
	inc.after(jitter(c, c.cfg.HeartbeatInterval), "tick", tick)
	inc.after(jitter(c, c.cfg.RejoinInterval), "rejoin", rejoin)
}

func jitter(c *Cluster, d time.Duration) time.Duration {
	return time.Duration(c.World.Rand().Int64N(int64(d) + 1))
}

// alive is the transport's member list: the addresses heard from lately.
func (inc *incarnation) alive() []string {
	now := inc.n.c.World.Now()
	var out []string
	for _, a := range slices.Sorted(maps.Keys(inc.heard)) {
		if now-inc.heard[a] < transportDeadAfter {
			out = append(out, a)
		}
	}
	return out
}

// knownMetas are the metas of the members the transport lists (and this
// member's own), for an exchange.
func (inc *incarnation) knownMetas() map[string][]byte {
	out := map[string][]byte{inc.n.addr: inc.m.Meta()}
	for _, a := range inc.alive() {
		if meta, ok := inc.metas[a]; ok {
			out[a] = meta
		}
	}
	return out
}

// met steps the metas an exchange gave, in address order.
func (inc *incarnation) met(metas map[string][]byte) {
	for _, a := range slices.Sorted(maps.Keys(metas)) {
		if a == inc.n.addr {
			continue
		}
		inc.metas[a] = metas[a]
		inc.step(cluster.InMet{Meta: metas[a]})
	}
}

// join exchanges state with every seed, then steps the outcome: how many
// answered, once all have or the stream timeout has passed.
func (inc *incarnation) join(addrs []string) {
	answered, waiting := 0, len(addrs)
	done := false
	finish := func() {
		if !done {
			done = true
			inc.step(cluster.InJoinResult{Answered: answered})
		}
	}
	deadline := inc.after(streamTimeout, "", finish)
	for _, a := range addrs {
		inc.exchange(a, func(ok bool) {
			if ok {
				answered++
			}
			if waiting--; waiting == 0 {
				deadline.Cancel()
				finish()
			}
		})
	}
}

// exchange is a push/pull with addr (memberlist's join): this member's
// state goes there, is merged after the answer (that member's state as it
// was) has been taken, and the answer is merged here. result tells whether
// it was answered.
func (inc *incarnation) exchange(addr string, result func(ok bool)) {
	n, c := inc.n, inc.n.c
	wait := &pendingAnswer{}
	req := exchangeReq{state: inc.m.LocalState(true), metas: inc.knownMetas(), reply: func(r exchangeResp) {
		c.Net.SendReliable(addr, n.addr, r, streamTimeout, nil)
	}}
	fail := func(error) {
		if !wait.done && !inc.gone() {
			wait.done = true
			result(false)
		}
	}
	// The answer comes back on the same stream (receive hands it over).
	wait.take = func(r exchangeResp) {
		wait.done = true
		inc.met(r.metas)
		inc.step(cluster.InRemoteState{State: r.state, Join: true})
		result(true)
	}
	if inc.answers == nil {
		inc.answers = map[string][]*pendingAnswer{}
	}
	inc.answers[addr] = append(inc.answers[addr], wait)
	c.Net.SendReliable(n.addr, addr, req, streamTimeout, fail)
	inc.after(streamTimeout, "", func() { fail(nil) })
}

// push sends the full state to addr, at most one push in flight per
// address, as the real driver does.
func (inc *incarnation) push(addr string, msg []byte) {
	if inc.pushing[addr] {
		return
	}
	inc.pushing[addr] = true
	done := func() { delete(inc.pushing, addr) }
	inc.n.c.Net.SendReliable(inc.n.addr, addr, push{msg: msg, delivered: done}, streamTimeout, func(error) { done() })
}

// receive takes what arrived at the node's address.
func (inc *incarnation) receive(from string, msg any) {
	inc.heard[from] = inc.n.c.World.Now()
	switch msg := msg.(type) {
	case datagram:
		inc.step(cluster.InReceived{Msg: msg.msg})
	case push:
		msg.delivered()
		inc.step(cluster.InReceived{Msg: msg.msg})
	case exchangeReq:
		answer := exchangeResp{state: inc.m.LocalState(true), metas: inc.knownMetas()}
		inc.met(msg.metas)
		inc.step(cluster.InRemoteState{State: msg.state, Join: true})
		msg.reply(answer)
	case exchangeResp:
		waiting := inc.answers[from]
		for len(waiting) > 0 && waiting[0].done {
			waiting = waiting[1:]
		}
		if len(waiting) > 0 {
			w := waiting[0]
			waiting = waiting[1:]
			w.take(msg)
		}
		inc.answers[from] = waiting
	case managerMsg:
		if m := inc.manager(msg.name); m != nil {
			m.receive(from, msg)
		}
	case managerReply:
		if m := inc.manager(msg.name); m != nil {
			m.answered(msg)
		}
	case singletonReq:
		if p := inc.proxyOf(msg.name); p != nil {
			p.serveRemote(from, msg)
		}
	case singletonRes:
		if p := inc.proxyOf(msg.name); p != nil {
			p.answered(msg)
		}
	case regionReq:
		inc.serveRegion(from, msg)
	case regionRes:
		inc.regionAnswered(msg)
	}
}

// downed: this member was downed. As the real node does, it tells whoever
// still listens, stops its singleton at once, and starts a new member in
// the same process after the restart delay, joining only, with this
// member's last view.
func (inc *incarnation) downed() {
	n, c := inc.n, inc.n.c
	c.tracef("%s downed; restarting in %v", n.Name, c.cfg.RestartDelay)
	inc.step(cluster.InFarewell{})
	inc.shutdown(func() {
		snap := inc.m.Snapshot()
		inc.stop()
		c.Net.Close(n.addr)
		c.World.After(c.cfg.RestartDelay, func() {
			if n.inc != inc || n.process != inc.process {
				return
			}
			n.run("", func() {
				if n.inc != inc {
					return
				}
				n.restarted, n.prev = true, &snap
				n.startIncarnation()
			})
		})
	})
}

// beginLeave starts a graceful leave as the real node does: the regions
// hand their shards off while the member is still Up, then it becomes
// Leaving, its managers hand their singletons over, and it finishes
// leaving — or does after the leave timeout, whatever is not done.
func (inc *incarnation) beginLeave() {
	if inc.leaving || inc.gone() {
		return
	}
	inc.leaving = true
	inc.leaveTimer = inc.after(inc.n.c.cfg.LeaveTimeout, "", func() {
		if !inc.shardsOff {
			inc.shardsHandedOff()
			return
		}
		inc.finishLeave()
	})
	left := len(inc.regions)
	if left == 0 {
		inc.shardsHandedOff()
		return
	}
	for _, r := range inc.regions {
		r.leave(func() {
			left--
			if left == 0 {
				inc.shardsHandedOff()
			}
		})
	}
}

// shardsHandedOff: the regions are done (or the leave timed out); the
// member becomes Leaving.
func (inc *incarnation) shardsHandedOff() {
	if inc.shardsOff || inc.gone() {
		return
	}
	inc.shardsOff = true
	for _, r := range inc.regions {
		r.stopLeaving()
	}
	if err := inc.step(cluster.InBeginLeave{}); err != nil {
		// Refused (not joined yet, or down), as the real node's Leave is.
		inc.leaving, inc.shardsOff = false, false
		inc.leaveTimer.Cancel()
		return
	}
	if !inc.leaveTimer.Pending() {
		inc.finishLeave()
		return
	}
	inc.checkLeave()
}

// checkLeave finishes a leave once the managers have handed over.
func (inc *incarnation) checkLeave() {
	if inc.leaving && inc.shardsOff && inc.handedOver() && inc.leaveTimer.Pending() {
		inc.leaveTimer.Cancel()
		inc.finishLeave()
	}
}

func (inc *incarnation) finishLeave() { _ = inc.step(cluster.InFinishLeave{}) }

// left: the member has left; the process ends.
func (inc *incarnation) left() {
	n, c := inc.n, inc.n.c
	c.tracef("%s left", n.Name)
	inc.shutdown(func() {
		inc.stop()
		if n.inc == inc {
			n.inc = nil
			c.Net.Close(n.addr)
		}
	})
}

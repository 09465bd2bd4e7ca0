package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/sim"
)

// coordinator is a ShardCoordinator instance in the simulation: the real
// sharding.CoordinatorMachine, recovered from the node's journal as the
// real one is, driven over the simulated journal (answering at once, a
// step later), the region protocol on the network, and virtual timers.
// Requests are served one at a time by the manager (its mailbox); each is
// answered when the machine says, or unknown after the ask timeout, as
// the real instance's Handle gives up with its caller's context.
type coordinator struct {
	m       *manager
	s       sharding.Settings
	pid     string
	cm      *sharding.CoordinatorMachine
	answers map[uint64]func(json.RawMessage, error)
	last    uint64
	seen    uint64 // the view version last stepped
	stopped bool
}

// newCoordinator starts the coordinator of s.TypeName for manager m.
func newCoordinator(m *manager, s sharding.Settings) (simInstance, error) {
	inc := m.inc
	c := inc.n.c
	j := nodeJournal{c, inc.n.Name}
	st, epoch, seq, err := sharding.RecoverCoordinator(context.Background(), j, s.TypeName)
	if err != nil {
		return nil, err
	}
	self := inc.m.Self().UID()
	co := &coordinator{m: m, s: s, pid: sharding.CoordinatorPID(s.TypeName), answers: map[uint64]func(json.RawMessage, error){}}
	co.cm = sharding.NewCoordinatorMachine(sharding.CoordinatorConfig{Settings: s, Self: self},
		sharding.NewLeastShardAllocation(s.RebalanceThreshold, s.MaxSimultaneousRebalance), st, epoch, seq, nil)
	inc.n.emit(protocol.Event{Type: protocol.EventCoordinatorStarted, Member: self, EntityType: s.TypeName,
		Detail: fmt.Sprintf("epoch %d, %d events, %d regions, %d proxies, %d shards", epoch, seq, len(st.Regions), len(st.Proxies), len(st.Shards))})
	co.view()
	co.tick(s.RebalanceInterval, "rebalance", func() { co.step(sharding.CoRebalanceTick{}) })
	co.tick(max(s.RetryInterval, 10*time.Millisecond), "watch", func() {
		// Look again at the members that are gone (their margin may
		// have passed), as the real loop does at every tick.
		co.view()
		co.step(sharding.CoWatchTick{})
	})
	return co, nil
}

func (co *coordinator) gone() bool { return co.stopped || co.m.inc.gone() }

// tick runs f every d while the instance lives (the real loop's tickers).
func (co *coordinator) tick(d time.Duration, kind string, f func()) {
	co.m.inc.after(d, kind+"-"+co.s.TypeName, func() {
		if co.gone() {
			return
		}
		f()
		co.tick(d, kind, f)
	})
}

// viewChanged: the membership changed. The real coordinator's loop wakes
// at once (Membership.Changed) and steps the new view, so that a region
// registering as soon as it sees the coordinator is known to it; looking
// only at the watch tick (RetryInterval) refused such registrations with
// "not known to the coordinator yet", and the regions came back a retry
// interval later.
func (co *coordinator) viewChanged() {
	co.m.inc.after(0, "coordinator-view:"+co.s.TypeName, func() {
		if !co.gone() {
			co.view()
		}
	})
}

// view steps the membership's view (the real loop does at every wake).
func (co *coordinator) view() {
	snap := co.m.inc.m.Snapshot()
	if snap.Version != co.seen {
		co.seen = snap.Version
		co.step(sharding.CoView{Snapshot: snap})
	}
}

func (co *coordinator) step(in sharding.CoInput) {
	if co.gone() {
		return
	}
	for _, eff := range co.cm.Step(co.m.inc.n.elapsed(), in) {
		co.apply(eff)
	}
}

// after runs f d from now while the instance lives.
func (co *coordinator) after(d time.Duration, f func()) sim.Event {
	return co.m.inc.after(d, "", func() {
		if !co.gone() {
			f()
		}
	})
}

func (co *coordinator) apply(eff sharding.CoEffect) {
	inc := co.m.inc
	c := inc.n.c
	j := nodeJournal{c, inc.n.Name}
	switch e := eff.(type) {
	case sharding.CoAnswer:
		if reply := co.answers[e.ID]; reply != nil {
			delete(co.answers, e.ID)
			if e.Err != nil {
				reply(nil, e.Err)
				return
			}
			b, err := json.Marshal(e.Reply)
			reply(b, err)
		}
	case sharding.CoEmit:
		inc.n.emit(e.Event)
	case sharding.CoAppend:
		co.after(jitter(c, instanceServeTime), func() {
			data, err := sharding.EncodeEvents(e.Events)
			if err != nil {
				co.step(sharding.CoAppended{Tag: e.Tag, Err: fmt.Errorf("%w: encode events: %w", journal.ErrInvalid, err)})
				return
			}
			last, err := j.Append(context.Background(), co.pid, e.ExpectSeq, e.Epoch, data)
			co.step(sharding.CoAppended{Tag: e.Tag, Last: last, Err: err})
		})
	case sharding.CoCheckHighest:
		co.after(jitter(c, instanceServeTime), func() {
			h, err := j.Highest(context.Background(), co.pid)
			co.step(sharding.CoHighestIs{Tag: e.Tag, Highest: h, Err: err})
		})
	case sharding.CoCall:
		ms, ok := inc.m.Find(e.Region)
		if !ok || ms.Status.Final() {
			co.after(0, func() { co.step(sharding.CoCalled{Tag: e.Tag, Err: fmt.Errorf("member %s is gone", e.Region)}) })
			return
		}
		timeout := min(e.Timeout, co.askTimeout())
		inc.callRegion(ms, regionReq{typ: co.s.TypeName, op: e.Op, shard: e.Shard}, timeout, func(res regionRes, sent bool) {
			var err error
			switch {
			case !sent:
				err = fmt.Errorf("region %s: connection refused", e.Region)
			case res.id == 0:
				err = fmt.Errorf("region %s: no answer within %v", e.Region, timeout)
			case res.body != nil:
				err = fmt.Errorf("region %s answered %s: %s", e.Region, res.body.Code, res.body.Error)
			}
			co.step(sharding.CoCalled{Tag: e.Tag, Err: err})
		})
	case sharding.CoArm:
		co.after(e.After, func() { co.step(sharding.CoTimer{Tag: e.Tag}) })
	default:
		panic(fmt.Sprintf("sim: coordinator effect %T not carried out", eff))
	}
}

func (co *coordinator) askTimeout() time.Duration {
	return max(10*co.s.RetryInterval, 2*max(4*co.s.RetryInterval, 500*time.Millisecond))
}

// handle implements simInstance: the request goes to the machine; the
// answer comes when the machine gives it, or unknown after the ask
// timeout.
func (co *coordinator) handle(req singleton.Request, reply func(json.RawMessage, error)) {
	co.last++
	id := co.last
	co.answers[id] = reply
	co.after(co.askTimeout(), func() {
		if r := co.answers[id]; r != nil {
			delete(co.answers, id)
			r(nil, fmt.Errorf("%w: sharding coordinator %s: %s: %w", singleton.ErrUnknownOutcome, co.s.TypeName, req.Op, context.DeadlineExceeded))
		}
	})
	co.step(sharding.CoRequest{ID: id, Op: req.Op, Payload: req.Payload})
}

// stop implements simInstance.
func (co *coordinator) stop() {
	if co.stopped {
		return
	}
	co.cm.Step(co.m.inc.n.elapsed(), sharding.CoStop{})
	co.stopped = true
	if !co.m.inc.gone() {
		co.m.inc.n.emit(protocol.Event{Type: protocol.EventCoordinatorStopped, Member: co.m.inc.m.Self().UID(), EntityType: co.s.TypeName,
			Detail: fmt.Sprintf("epoch %d", co.cm.Epoch())})
	}
}

// simClock is the node's clock as an entity's clock. An entity's code
// never waits in the simulation (the journal answers at once), so its
// timers never fire: the only one it arms (retrying an append during a
// journal cut) is cut short by the call's context (see entityJournal).
type simClock struct{ n *Node }

func (k simClock) Now() time.Time                  { return k.n.clock.Now() }
func (k simClock) Since(t time.Time) time.Duration { return k.Now().Sub(t) }
func (k simClock) Elapsed() time.Duration          { return k.n.elapsed() }
func (simClock) NewTimer(time.Duration) clock.Timer {
	return idleTimer{}
}
func (simClock) NewTicker(time.Duration) clock.Ticker { return idleTicker{} }

// Sleep refuses at once: nothing in the simulation may block.
func (simClock) Sleep(context.Context, time.Duration) error {
	return errors.New("sim: an entity cannot sleep in the simulation")
}

// idleTimer never fires.
type idleTimer struct{}

func (idleTimer) C() <-chan time.Time      { return nil }
func (idleTimer) Stop() bool               { return true }
func (idleTimer) Reset(time.Duration) bool { return true }

// idleTicker never ticks.
type idleTicker struct{}

func (idleTicker) C() <-chan time.Time { return nil }
func (idleTicker) Stop()               {}
func (idleTicker) Reset(time.Duration) {}

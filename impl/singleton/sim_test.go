package singleton

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/sim"
)

// TestHandOverInSimulation drives three members' ManagerStates in a
// deterministic simulation (sim: one seeded scheduler, virtual time, a
// network that delays, reorders and loses messages), each seed a different
// interleaving of views, messages and instance starts and stops, and checks
// that no two instances ever live at once and that, in the end, exactly one
// does, on the member that should run it. A failing seed replays exactly.
func TestHandOverInSimulation(t *testing.T) {
	for _, sc := range []struct {
		name string
		run  func(h *simHarness)
		want string // the member running it in the end
	}{
		{"the oldest leaves", func(h *simHarness) {
			h.w.At(5*time.Second, func() { h.leave("n1") })
		}, "n2"},
		{"the oldest is cut off and downed", func(h *simHarness) {
			h.w.At(5*time.Second, func() { h.down("n1") })
		}, "n2"},
		{"the two oldest leave together", func(h *simHarness) {
			h.w.At(5*time.Second, func() { h.leave("n1") })
			h.w.At(5*time.Second+h.jitter(time.Second), func() { h.leave("n2") })
		}, "n3"},
	} {
		t.Run(sc.name, func(t *testing.T) {
			for seed := range uint64(2000) {
				h := newSimHarness(seed)
				sc.run(h)
				h.w.RunUntil(60 * time.Second)
				if err := h.verdict(sc.want); err != nil {
					t.Fatalf("seed %d: %v\n%s", seed, err, strings.Join(h.trace, "\n"))
				}
			}
		})
	}
}

// simHarness is three members on a simulated network, whose views of the
// cluster the scenario changes, each member learning of a change after its
// own random delay.
type simHarness struct {
	w       *sim.World
	net     *sim.Network
	members map[string]*simMember
	names   []string
	status  map[string]cluster.Status // the cluster's truth
	cut     map[string]bool
	version uint64
	lives   []simLife
	trace   []string
	// pending: the requests in flight, by id, and what to do with their
	// answer.
	pending map[uint64]func(said string)
	nextID  uint64
}

// simLife is one instance's life: from StartInstance until it counts as
// stopped (InInstanceDone), the time the manager itself cannot tell apart
// from running.
type simLife struct {
	member     string
	num        int
	from, till time.Duration // till 0: still alive
}

func newSimHarness(seed uint64) *simHarness {
	w := sim.New(seed)
	h := &simHarness{
		w:       w,
		net:     sim.NewNetwork(w, sim.Link{Delay: time.Millisecond, Jitter: 20 * time.Millisecond, Loss: 0.2}),
		members: map[string]*simMember{},
		names:   []string{"n1", "n2", "n3"},
		status:  map[string]cluster.Status{},
		cut:     map[string]bool{},
		pending: map[uint64]func(string){},
	}
	cfg := Config{Name: "id-generator", RetryInterval: 500 * time.Millisecond, DownRemovalMargin: 2 * time.Second, StopTimeout: 5 * time.Second}
	if err := cfg.normalize(); err != nil {
		panic(err)
	}
	for _, n := range h.names {
		m := &simMember{h: h, name: n, uid: n + "@a", st: NewManagerState(cfg, nil), cfg: cfg, life: -1}
		h.members[n] = m
		h.status[n] = cluster.StatusUp
		h.net.Listen(m.uid, m.receive)
	}
	// Every member sees the three of them up, each at its own moment.
	h.publish(0)
	return h
}

func (h *simHarness) jitter(d time.Duration) time.Duration {
	return time.Duration(h.w.Rand().Int64N(int64(d)))
}

func (h *simHarness) logf(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf("%8v ", h.w.Now())+fmt.Sprintf(format, args...))
}

// publish lets every member not cut off learn the cluster's state, each
// after a random delay of up to spread; a member cut off learns only what
// concerns itself (a down notice reaches it: the downing's one-way path).
func (h *simHarness) publish(spread time.Duration) {
	h.version++
	snapFor := func(self string) cluster.Snapshot {
		s := cluster.Snapshot{Version: h.version}
		for i, n := range h.names {
			ms := cluster.MemberState{Member: cluster.Member{Name: n, Incarnation: "a", UpNumber: int64(i + 1)}, Status: h.status[n], Reachable: true}
			if ms.Status.Final() {
				s.Gone = append(s.Gone, ms)
			} else {
				s.Members = append(s.Members, ms)
			}
			if n == self {
				s.Self = ms
			}
		}
		return s
	}
	for _, n := range h.names {
		if h.cut[n] && !h.status[n].Final() {
			continue
		}
		snap := snapFor(n)
		m := h.members[n]
		h.w.After(h.jitter(max(spread, time.Millisecond)), func() {
			if snap.Version > m.seen {
				m.seen = snap.Version
				m.step(InView{Snapshot: snap})
			}
		})
	}
}

func (h *simHarness) leave(n string) {
	h.logf("%s leaves", n)
	h.status[n] = cluster.StatusLeaving
	h.publish(time.Second)
}

// down cuts n off both ways and has the others down it; n learns that it
// was downed within a second of them (its side's resolver decides at the
// same stable-after), well inside DownRemovalMargin.
func (h *simHarness) down(n string) {
	h.logf("%s cut off and downed", n)
	h.cut[n] = true
	for _, o := range h.names {
		if o != n {
			h.net.Cut(n+"@a", o+"@a")
			h.net.Cut(o+"@a", n+"@a")
		}
	}
	h.status[n] = cluster.StatusDown
	h.publish(time.Second)
}

// verdict: no two lives overlapped, and in the end exactly one instance
// lives, on want.
func (h *simHarness) verdict(want string) error {
	for i, a := range h.lives {
		for _, b := range h.lives[i+1:] {
			if a.member != b.member && overlaps(a, b) {
				return fmt.Errorf("two instances at once: %s#%d %v–%v and %s#%d %v–%v", a.member, a.num, a.from, till(a), b.member, b.num, b.from, till(b))
			}
		}
	}
	var alive []string
	for _, l := range h.lives {
		if l.till == 0 {
			alive = append(alive, l.member)
		}
	}
	if !slices.Equal(alive, []string{want}) {
		return fmt.Errorf("in the end instances live on %v, want on %s only", alive, want)
	}
	return nil
}

func till(l simLife) string {
	if l.till == 0 {
		return "end"
	}
	return l.till.String()
}

func overlaps(a, b simLife) bool {
	aEnd, bEnd := a.till, b.till
	if aEnd == 0 {
		aEnd = time.Duration(1 << 62)
	}
	if bEnd == 0 {
		bEnd = time.Duration(1 << 62)
	}
	return a.from < bEnd && b.from < aEnd
}

// simMember drives one ManagerState over the simulation: the effects
// become network messages, scheduled timers and an instance that takes a
// little while to start and to stop.
type simMember struct {
	h          *simHarness
	name, uid  string
	cfg        Config
	st         *ManagerState
	seen       uint64 // the last view version given
	stateTimer sim.Event
	stopTimer  sim.Event
	life       int       // index in h.lives of the live instance, -1: none
	stopping   sim.Event // the instance's stop in progress
	handedOver bool
}

type simRequest struct {
	Op, From string
	Gen      uint64
	ID       uint64
}

type simReply struct {
	Op, Said string
	ID       uint64
}

func (m *simMember) step(in Input) {
	effects := m.st.Step(m.h.w.Now(), in)
	for _, e := range effects {
		m.h.logf("%s %T%+v -> %s", m.name, in, in, e)
		m.apply(e)
	}
}

func (m *simMember) apply(e Effect) {
	h := m.h
	switch e := e.(type) {
	case Send:
		m.send(e)
	case StartInstance:
		h.lives = append(h.lives, simLife{member: m.name, num: e.Num, from: h.w.Now()})
		m.life = len(h.lives) - 1
	case StopInstance:
		if m.life < 0 || m.stopping.Pending() {
			return
		}
		// Stopping takes up to 100 ms (more when queued requests go
		// first).
		d := h.jitter(100 * time.Millisecond)
		if !e.Now {
			d += h.jitter(200 * time.Millisecond)
		}
		m.stopping = h.w.After(d, m.instanceDone)
	case GiveUp:
		m.stopping.Cancel()
		m.instanceDone()
	case ArmStateTimer:
		m.stateTimer.Cancel()
		m.stateTimer = h.w.After(e.After, func() { m.step(InStateTimer{}) })
	case CancelStateTimer:
		m.stateTimer.Cancel()
	case ArmStopTimer:
		m.stopTimer.Cancel()
		m.stopTimer = h.w.After(e.After, func() { m.step(InStopTimer{}) })
	case CancelStopTimer:
		m.stopTimer.Cancel()
	case HandedOver:
		m.handedOver = true
		if h.status[m.name] == cluster.StatusLeaving {
			// A leaving member is removed once it has handed over.
			h.logf("%s removed", m.name)
			h.status[m.name] = cluster.StatusRemoved
			h.publish(time.Second)
		}
	case Emit, Reply:
	}
}

func (m *simMember) instanceDone() {
	if m.life < 0 {
		return
	}
	m.h.lives[m.life].till = m.h.w.Now()
	m.life = -1
	m.step(InInstanceDone{})
}

// send carries a request over a stream; the answer, or a timeout, comes
// back as an InResult.
func (m *simMember) send(s Send) {
	h := m.h
	h.nextID++
	id := h.nextID
	timeout := max(m.cfg.RetryInterval, minAttemptTimeout)
	answered := false
	deadline := h.w.After(timeout, func() {
		if !answered {
			answered = true
			m.step(InResult{Gen: s.Gen, Op: s.Op, To: s.To, Err: errors.New("timeout")})
		}
	})
	h.pending[id] = func(said string) {
		if !answered {
			answered = true
			deadline.Cancel()
			m.step(InResult{Gen: s.Gen, Op: s.Op, To: s.To, Said: said})
		}
	}
	h.net.SendReliable(m.uid, s.To, simRequest{Op: s.Op, From: m.uid, Gen: s.Gen, ID: id}, timeout, nil)
}

func (m *simMember) receive(from string, msg any) {
	switch msg := msg.(type) {
	case simRequest:
		said := ""
		for _, e := range m.st.Step(m.h.w.Now(), InMessage{Op: msg.Op, From: msg.From}) {
			m.h.logf("%s message %s from %s -> %s", m.name, msg.Op, msg.From, e)
			if r, ok := e.(Reply); ok {
				said = r.Answer
				continue
			}
			m.apply(e)
		}
		m.h.net.SendReliable(m.uid, from, simReply{Op: msg.Op, Said: said, ID: msg.ID}, time.Second, nil)
	case simReply:
		if f := m.h.pending[msg.ID]; f != nil {
			delete(m.h.pending, msg.ID)
			f(msg.Said)
		}
	}
}

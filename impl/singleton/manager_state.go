package singleton

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/protocol"
)

// ManagerState is the decisions of one singleton's manager on one member,
// as a state machine: Step takes an input (a new view of the cluster, a
// message from another member's manager, the answer to one this one sent,
// a timer, the instance's end) and returns the effects to carry out (send,
// start or stop the instance, arm a timer, log an event, answer). It does
// no I/O, reads no clock (each Step is given the time) and starts nothing;
// Manager drives it over the real seams, a simulation over its own.
//
// It follows Akka's ClusterSingletonManager: the oldest Up member with the
// role runs the instance; a new oldest asks the previous one to hand over
// (HandOverToMe) and starts only once it has stopped, or once it is known
// to be gone (downed: after DownRemovalMargin); an oldest that is no longer
// the oldest asks its successor to take over (TakeOverFromMe).
type ManagerState struct {
	cfg Config
	log *slog.Logger

	snap        cluster.Snapshot
	state       State
	partner     string
	margin      bool   // BecomingOldest: waiting DownRemovalMargin (else handing over)
	retries     int    // requests to partner without confirmation
	gen         uint64 // bumped at every state or partner change
	hint        string // the previous oldest (Younger, Start)
	hold        bool   // Younger after handing over: wait for a new view, or the state timer
	holdVersion uint64
	takenFrom   string // Oldest: the member this one took over from
	handOverTo  string // whom to tell HandOverDone when the instance has stopped
	// handedTo is the member this one last told it may start (HandOverDone,
	// or "done" to its HandOverToMe) since it last ran an instance itself;
	// handedToDown is when this member first saw it down (valid while
	// handedToSeenDown).
	handedTo         string
	handedToDown     time.Duration
	handedToSeenDown bool
	// handedToGen: the Gen of the HandOverDone sent to handedTo (0: none
	// since handTo), so that only the answer to that one can decline it.
	handedToGen uint64
	lastOldest  string
	numbered    int  // instances created
	running     bool // an instance exists here (starting, running or stopping)
	stateTimer  bool // armed
	stopTimer   bool // armed
	shut        bool // shut down: the instance is only waited for
	handedOver  bool // HandedOver was emitted
	// toAsk: BecomingOldest, the members still to ask to hand over after
	// the partner (see prevAskEach).
	toAsk []string

	now time.Duration // the time of the Step being taken
	out []Effect
}

// Input is what a ManagerState steps on: InView, InMessage, InResult,
// InStateTimer, InStopTimer, InInstanceDone, InShutdown.
type Input interface{ input() }

// InView is a new view of the cluster.
type InView struct{ Snapshot cluster.Snapshot }

// InMessage is a request from another member's manager (Op one of
// hand-over-to-me, take-over-from-me, hand-over-done); Step answers it
// with a Reply.
type InMessage struct{ Op, From string }

// InResult is the answer to a Send, or why there was none.
type InResult struct {
	Gen          uint64
	Op, To, Said string
	Err          error
}

// InStateTimer: the state timer (ArmStateTimer) fired.
type InStateTimer struct{}

// InStopTimer: the instance did not stop within StopTimeout.
type InStopTimer struct{}

// InInstanceDone: the instance counts as stopped (on its own, asked to, or
// given up on); Err is why it ended on its own, if it did.
type InInstanceDone struct{ Err error }

// InShutdown: the manager is shutting down; stop the instance at once.
type InShutdown struct{}

func (InView) input()         {}
func (InMessage) input()      {}
func (InResult) input()       {}
func (InStateTimer) input()   {}
func (InStopTimer) input()    {}
func (InInstanceDone) input() {}
func (InShutdown) input()     {}

// Effect is what a Step asks its driver to do, in order.
type Effect interface {
	effect()
	String() string
}

// Emit logs a protocol event.
type Emit struct{ Event protocol.Event }

// Send sends Op to the manager on member To; its answer comes back as an
// InResult with the same Gen.
type Send struct {
	Op, To string
	Gen    uint64
}

// StartInstance starts instance Num (the factory runs in the background).
type StartInstance struct{ Num int }

// StopInstance asks the instance to stop: Now, ahead of the requests
// queued before it; else after them.
type StopInstance struct{ Now bool }

// GiveUp forgets an instance that did not stop in time.
type GiveUp struct{ Reason string }

// ArmStateTimer (re)arms the state timer; CancelStateTimer stops it.
type ArmStateTimer struct{ After time.Duration }

// CancelStateTimer stops the state timer.
type CancelStateTimer struct{}

// ArmStopTimer arms the stop timer.
type ArmStopTimer struct{ After time.Duration }

// CancelStopTimer stops the stop timer.
type CancelStopTimer struct{}

// Reply answers the InMessage being stepped: with Answer, or, when this
// member will not act on it, with why (Refused).
type Reply struct{ Answer, Refused string }

// HandedOver: this member no longer runs the singleton and will not run it
// (see Manager.HandedOver). Emitted once.
type HandedOver struct{}

func (Emit) effect()             {}
func (Send) effect()             {}
func (StartInstance) effect()    {}
func (StopInstance) effect()     {}
func (GiveUp) effect()           {}
func (ArmStateTimer) effect()    {}
func (CancelStateTimer) effect() {}
func (ArmStopTimer) effect()     {}
func (CancelStopTimer) effect()  {}
func (Reply) effect()            {}
func (HandedOver) effect()       {}

func (e Emit) String() string {
	var b strings.Builder
	b.WriteString("event " + e.Event.Type)
	if e.Event.Peer != "" {
		b.WriteString(" peer=" + e.Event.Peer)
	}
	if e.Event.Type == protocol.EventOldestChanged {
		b.WriteString(" oldest=" + e.Event.Member)
	}
	if e.Event.Detail != "" {
		fmt.Fprintf(&b, " %q", e.Event.Detail)
	}
	return b.String()
}
func (e Send) String() string          { return fmt.Sprintf("send %s to=%s gen=%d", e.Op, e.To, e.Gen) }
func (e StartInstance) String() string { return fmt.Sprintf("start instance %d", e.Num) }
func (e StopInstance) String() string {
	if e.Now {
		return "stop instance now"
	}
	return "stop instance"
}
func (e GiveUp) String() string        { return fmt.Sprintf("give up %q", e.Reason) }
func (e ArmStateTimer) String() string { return "state timer " + e.After.String() }
func (CancelStateTimer) String() string {
	return "state timer off"
}
func (e ArmStopTimer) String() string { return "stop timer " + e.After.String() }
func (CancelStopTimer) String() string {
	return "stop timer off"
}
func (e Reply) String() string {
	if e.Refused != "" {
		return fmt.Sprintf("reply refused %q", e.Refused)
	}
	return "reply " + e.Answer
}
func (HandedOver) String() string { return "handed over" }

// NewManagerState is a manager in state Start; cfg must have been
// normalized. log may be nil.
func NewManagerState(cfg Config, log *slog.Logger) *ManagerState {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ManagerState{cfg: cfg, log: log, state: StateStart}
}

// Step takes one input at time now (the node clock's Elapsed) and returns
// the effects, in the order to carry them out.
func (m *ManagerState) Step(now time.Duration, in Input) []Effect {
	m.now, m.out = now, nil
	switch in := in.(type) {
	case InView:
		m.snap = in.Snapshot
		m.evaluate()
	case InMessage:
		m.out = append(m.out, m.onMessage(in))
	case InResult:
		m.onResult(in)
	case InStateTimer:
		if m.stateTimer {
			m.stateTimer = false
			m.onStateTimer()
		}
	case InStopTimer:
		if m.stopTimer {
			m.stopTimer = false
			if m.running {
				m.log.Warn("singleton instance did not stop in time; forgetting it", "stop_timeout", m.cfg.StopTimeout)
				m.out = append(m.out, GiveUp{fmt.Sprintf("instance %d did not stop within %v; forgotten", m.numbered, m.cfg.StopTimeout)})
			}
		}
	case InInstanceDone:
		if m.running {
			m.onInstanceDone(in.Err)
		}
	case InShutdown:
		m.shutdown()
	}
	m.checkHandedOver()
	out := m.out
	m.out = nil
	return out
}

// Status is the manager's state as the node protocol shows it (without
// what only the driver knows: Running, Started, HandedOver).
func (m *ManagerState) Status() ManagerStatus {
	return ManagerStatus{Name: m.cfg.Name, State: m.state, Oldest: m.lastOldest, Partner: m.partner, Retries: m.retries}
}

// Running reports whether an instance exists here (starting, running or
// stopping).
func (m *ManagerState) Running() bool { return m.running }

func (m *ManagerState) shutdown() {
	m.shut = true
	m.stopStateTimer()
	m.requestStop(true)
	m.setState(StateStopped, "")
}

func (m *ManagerState) selfUID() string { return m.snap.Self.UID() }

// selfGoing reports whether this member is leaving or gone.
func (m *ManagerState) selfGoing() bool {
	s := m.snap.Self.Status
	return s == cluster.StatusLeaving || s.Final()
}

func (m *ManagerState) event(typ, peerUID, detail string) {
	m.out = append(m.out, Emit{protocol.Event{Type: typ, Member: m.selfUID(), Peer: peerUID, Singleton: m.cfg.Name, Detail: detail}})
}

func (m *ManagerState) setState(s State, partner string) {
	if s != m.state || partner != m.partner {
		m.log.Info("singleton manager state", "from", m.state, "to", s, "partner", partner)
	}
	m.state, m.partner = s, partner
	m.retries = 0
	m.margin = false
	m.toAsk = nil
	m.gen++
	m.stopStateTimer()
}

func (m *ManagerState) stopStateTimer() {
	if m.stateTimer {
		m.stateTimer = false
		m.out = append(m.out, CancelStateTimer{})
	}
}

func (m *ManagerState) armStateTimer(d time.Duration) {
	m.stateTimer = true
	m.out = append(m.out, ArmStateTimer{d})
}

func (m *ManagerState) checkHandedOver() {
	if m.running || m.handedOver {
		return
	}
	switch m.state {
	case StateEnd, StateStopped:
	case StateStart, StateYounger:
		if !m.selfGoing() {
			return
		}
	default:
		return
	}
	m.handedOver = true
	m.log.Info("singleton handed over (or never run here)")
	m.out = append(m.out, HandedOver{})
}

// evaluate reacts to a new view of the cluster.
func (m *ManagerState) evaluate() {
	s := m.snap
	self := s.Self
	selfUID := self.UID()
	oldest, hasOldest := s.Oldest(m.cfg.Role)
	oldestUID := ""
	if hasOldest {
		oldestUID = oldest.UID()
	}
	if oldestUID != m.lastOldest {
		detail := ""
		if !hasOldest {
			detail = "no up member with the role"
		}
		m.out = append(m.out, Emit{protocol.Event{Type: protocol.EventOldestChanged, Member: oldestUID, Peer: m.lastOldest, Singleton: m.cfg.Name, Detail: detail}})
		m.lastOldest = oldestUID
	}

	// This member was downed or removed: stop at once, never start again.
	if self.Status.Final() {
		if m.state != StateStopped && m.state != StateEnd {
			m.log.Warn("this member is "+string(self.Status)+"; stopping the singleton at once", "running", m.running)
			m.requestStop(true)
			if self.Status == cluster.StatusDown {
				m.setState(StateStopped, "")
			} else {
				m.setState(StateEnd, "")
			}
		}
		return
	}

	isSelf := hasOldest && oldestUID == selfUID
	switch m.state {
	case StateStart:
		if isSelf {
			m.becomeOldest(m.hint)
		} else {
			m.toYounger(oldestUID, false)
		}
	case StateYounger:
		if hasOldest && !isSelf {
			m.hint = oldestUID
			return
		}
		if !isSelf {
			return
		}
		if m.hold && s.Version == m.holdVersion {
			return
		}
		m.hold = false
		m.becomeOldest(m.hint)
	case StateBecomingOldest:
		// Back off when another member is the oldest now — unless it is the
		// partner, which may still look the oldest while it asks this one
		// to take over — and when this member is leaving itself: a leaving
		// member that completed the hand-over would run the singleton with
		// nobody left to take it from it until its leave timed out (found
		// by TestHandOverInSimulation: the two oldest leaving together,
		// the second asking the third, its partner, to hand over).
		if !hasOldest || self.Status != cluster.StatusUp || (!isSelf && oldestUID != m.partner) {
			h := oldestUID
			if h == "" {
				h = m.partner
			}
			m.log.Info("no longer becoming oldest", "oldest", oldestUID)
			m.toYounger(h, false)
			return
		}
		if m.margin {
			return
		}
		ps, found := s.Find(m.partner)
		switch {
		case !found || ps.Status == cluster.StatusDown:
			m.enterMargin(m.partner, "previous oldest downed or gone")
		case ps.Status == cluster.StatusRemoved:
			// It stopped before it left — but it may have handed over to
			// an older member still here, which runs it now (found by
			// TestHandOverInSimulation: the two oldest leaving together).
			m.log.Info("previous oldest removed; it stopped before it left", "previous", m.partner)
			m.becomeOldest("")
		}
	case StateOldest, StateWasOldest:
		m.evaluateOldest(oldest, hasOldest)
	}
}

// evaluateOldest handles a new view in Oldest or WasOldest.
func (m *ManagerState) evaluateOldest(oldest cluster.MemberState, hasOldest bool) {
	s := m.snap
	selfUID := s.Self.UID()
	if m.takenFrom != "" {
		if tf, ok := s.Find(m.takenFrom); !ok || tf.Status != cluster.StatusUp {
			m.takenFrom = ""
		}
	}
	selfUp := s.Self.Status == cluster.StatusUp
	if selfUp && (!hasOldest || oldest.UID() == selfUID || oldest.UID() == m.takenFrom) {
		if m.state == StateWasOldest {
			m.log.Info("oldest again")
			m.setState(StateOldest, "")
			if !m.running {
				m.armStateTimer(m.cfg.RetryInterval)
			}
		}
		return
	}
	succ, ok := m.successor()
	if !ok {
		m.log.Info("no other member to hand the singleton over to; stopping it")
		m.enterStopping("")
		return
	}
	if m.state == StateWasOldest && m.partner == succ.UID() {
		return
	}
	m.setState(StateWasOldest, succ.UID())
	m.sendTakeOver()
}

// successor is the oldest Up member with the role other than this one (and
// than the one it took over from while that still looks Up).
func (m *ManagerState) successor() (cluster.MemberState, bool) {
	var best cluster.MemberState
	found := false
	selfUID := m.snap.Self.UID()
	for _, ms := range m.snap.Members {
		uid := ms.UID()
		if ms.Status != cluster.StatusUp || !ms.HasRole(m.cfg.Role) || uid == selfUID || uid == m.takenFrom {
			continue
		}
		if !found || ms.IsOlderThan(best.Member) {
			best, found = ms, true
		}
	}
	return best, found
}

// toYounger moves to Younger. With hold (it has just handed the singleton
// over while its view still names it the oldest) it does not become the
// oldest again before its view changes or holdTimeout has passed.
func (m *ManagerState) toYounger(hint string, hold bool) {
	m.setState(StateYounger, "")
	m.hint = hint
	m.hold = hold
	m.holdVersion = m.snap.Version
	if o, ok := m.snap.Oldest(m.cfg.Role); hold && ok && o.UID() == m.selfUID() {
		// Only a view that names this member the oldest is held off:
		// any other hold ends with the next view anyway.
		m.armStateTimer(m.holdTimeout())
	}
}

// holdTimeout bounds a hold. Views that disagree agree again within about
// DownRemovalMargin (the time a member is given to learn of a change);
// one that still names this member the oldest after it is taken at its
// word, and the member it handed over to is asked to hand the singleton
// back (choosePrev: it runs it, or says it does not). Asking is safe,
// only starting blindly is not. Without the bound a hand-over to a member
// that never took the singleton up (one that had changed its mind, or
// never existed) left it running nowhere until the view next changed: in
// a quiet cluster, for good.
func (m *ManagerState) holdTimeout() time.Duration {
	return max(m.cfg.DownRemovalMargin, m.cfg.RetryInterval)
}

type prevKind int

const (
	prevNone prevKind = iota
	prevHandOver
	prevMargin
	// prevAskEach: no older member and no previous oldest known, but
	// younger members are up: ask each of them, oldest first, to hand over
	// (see choosePrev).
	prevAskEach
)

// choosePrev decides, for a member that has become the oldest, which member
// may still run the singleton: hint is the previous oldest it saw.
//
// Then an older member not yet gone (leaving), the oldest of them:
// hand-overs go from older to younger, and a member that handed over knows
// to whom (handedElsewhere), so asking the oldest finds the instance. The
// hint may be younger than that one and may never have run it: when the
// two oldest leave together, a member that saw only the second as the
// oldest, and asked it, heard "not running here" while the first still ran
// it (found by TestHandOverInSimulation).
func (m *ManagerState) choosePrev(hint string) (prevKind, string) {
	s := m.snap
	self := s.Self
	selfUID := self.UID()
	// The member this one handed the singleton to runs it, or passed it
	// on: it comes first. A member that handed over and then, on a view
	// that lagged the others', became the oldest again asked the member it
	// had taken it from, heard "not running here", and started a second
	// instance (found by TestHandOverInSimulation).
	if to := m.handedTo; to != "" && to != selfUID {
		ms, ok := s.Find(to)
		switch {
		case ok && !ms.Status.Final():
			return prevHandOver, to
		case ok && ms.Status == cluster.StatusDown:
			return prevMargin, to
		}
	}
	var older cluster.MemberState
	found := false
	for _, ms := range s.Members {
		if ms.UID() == selfUID || !ms.HasRole(m.cfg.Role) || ms.Status.Final() || ms.Status == cluster.StatusJoining {
			continue
		}
		if ms.IsOlderThan(self.Member) && (!found || ms.IsOlderThan(older.Member)) {
			older, found = ms, true
		}
	}
	if found {
		return prevHandOver, older.UID()
	}
	if hint != "" && hint != selfUID {
		ms, ok := s.Find(hint)
		switch {
		case !ok || ms.Status == cluster.StatusDown:
			return prevMargin, hint
		case !ms.Status.Final() && !ms.IsOlderThan(self.Member) && len(m.othersUp()) > 0:
			// A younger previous "oldest" was the oldest only in views
			// taken before this member was up (it was joining): any member
			// up may run the singleton (see prevAskEach below).
			return prevAskEach, ""
		case !ms.Status.Final():
			return prevHandOver, hint
		}
	}
	if hint == "" {
		// Nothing seen yet: an older member downed before this manager
		// started may not have stopped yet.
		for _, ms := range s.Gone {
			if ms.Status == cluster.StatusDown && ms.HasRole(m.cfg.Role) && ms.IsOlderThan(self.Member) {
				return prevMargin, ms.UID()
			}
		}
		// No older member, but younger ones are up: the cluster existed
		// before this member joined it, and any of them may run the
		// singleton. Age is the up-number a member draws from the journal
		// before it joins, so a member can join a cluster younger than
		// itself: the first seed, having drawn a later number than the
		// nodes still joining, bootstraps after its seed timeout and starts
		// the singleton; an older node joining then saw itself the oldest
		// on its first view and started a second instance (found by
		// sim/nodes, its nodes started together). Several may join at once,
		// so asking one of them is not enough: each is asked in turn.
		if len(m.othersUp()) > 0 {
			return prevAskEach, ""
		}
	}
	return prevNone, ""
}

// othersUp are the other Up members with the role, oldest first.
func (m *ManagerState) othersUp() []string {
	var others []cluster.MemberState
	for _, ms := range m.snap.Members {
		if ms.UID() != m.selfUID() && ms.HasRole(m.cfg.Role) && ms.Status == cluster.StatusUp {
			others = append(others, ms)
		}
	}
	slices.SortFunc(others, func(a, b cluster.MemberState) int {
		if a.IsOlderThan(b.Member) {
			return -1
		}
		if b.IsOlderThan(a.Member) {
			return 1
		}
		return 0
	})
	var out []string
	for _, ms := range others {
		out = append(out, ms.UID())
	}
	return out
}

func (m *ManagerState) becomeOldest(hint string) { m.becomeOldestFrom(m.choosePrev(hint)) }

func (m *ManagerState) becomeOldestFrom(kind prevKind, prev string) {
	switch kind {
	case prevHandOver:
		m.enterHandOver(prev)
	case prevAskEach:
		others := m.othersUp()
		m.enterHandOver(others[0])
		m.toAsk = others[1:]
	case prevMargin:
		m.enterMargin(prev, "previous oldest downed or gone")
	default:
		m.log.Info("oldest, no previous oldest known: starting")
		m.startOldest()
	}
}

func (m *ManagerState) enterHandOver(prev string) {
	m.setState(StateBecomingOldest, prev)
	m.sendHandOverToMe()
}

func (m *ManagerState) enterMargin(prev, why string) {
	m.setState(StateBecomingOldest, prev)
	m.margin = true
	if m.cfg.DownRemovalMargin <= 0 {
		m.startOldest()
		return
	}
	m.log.Info("waiting DownRemovalMargin before starting", "previous", prev, "margin", m.cfg.DownRemovalMargin, "why", why)
	m.armStateTimer(m.cfg.DownRemovalMargin)
}

// handedOverToMe: the partner has no instance (any more); ask the next
// member still to ask, if any is still up, or start.
func (m *ManagerState) handedOverToMe() {
	for len(m.toAsk) > 0 {
		next, rest := m.toAsk[0], m.toAsk[1:]
		if ms, ok := m.snap.Find(next); !ok || ms.Status != cluster.StatusUp {
			m.toAsk = rest
			continue
		}
		m.enterHandOver(next)
		m.toAsk = rest
		return
	}
	m.startOldest()
}

// startOldest moves to Oldest and starts the instance.
func (m *ManagerState) startOldest() {
	from := ""
	if m.state == StateBecomingOldest {
		from = m.partner
	}
	m.setState(StateOldest, "")
	m.takenFrom = from
	if m.takenFrom != "" {
		// Only an older partner may still look the oldest in a view that
		// lags; a younger one (asked because it may have run the singleton
		// before this member joined, see prevAskEach) is a successor like
		// any other.
		if tf, ok := m.snap.Find(m.takenFrom); !ok || tf.Status != cluster.StatusUp || !tf.IsOlderThan(m.snap.Self.Member) {
			m.takenFrom = ""
		}
	}
	m.startInstance()
}

func (m *ManagerState) startInstance() {
	m.handTo("") // it is this member's own to run now
	if m.running {
		// Never two instances here; the old one must stop first. Only
		// reachable if it is still stopping: retry after it is done.
		m.log.Warn("previous instance still stopping; start deferred")
		return
	}
	m.numbered++
	m.running = true
	m.out = append(m.out, StartInstance{m.numbered})
}

// requestStop sends the termination message to the instance (now: ahead of
// queued requests) and starts the StopTimeout clock.
func (m *ManagerState) requestStop(now bool) {
	if !m.running {
		return
	}
	m.out = append(m.out, StopInstance{now})
	if !m.stopTimer {
		m.stopTimer = true
		m.out = append(m.out, ArmStopTimer{m.cfg.StopTimeout})
	}
}

// enterStopping stops the instance without a hand-over partner (none left,
// or it did not answer).
func (m *ManagerState) enterStopping(partner string) {
	m.setState(StateStopping, partner)
	if m.running {
		m.requestStop(false)
		return
	}
	m.afterStopping()
}

func (m *ManagerState) afterStopping() {
	if m.selfGoing() {
		m.setState(StateEnd, "")
		return
	}
	hint := m.partner
	m.setState(StateStart, "")
	m.hint = hint
	m.evaluate()
}

// afterHandOver: the instance has stopped (or none ran) and to may start.
func (m *ManagerState) afterHandOver(to string) {
	if m.selfGoing() {
		m.setState(StateEnd, "")
		return
	}
	if ms, ok := m.snap.Find(to); !ok || ms.Status.Final() {
		// The view already says to is gone: no later view need come, so
		// waiting for one would hold this member back for good (found by
		// TestHandOverInSimulation: the two oldest leaving together, the
		// third handing back to the second as it left). Go by this view.
		m.toYounger(to, false)
		m.evaluate()
		return
	}
	// Not leaving: the views disagree. Do not take it back before this
	// member's view changes (or the new oldest asks to take over).
	m.toYounger(to, true)
}

func (m *ManagerState) onInstanceDone(failErr error) {
	m.running = false
	if m.stopTimer {
		m.stopTimer = false
		m.out = append(m.out, CancelStopTimer{})
	}
	if m.shut {
		return
	}
	if to := m.handOverTo; to != "" {
		m.handOverTo = ""
		m.event(protocol.EventHandOverDone, to, "sent: instance stopped")
		m.handTo(to)
		m.send(opHandOverDone, to)
		m.handedToGen = m.gen
	}
	switch m.state {
	case StateOldest:
		m.log.Warn("singleton instance ended; restarting after back-off", "err", failErr, "retry_interval", m.cfg.RetryInterval)
		m.armStateTimer(m.cfg.RetryInterval)
	case StateHandingOver:
		m.afterHandOver(m.partner)
	case StateStopping:
		m.afterStopping()
	}
}

func (m *ManagerState) onStateTimer() {
	switch m.state {
	case StateYounger:
		if m.hold {
			m.log.Info("the view did not change after handing over; going by it", "handed_to", m.handedTo, "hold", m.holdTimeout())
			m.hold = false
			m.evaluate()
		}
	case StateOldest:
		if !m.running {
			m.startInstance()
		}
	case StateBecomingOldest:
		if m.margin {
			m.log.Info("DownRemovalMargin elapsed: starting", "previous", m.partner)
			m.startOldest()
			return
		}
		if m.retries < m.cfg.MaxHandOverRetries {
			m.sendHandOverToMe()
			return
		}
		ps, found := m.snap.Find(m.partner)
		if !found || ps.Status.Final() {
			if kind, prev := m.choosePrev(""); kind == prevHandOver || kind == prevAskEach {
				// It may have handed over to a member still here.
				m.log.Info("hand-over retries exhausted; previous oldest is gone: asking the others", "previous", m.partner, "older", prev)
				m.becomeOldestFrom(kind, prev)
				return
			}
			m.log.Info("hand-over retries exhausted; previous oldest is gone: starting", "previous", m.partner)
			m.startOldest()
			return
		}
		prev := m.partner
		m.event(protocol.EventHandOverGaveUp, prev, fmt.Sprintf("no answer to HandOverToMe after %d retries; previous oldest is %s; restarting from start", m.retries, ps.Status))
		m.log.Warn("hand-over not confirmed; manager is stuck, restarting", "previous", prev, "retries", m.retries)
		m.setState(StateStart, "")
		m.hint = prev
		m.evaluate()
	case StateWasOldest:
		if m.retries < m.cfg.MaxTakeOverRetries {
			m.sendTakeOver()
			return
		}
		m.event(protocol.EventHandOverGaveUp, m.partner, fmt.Sprintf("no HandOverToMe after %d TakeOverFromMe; stopping the instance", m.retries))
		m.log.Warn("take-over not confirmed; stopping the instance", "new_oldest", m.partner)
		m.enterStopping(m.partner)
	}
}

func (m *ManagerState) sendHandOverToMe() {
	m.retries++
	m.event(protocol.EventHandOverToMe, m.partner, fmt.Sprintf("sent (attempt %d)", m.retries))
	m.send(opHandOverToMe, m.partner)
	m.armStateTimer(m.cfg.RetryInterval)
}

func (m *ManagerState) sendTakeOver() {
	m.retries++
	m.event(protocol.EventTakeOverFromMe, m.partner, fmt.Sprintf("sent (attempt %d)", m.retries))
	m.send(opTakeOverFromMe, m.partner)
	m.armStateTimer(m.cfg.RetryInterval)
}

func (m *ManagerState) send(op, uid string) {
	m.out = append(m.out, Send{Op: op, To: uid, Gen: m.gen})
}

func (m *ManagerState) onResult(res InResult) {
	if res.Err != nil {
		m.log.Debug("peer request failed", "op", res.Op, "to", res.To, "err", res.Err)
		return
	}
	if res.Op == opHandOverDone {
		// The member this one handed the singleton to will not run it on
		// that word (it backed off meanwhile): this member need not wait
		// for it any more. Without this, a member that became the oldest
		// asked this one, heard "handed over to X, which may still run it"
		// for good, while X, which had backed off, said "not running here"
		// (found by sim/nodes, nodes started together).
		if res.Said == answerDeclined && res.To == m.handedTo && m.handedToGen != 0 && res.Gen == m.handedToGen && !m.running {
			m.event(protocol.EventHandOverDone, res.To, "declined: it does not take the singleton")
			m.handTo("")
		}
		return
	}
	if res.Op != opHandOverToMe || res.Gen != m.gen || m.state != StateBecomingOldest || m.margin || res.To != m.partner {
		return
	}
	switch res.Said {
	case answerInProgress:
		m.event(protocol.EventHandOverInProgress, res.To, "received")
		m.retries = 0
	case answerDone:
		m.event(protocol.EventHandOverDone, res.To, "received: previous instance stopped")
		m.handedOverToMe()
	}
}

func (m *ManagerState) onMessage(msg InMessage) Reply {
	switch msg.Op {
	case opHandOverToMe:
		if why := m.notNextOldest(msg.From); why != "" {
			m.event(protocol.EventHandOverToMe, msg.From, "received; refused: "+why)
			m.log.Warn("HandOverToMe refused", "from", msg.From, "why", why)
			return Reply{Refused: why}
		}
		return Reply{Answer: m.onHandOverToMe(msg.From)}
	case opTakeOverFromMe:
		return Reply{Answer: m.onTakeOverFromMe(msg.From)}
	case opHandOverDone:
		m.event(protocol.EventHandOverDone, msg.From, "received")
		switch {
		case m.state == StateBecomingOldest && msg.From == m.partner:
			m.handedOverToMe()
		case m.state == StateOldest:
			// Already running it (a late duplicate).
		default:
			return Reply{Answer: answerDeclined}
		}
		return Reply{Answer: answerAck}
	}
	return Reply{Answer: answerIgnored}
}

// notNextOldest says why this member will not hand the singleton over to
// uid ("": it will). A hand-over goes only to the member this member's
// view names next in line (successor: the oldest Up member with the role
// other than itself), as Akka's manager hands over only to the member
// membership says is the new oldest; whatever else asks is refused, and a
// member whose view merely lags asks again. Before, any name was taken at
// its word: a hand-over to a member that does not exist stopped the
// instance, and the singleton then ran nowhere.
func (m *ManagerState) notNextOldest(uid string) string {
	succ, ok := m.successor()
	switch {
	case !ok:
		return fmt.Sprintf("%s has no member to hand over to in its view, so not %s", m.selfUID(), uid)
	case succ.UID() != uid:
		return fmt.Sprintf("%s is not the next oldest in %s's view (%s is)", uid, m.selfUID(), succ.UID())
	}
	return ""
}

func (m *ManagerState) onHandOverToMe(from string) string {
	m.event(protocol.EventHandOverToMe, from, "received")
	inProgress := func() string {
		m.event(protocol.EventHandOverInProgress, from, "answered")
		return answerInProgress
	}
	// done: no instance runs here. That lets from start, unless this
	// member let another start and that one may still run it: then from
	// must get it from there (that member hands it over once it sees from
	// as the oldest), not here.
	done := func() string {
		if m.handedElsewhere(from) {
			m.event(protocol.EventHandOverInProgress, from, "answered: handed over to "+m.handedTo+", which may still run it")
			return answerInProgress
		}
		m.handTo(from)
		m.event(protocol.EventHandOverDone, from, "answered: not running here")
		return answerDone
	}
	switch m.state {
	case StateOldest, StateWasOldest:
		if m.running {
			m.setState(StateHandingOver, from)
			m.handOverTo = from
			m.requestStop(false)
			return inProgress()
		}
		m.afterHandOver(from)
		return done()
	case StateHandingOver, StateStopping, StateStopped, StateEnd:
		if m.running {
			if m.handOverTo == "" {
				m.handOverTo = from
			}
			return inProgress()
		}
		return done()
	case StateBecomingOldest:
		// The sender believes it is the oldest: do not start here until this
		// member's view says otherwise.
		m.log.Info("HandOverToMe while becoming oldest; backing off", "from", from)
		m.toYounger(from, true)
		return done()
	}
	return done()
}

// handTo records that uid may start the singleton on this member's word
// ("": none, this member runs it itself).
func (m *ManagerState) handTo(uid string) {
	m.handedTo, m.handedToSeenDown, m.handedToGen = uid, false, 0
}

// handedElsewhere reports whether a member other than from, which this
// member let start the singleton, may still run it: it is not final in
// this member's view, or was downed less than DownRemovalMargin ago (a
// downed member stops its instance within the margin). Views disagree
// while members join: two members older than the oldest, joining at
// once, each saw itself as the oldest and asked it to hand over; it
// answered the first by handing over, and the second, once its instance
// had stopped, with "not running here" — so both ran the singleton
// (found by majorities-ring-idgen).
func (m *ManagerState) handedElsewhere(from string) bool {
	to := m.handedTo
	if to == "" || to == from {
		return false
	}
	ms, ok := m.snap.Find(to)
	switch {
	case !ok || ms.Status == cluster.StatusRemoved:
		// Gone, or left (it stopped its instance before it left).
		m.handTo("")
		return false
	case ms.Status == cluster.StatusDown:
		if !m.handedToSeenDown {
			m.handedToSeenDown, m.handedToDown = true, m.now
		}
		if m.now-m.handedToDown >= m.cfg.DownRemovalMargin {
			m.handTo("")
			return false
		}
	}
	return true
}

func (m *ManagerState) onTakeOverFromMe(from string) string {
	m.event(protocol.EventTakeOverFromMe, from, "received")
	if _, ok := m.snap.Find(from); !ok {
		m.log.Info("ignoring TakeOverFromMe from an unknown member", "from", from)
		return answerIgnored
	}
	// The sender ran the instance when it asked; but if this member has
	// since let another start it, and that one may still run it, it is
	// the one to ask: the request may be stale (it was, when the two
	// oldest left together and a delayed TakeOverFromMe reached the second
	// after it had told the third "not running here": found by
	// TestHandOverInSimulation).
	prev := from
	if m.handedElsewhere(from) {
		prev = m.handedTo
	}
	switch m.state {
	case StateStart, StateYounger:
		if !m.mayTakeOverFrom(from) {
			m.log.Info("ignoring TakeOverFromMe: this member is not next in line", "from", from)
			return answerIgnored
		}
		m.enterHandOver(prev)
	case StateBecomingOldest:
		if m.partner == prev && !m.margin {
			return answerAck
		}
		// The sender runs the instance: it is the one to hand over.
		m.enterHandOver(prev)
	case StateOldest:
		// Already oldest (the views disagreed): have it stop its instance.
		m.event(protocol.EventHandOverToMe, from, "sent (confirming take-over)")
		m.send(opHandOverToMe, from)
	default:
		return answerIgnored
	}
	return answerAck
}

// mayTakeOverFrom: this member is Up with the role and the oldest Up member
// it sees is itself or from.
func (m *ManagerState) mayTakeOverFrom(from string) bool {
	self := m.snap.Self
	if self.Status != cluster.StatusUp || !self.HasRole(m.cfg.Role) {
		return false
	}
	oldest, ok := m.snap.Oldest(m.cfg.Role)
	return ok && (oldest.UID() == self.UID() || oldest.UID() == from)
}

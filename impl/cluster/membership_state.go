package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// MembershipState is every decision of one member's membership, as a state
// machine in the manner of go.etcd.io/raft: Step takes an input (a tick of
// the failure detector, a datagram or pushed state received, a join
// attempt's outcome, an operator's Down, a leave) at a time the caller
// gives, and returns the effects to carry out (send a datagram, push the
// state, log an event, wake the view's watchers). It does no I/O, reads no
// clock, starts no goroutine, takes no lock, and iterates maps in sorted
// order wherever the order shows, so that the same inputs at the same times
// give the same effects. Cluster drives it over memberlist and the node's
// clock; a simulation drives many over a virtual network and virtual time.
//
// It is not safe for concurrent use: its driver serializes the calls.
type MembershipState struct {
	cfg    MembershipConfig
	self   Member
	joined bool
	state  gossip
	// lastHeard, unreachAt and downSeen hold the times Step was given (the
	// node clock's Elapsed): a clock bump must not make a member look
	// silent or a problem look stable.
	lastHeard map[string]time.Duration
	reachable map[string]bool
	unreachAt map[string]time.Duration // for auto-down
	// downSeen: members this node saw downed, for the down notices.
	downSeen map[string]time.Duration
	fresh    Freshness
	// incarnations: the incarnations seen at each gossip address before
	// joining (from the transport's Met), for MembershipConfig.Previous.
	incarnations map[string]map[string]bool
	obsVersion   uint64
	version      uint64
	// dirty: the state changed here since the last push; the next tick
	// pushes it to every member.
	dirty    bool
	resolver resolver

	// Up-number allocation: the next back-off and whether the journal's
	// unavailability was reported.
	allocBackoff  time.Duration
	allocReported bool
	// Joining: since when (the first JoinTick).
	joinStarted bool
	joinStart   time.Duration
	// left: the leave completed (LeftCluster was emitted).
	left bool

	now    time.Duration // the time of the Step being taken
	bumped bool          // the view changed during this Step
	out    []Effect
}

// MembershipConfig is what a MembershipState decides by: the part of
// Config that is policy, not plumbing. See Config for each field.
type MembershipConfig struct {
	Seeds          []string
	JoinOnly       bool
	Previous       *Snapshot
	SeedTimeout    time.Duration
	FailureTimeout time.Duration
	DownNoticeFor  time.Duration
	MaxGone        int
	BlindToOneWay  bool
	Downing        DowningConfig
}

// membershipConfig is the policy part of a defaulted Config.
func (c *Config) membershipConfig() MembershipConfig {
	return MembershipConfig{
		Seeds: slices.Clone(c.Seeds), JoinOnly: c.JoinOnly, Previous: c.Previous,
		SeedTimeout: c.SeedTimeout, FailureTimeout: c.FailureTimeout, DownNoticeFor: c.DownNoticeFor,
		MaxGone: c.MaxGone, BlindToOneWay: c.BlindToOneWay, Downing: c.Downing,
	}
}

// Timing of the driver-side waits the machine asks for.
const (
	// joinRetryInterval: the wait between two join attempts.
	joinRetryInterval = 500 * time.Millisecond
	// allocFirstBackoff and allocMaxBackoff bound the wait before the
	// next attempt to allocate an up-number from the journal.
	allocFirstBackoff = 200 * time.Millisecond
	allocMaxBackoff   = 2 * time.Second
	// leaveTimeout: how long the transport may take to tell the others
	// that this member leaves.
	leaveTimeout = time.Second
)

// NewMembershipState is member self before it has allocated its up-number
// or joined: self has its name, incarnation, addresses and roles; its
// up-number comes with InUpNumber, its gossip address with InBound.
func NewMembershipState(cfg MembershipConfig, self Member) *MembershipState {
	return &MembershipState{
		cfg:          cfg,
		self:         self,
		state:        gossip{},
		lastHeard:    map[string]time.Duration{},
		reachable:    map[string]bool{},
		unreachAt:    map[string]time.Duration{},
		downSeen:     map[string]time.Duration{},
		incarnations: map[string]map[string]bool{},
		allocBackoff: allocFirstBackoff,
	}
}

// Input is what a MembershipState steps on.
type Input interface{ input() }

// InStart: the member starts; it asks for an up-number (AllocateUpNumber).
type InStart struct{}

// InUpNumber is the outcome of an AllocateUpNumber: the up-number, or why
// the journal gave none (then the machine asks again after a back-off).
type InUpNumber struct {
	UpNumber int64
	Err      error
}

// InBound: the transport is bound; Addr is this member's gossip address.
type InBound struct{ Addr string }

// InJoinTick: try to join (the first attempt, or the next after RetryJoin).
type InJoinTick struct{}

// InJoinResult is the outcome of a JoinSeeds: how many seeds answered. The
// state they gave has been stepped already (InRemoteState, InMet).
type InJoinResult struct {
	Answered int
	Err      error
}

// InTick: the heartbeat interval passed. The failure detector judges, the
// resolver decides, heartbeats and down notices go out, and a changed
// state is pushed. A tick much later than the previous one shows that this
// member was frozen (see Freshness).
type InTick struct{}

// InReceived is a datagram (heartbeat, down notice) or a pushed state, as
// it came off the wire.
type InReceived struct{ Msg []byte }

// InRemoteState is the state another member gave in a push/pull exchange
// (a join's or the transport's periodic one), as it came off the wire.
type InRemoteState struct {
	State []byte
	Join  bool
}

// InMet: the transport met a member; Meta is what that member's Meta gave.
type InMet struct{ Meta []byte }

// InRejoinTick: time to re-join the known members the transport lost
// (after a long partition); Alive is the transport's live addresses.
type InRejoinTick struct{ Alive []string }

// InDown is an operator's Down(UID); the error, if any, comes back as
// Rejected.
type InDown struct{ UID string }

// InBeginLeave: this member starts leaving (it hands over what it runs).
type InBeginLeave struct{}

// InFinishLeave: this member has handed over; it is removed, tells the
// others and leaves the transport (LeaveTransport).
type InFinishLeave struct{}

// InTransportLeft: the LeaveTransport of a finished leave is done.
type InTransportLeft struct{}

// InFarewell: this member, downed, is about to stop; it pushes its state
// (with its own down record) to whoever still listens.
type InFarewell struct{}

func (InStart) input()         {}
func (InUpNumber) input()      {}
func (InBound) input()         {}
func (InJoinTick) input()      {}
func (InJoinResult) input()    {}
func (InTick) input()          {}
func (InReceived) input()      {}
func (InRemoteState) input()   {}
func (InMet) input()           {}
func (InRejoinTick) input()    {}
func (InDown) input()          {}
func (InBeginLeave) input()    {}
func (InFinishLeave) input()   {}
func (InTransportLeft) input() {}
func (InFarewell) input()      {}

// Effect is what a Step asks its driver to do, in order. Emit, Log,
// ViewChanged, SelfDowned, LeftCluster and Rejected are local and never
// block; the others are I/O.
type Effect interface {
	effect()
	String() string
}

// Emit appends a protocol event to the node's event log.
type Emit struct{ Event protocol.Event }

// Log writes a log record (Args are slog's key-value pairs).
type Log struct {
	Level slog.Level
	Msg   string
	Args  []any
}

// ViewChanged: the view changed (Snapshot's Version is now Version); wake
// the Changed waiters.
type ViewChanged struct{ Version uint64 }

// SelfDowned: this member was downed; close Downed.
type SelfDowned struct{}

// LeftCluster: this member has finished leaving; close Left.
type LeftCluster struct{}

// Rejected: the operation stepped (InDown, InBeginLeave, InFinishLeave)
// is refused; its caller gets Err.
type Rejected struct{ Err error }

// AllocateUpNumber: append Payload to the journal's UpNumbersID after
// waiting After, and step the outcome as InUpNumber.
type AllocateUpNumber struct {
	Payload []byte
	After   time.Duration
}

// JoinSeeds: exchange state with the seeds at Addrs (push/pull), and step
// the outcome as InJoinResult.
type JoinSeeds struct{ Addrs []string }

// RetryJoin: wait After, then step InJoinTick.
type RetryJoin struct{ After time.Duration }

// Rejoin: exchange state with Addrs, members the transport lost; nothing
// is stepped back but what they give.
type Rejoin struct{ Addrs []string }

// SendDatagram sends Msg to To; it may be lost. DownNotice is the member
// it tells it was downed, if it is a down notice (else a heartbeat).
type SendDatagram struct {
	To         string
	Msg        []byte
	DownNotice string
}

// PushState sends Msg, the full state, to To over a stream (a driver keeps
// at most one push in flight per address and drops the others).
type PushState struct {
	To  string
	Msg []byte
}

// AwaitPushes: wait until the pushes this Step asked for are done before
// carrying out the next effects.
type AwaitPushes struct{}

// LeaveTransport: tell the transport's other members that this member
// leaves, waiting at most Timeout; then step InTransportLeft.
type LeaveTransport struct{ Timeout time.Duration }

func (Emit) effect()             {}
func (Log) effect()              {}
func (ViewChanged) effect()      {}
func (SelfDowned) effect()       {}
func (LeftCluster) effect()      {}
func (Rejected) effect()         {}
func (AllocateUpNumber) effect() {}
func (JoinSeeds) effect()        {}
func (RetryJoin) effect()        {}
func (Rejoin) effect()           {}
func (SendDatagram) effect()     {}
func (PushState) effect()        {}
func (AwaitPushes) effect()      {}
func (LeaveTransport) effect()   {}

func (e Emit) String() string {
	var b strings.Builder
	b.WriteString("event " + e.Event.Type)
	if e.Event.Member != "" {
		b.WriteString(" member=" + e.Event.Member)
	}
	if e.Event.Peer != "" {
		b.WriteString(" peer=" + e.Event.Peer)
	}
	if e.Event.Detail != "" {
		fmt.Fprintf(&b, " %q", e.Event.Detail)
	}
	return b.String()
}

func (e Log) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "log %s %s", strings.ToLower(e.Level.String()), e.Msg)
	for i := 0; i+1 < len(e.Args); i += 2 {
		fmt.Fprintf(&b, " %v=%v", e.Args[i], e.Args[i+1])
	}
	return b.String()
}

func (e ViewChanged) String() string { return fmt.Sprintf("view changed version=%d", e.Version) }
func (SelfDowned) String() string    { return "self downed" }
func (LeftCluster) String() string   { return "left" }
func (e Rejected) String() string    { return "rejected: " + e.Err.Error() }
func (e AllocateUpNumber) String() string {
	if e.After > 0 {
		return "allocate up-number after " + e.After.String()
	}
	return "allocate up-number"
}
func (e JoinSeeds) String() string { return "join seeds " + strings.Join(e.Addrs, ",") }
func (e RetryJoin) String() string { return "retry join after " + e.After.String() }
func (e Rejoin) String() string    { return "rejoin " + strings.Join(e.Addrs, ",") }
func (AwaitPushes) String() string { return "await pushes" }
func (e LeaveTransport) String() string {
	return "leave transport timeout=" + e.Timeout.String()
}

// String shows a heartbeat's observation, or a down notice's subject.
func (e SendDatagram) String() string {
	if e.DownNotice != "" {
		return "down notice to=" + e.To + " member=" + e.DownNotice
	}
	s := "heartbeat to=" + e.To
	var hb heartbeat
	if len(e.Msg) > 1 && json.Unmarshal(e.Msg[1:], &hb) == nil && hb.ObsVersion > 0 {
		s += fmt.Sprintf(" ov=%d u=%s", hb.ObsVersion, uidList(hb.Unreachable))
	}
	return s
}

func uidList(uids []string) string {
	if len(uids) == 0 {
		return "none"
	}
	return strings.Join(uids, ",")
}

// String shows each record's status.
func (e PushState) String() string {
	var recs []*record
	var parts []string
	if len(e.Msg) > 1 && json.Unmarshal(e.Msg[1:], &recs) == nil {
		for _, r := range recs {
			parts = append(parts, r.Member.UID()+":"+string(r.Status))
		}
	}
	return "push state to=" + e.To + " " + strings.Join(parts, ",")
}

// Freshness is what Fresh needs of the failure detector's ticks: the time
// of the last one, and that of the tick that found the one before it more
// than FailureTimeout ago (the process was frozen — a GC pause, SIGSTOP —
// or starved). A driver copies it out after each tick, so that Fresh,
// asked on every request, takes no lock.
type Freshness struct {
	Ticked, Thawed     bool
	LastTick, ThawedAt time.Duration
}

// At reports whether a member whose ticks are f may act on what it
// believes at now: its failure detector has run within failureTimeout, and
// not just after a freeze — it waits a failure timeout after the thaw, for
// the down notices and pushes that waited in its sockets to arrive.
func (f Freshness) At(now, failureTimeout time.Duration) bool {
	if !f.Ticked {
		return true
	}
	if now-f.LastTick > failureTimeout {
		return false
	}
	return !f.Thawed || now-f.ThawedAt >= failureTimeout
}

// Step takes one input at time now (the node clock's Elapsed) and returns
// the effects, in the order to carry them out.
func (m *MembershipState) Step(now time.Duration, in Input) []Effect {
	m.now, m.out, m.bumped = now, nil, false
	switch in := in.(type) {
	case InStart:
		m.out = append(m.out, AllocateUpNumber{Payload: m.upNumberPayload()})
	case InUpNumber:
		m.onUpNumber(in)
	case InBound:
		m.self.GossipAddr = in.Addr
	case InJoinTick:
		m.tryJoin()
	case InJoinResult:
		m.onJoinResult(in)
	case InTick:
		m.tick()
	case InReceived:
		m.onMessage(in.Msg)
	case InRemoteState:
		m.onRemoteState(in)
	case InMet:
		m.onMet(in.Meta)
	case InRejoinTick:
		m.rejoin(in.Alive)
	case InDown:
		m.down(in.UID)
	case InBeginLeave:
		m.beginLeave()
	case InFinishLeave:
		m.finishLeave()
	case InTransportLeft:
		if !m.left {
			m.left = true
			m.emit(protocol.Event{Type: protocol.EventLeaveCompleted})
			m.out = append(m.out, LeftCluster{})
		}
	case InFarewell:
		m.pushAll()
		m.out = append(m.out, AwaitPushes{})
	}
	if m.bumped {
		m.out = append(m.out, ViewChanged{Version: m.version})
	}
	out := m.out
	m.out = nil
	return out
}

func (m *MembershipState) emit(e protocol.Event) { m.out = append(m.out, Emit{e}) }

func (m *MembershipState) log(level slog.Level, msg string, args ...any) {
	m.out = append(m.out, Log{Level: level, Msg: msg, Args: args})
}

// bump records a change of the view.
func (m *MembershipState) bump() {
	m.version++
	m.bumped = true
}

// Self is this member (its up-number is 0 until allocated).
func (m *MembershipState) Self() Member { return m.self }

// Joined reports whether this member has joined a cluster (or bootstrapped
// one).
func (m *MembershipState) Joined() bool { return m.joined }

// Freshness is the failure detector's ticks, for Fresh.
func (m *MembershipState) Freshness() Freshness { return m.fresh }

// Fresh is Freshness().At(now, FailureTimeout).
func (m *MembershipState) Fresh(now time.Duration) bool {
	return m.fresh.At(now, m.cfg.FailureTimeout)
}

// Snapshot is the view: Membership's Snapshot.
func (m *MembershipState) Snapshot() Snapshot {
	s := Snapshot{Version: m.version}
	uid := m.self.UID()
	s.Self = MemberState{Member: m.self, Status: StatusJoining, Reachable: true}
	if r, ok := m.state[uid]; ok && m.joined {
		s.Self.Status = r.Status
	}
	for id, r := range m.state {
		if id == uid && !m.joined {
			continue
		}
		ms := MemberState{Member: r.Member, Status: r.Status, Reachable: id == uid || m.reachable[id]}
		if r.Status.Final() {
			s.Gone = append(s.Gone, ms)
		} else {
			s.Members = append(s.Members, ms)
		}
	}
	byAge := func(a []MemberState) {
		sort.Slice(a, func(i, j int) bool { return a[i].IsOlderThan(a[j].Member) })
	}
	byAge(s.Members)
	byAge(s.Gone)
	return s
}

// SelfStatus is Snapshot().Self.Status without building the view.
func (m *MembershipState) SelfStatus() Status {
	if r, ok := m.state[m.self.UID()]; ok && m.joined {
		return r.Status
	}
	return StatusJoining
}

// Find is Snapshot().Find(uid) without building the view.
func (m *MembershipState) Find(uid string) (MemberState, bool) {
	r, ok := m.state[uid]
	self := m.self.UID()
	if !ok || uid == self && !m.joined {
		return MemberState{}, false
	}
	return MemberState{Member: r.Member, Status: r.Status, Reachable: uid == self || m.reachable[uid]}, true
}

// Meta is this member as others learn it when their transport meets it.
func (m *MembershipState) Meta() []byte {
	b, _ := json.Marshal(m.self)
	return b
}

// LocalState is the state to give a member exchanging state with this one
// (join tells whether it joins): nothing unless this member is in good
// standing. A node joining through this one must then find a member
// elsewhere; a downed member's view would make the joiner part of a cluster
// that has cast it out.
func (m *MembershipState) LocalState(join bool) []byte {
	if !m.inGoodStanding() {
		return []byte("[]")
	}
	b, _ := json.Marshal(m.state.records())
	return b
}

// inGoodStanding reports whether this node is a member that may vouch for
// others: joined, and neither down nor removed.
func (m *MembershipState) inGoodStanding() bool {
	if !m.joined {
		return false
	}
	r := m.state[m.self.UID()]
	return r != nil && !r.Status.Final()
}

// firstEver reports whether m holds the journal's first up-number.
func firstEver(m Member) bool { return m.UpNumber == 1 }

// upNumberPayload is the journal entry that allocates this member's
// up-number.
func (m *MembershipState) upNumberPayload() []byte {
	payload, _ := json.Marshal(struct {
		UID  string `json:"uid"`
		Addr string `json:"http_addr"`
	}{m.self.UID(), m.self.HTTPAddr})
	return payload
}

// onUpNumber takes the journal's answer; on a failure it asks again after
// a back-off. An unknown outcome may have allocated a number that is then
// never used: harmless, up-numbers need only be unique and ordered.
func (m *MembershipState) onUpNumber(in InUpNumber) {
	if m.self.UpNumber > 0 {
		return
	}
	if in.Err == nil && in.UpNumber > 0 {
		m.self.UpNumber = in.UpNumber
		return
	}
	err := in.Err
	if err == nil {
		err = fmt.Errorf("the journal gave up-number %d", in.UpNumber)
	}
	if !m.allocReported {
		m.emit(protocol.Event{Type: protocol.EventJournalUnavailable, Detail: "allocating up-number: " + err.Error()})
		m.allocReported = true
	}
	m.log(slog.LevelWarn, "cannot allocate up-number from the journal; retrying", "err", err)
	m.out = append(m.out, AllocateUpNumber{Payload: m.upNumberPayload(), After: m.allocBackoff})
	m.allocBackoff = min(2*m.allocBackoff, allocMaxBackoff)
}

// The join. The first seed bootstraps a new cluster at once if it is the
// first member the journal ever gave an up-number to, else if no seed
// answers within SeedTimeout (unless JoinOnly).

func (m *MembershipState) otherSeeds() []string {
	var others []string
	for _, s := range m.cfg.Seeds {
		if s != m.self.GossipAddr {
			others = append(others, s)
		}
	}
	return others
}

func (m *MembershipState) firstSeed() bool {
	return len(m.cfg.Seeds) == 0 || m.cfg.Seeds[0] == m.self.GossipAddr
}

func (m *MembershipState) tryJoin() {
	if m.joined {
		return
	}
	if !m.joinStarted {
		m.joinStarted, m.joinStart = true, m.now
	}
	if m.firstSeed() && !m.cfg.JoinOnly && firstEver(m.self) {
		// Up-number 1: no member was ever allocated one from this journal
		// before this one, and every member allocates before it joins, so
		// no cluster exists to be joined, and asking the other seeds (each
		// unreachable one costs a connect timeout) and waiting for one is
		// time lost. The other seeds never bootstrap; they join this one.
		// A restarted first seed has a later number, and waits as before.
		m.log(slog.LevelInfo, "the first member of this journal: bootstrapping a new cluster")
		m.completeJoin()
		return
	}
	if others := m.otherSeeds(); len(others) > 0 {
		m.out = append(m.out, JoinSeeds{Addrs: others})
		return
	}
	m.joinTimeouts()
}

// onRemoteState merges the state a push/pull gave; if it answered this
// member's join and names members, the member has joined.
func (m *MembershipState) onRemoteState(in InRemoteState) {
	var recs []*record
	if json.Unmarshal(in.State, &recs) == nil {
		m.merge(recs)
	}
	if in.Join && !m.joined && m.joinStarted && m.knowsMembers() {
		// A member of a cluster answered this member's join: it has
		// joined, as in Akka, where the first seed to acknowledge
		// wins. Waiting for the other seeds' answers (memberlist's Join
		// asks them one by one, and one across a partition answers only
		// at its stream timeout, 10 s) would leave this member silent
		// while the members that took it in judge it, and unable to
		// tell what it learnt (a member downed by a side that cannot
		// reach it) — found by majorities-ring-register in simulation.
		m.log(slog.LevelDebug, "a member answered the join: joined")
		m.completeJoin()
	}
}

func (m *MembershipState) onJoinResult(in InJoinResult) {
	if m.joined {
		return
	}
	if in.Answered > 0 && m.knowsMembers() {
		m.completeJoin()
		return
	}
	// Seeds that answer but have not joined a cluster themselves
	// (restarted members waiting, like this one, on the far side of a
	// partition) are no cluster to join: as in Akka, only a member
	// acknowledges a join. Joining each other would make an island with
	// its own singletons.
	m.log(slog.LevelDebug, "no member of a cluster answered", "answered", in.Answered, "err", in.Err)
	m.joinTimeouts()
}

// joinTimeouts bootstraps a new cluster if waiting has been long enough,
// else asks to try again.
func (m *MembershipState) joinTimeouts() {
	firstSeed := m.firstSeed()
	waited := m.now - m.joinStart
	if firstSeed && !m.cfg.JoinOnly && waited >= m.cfg.SeedTimeout {
		m.log(slog.LevelInfo, "no seed answered; bootstrapping a new cluster")
		m.completeJoin()
		return
	}
	if firstSeed && m.cfg.JoinOnly && m.cfg.Previous != nil && waited >= m.cfg.DownNoticeFor {
		if gone, why := m.previousGone(); gone {
			m.log(slog.LevelInfo, "the cluster that downed this node is gone; bootstrapping a new cluster", "why", why)
			m.emit(protocol.Event{Type: protocol.EventDowningDecision, Detail: "bootstrapping: the previous cluster is gone (" + why + ")"})
			m.completeJoin()
			return
		}
	}
	m.out = append(m.out, RetryJoin{After: joinRetryInterval})
}

// completeJoin makes this member Up, and tells the members it knows.
func (m *MembershipState) completeJoin() {
	m.joined = true
	m.state.merge(&record{Member: m.self, Status: StatusUp})
	m.noteNew(m.self.UID())
	m.dirty = true
	m.bump()
	m.pushAll()
}

// knowsMembers reports whether this member has learnt of another member
// that is not down or removed: state that only members of a cluster hand
// out (an unjoined node shares none, see LocalState and onMet).
func (m *MembershipState) knowsMembers() bool {
	for uid, r := range m.state {
		if uid != m.self.UID() && !r.Status.Final() {
			return true
		}
	}
	return false
}

// previousGone reports whether every member of MembershipConfig.Previous
// other than this node's own is down or removed there, or has been seen
// since as a newer incarnation at its address.
func (m *MembershipState) previousGone() (bool, string) {
	var replaced []string
	for _, pm := range m.cfg.Previous.Members {
		if pm.Name == m.self.Name || pm.Status.Final() {
			continue
		}
		newer := false
		for inc := range m.incarnations[pm.GossipAddr] {
			if inc != pm.Incarnation {
				newer = true
			}
		}
		if !newer {
			return false, ""
		}
		replaced = append(replaced, pm.UID())
	}
	sort.Strings(replaced)
	if len(replaced) == 0 {
		return true, "every other member was downed or removed"
	}
	return true, "the others were downed, or restarted as new processes: " + strings.Join(replaced, ",")
}

// rejoin re-joins known members the transport has lost, so that the
// cluster merges again after a long partition.
func (m *MembershipState) rejoin(aliveAddrs []string) {
	alive := map[string]bool{}
	for _, a := range aliveAddrs {
		alive[a] = true
	}
	want := map[string]bool{}
	for _, s := range m.cfg.Seeds {
		want[s] = true
	}
	for _, ms := range m.Snapshot().Members {
		want[ms.GossipAddr] = true
	}
	var addrs []string
	for a := range want {
		if !alive[a] && a != m.self.GossipAddr {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return
	}
	sort.Strings(addrs)
	m.out = append(m.out, Rejoin{Addrs: addrs})
}

// tick runs the failure detector and the resolver, then sends heartbeats
// and down notices and, if the state changed, pushes it.
func (m *MembershipState) tick() {
	if !m.joined {
		return
	}
	m.judge()
	now := m.now
	selfUID := m.self.UID()
	hb := m.heartbeat(nil)
	var targets []string
	live := map[string]bool{}
	for _, uid := range slices.Sorted(maps.Keys(m.state)) {
		if r := m.state[uid]; uid != selfUID && !r.Status.Final() {
			targets = append(targets, r.Member.GossipAddr)
			live[r.Member.GossipAddr] = true
		}
	}
	slices.Sort(targets) // sent in a fixed order
	type notice struct {
		uid string
		msg []byte
	}
	notices := map[string]notice{}
	for _, uid := range slices.Sorted(maps.Keys(m.downSeen)) {
		r := m.state[uid]
		if r == nil || r.Status != StatusDown || now-m.downSeen[uid] > m.cfg.DownNoticeFor {
			delete(m.downSeen, uid)
			continue
		}
		// Not once a new incarnation holds the address (this one's own
		// included: a member learns its previous incarnation was downed).
		if !live[r.Member.GossipAddr] && r.Member.GossipAddr != m.self.GossipAddr && !m.cfg.BlindToOneWay {
			notices[r.Member.GossipAddr] = notice{uid, m.heartbeat(r)}
		}
	}
	for _, a := range targets {
		m.out = append(m.out, SendDatagram{To: a, Msg: hb})
	}
	for _, a := range slices.Sorted(maps.Keys(notices)) {
		m.out = append(m.out, SendDatagram{To: a, Msg: notices[a].msg, DownNotice: notices[a].uid})
	}
	if m.dirty {
		m.dirty = false
		m.pushAll()
	}
}

// judge runs the failure detector and the resolver.
func (m *MembershipState) judge() {
	now := m.now
	if m.fresh.Ticked && now-m.fresh.LastTick > m.cfg.FailureTimeout {
		m.fresh.ThawedAt, m.fresh.Thawed = now, true
		m.log(slog.LevelWarn, "this member was frozen or starved; not fresh for a failure timeout", "silent", now-m.fresh.LastTick)
	}
	m.fresh.LastTick, m.fresh.Ticked = now, true
	selfUID := m.self.UID()
	var unreach []string
	for _, uid := range slices.Sorted(maps.Keys(m.state)) {
		r := m.state[uid]
		if uid == selfUID || r.Status.Final() {
			continue
		}
		ok := now-m.lastHeard[uid] <= m.cfg.FailureTimeout
		if was, seen := m.reachable[uid]; !seen || was != ok {
			m.reachable[uid] = ok
			if ok {
				delete(m.unreachAt, uid)
				if seen {
					m.emit(protocol.Event{Type: protocol.EventMemberReachable, Member: uid})
				}
			} else {
				m.unreachAt[uid] = now
				m.emit(protocol.Event{Type: protocol.EventMemberUnreachable, Member: uid})
				m.log(slog.LevelInfo, "member unreachable", "peer", uid)
			}
			m.bump()
		}
		if !ok {
			unreach = append(unreach, uid)
		}
	}
	sort.Strings(unreach)
	if me := m.state[selfUID]; me != nil && !slices.Equal(me.Unreachable, unreach) {
		m.obsVersion++
		me.ObsVersion = m.obsVersion
		me.Unreachable = unreach
		m.dirty = true
	}
	if me := m.state[selfUID]; me != nil && !me.Status.Final() {
		m.resolve()
	}
}

// resolve is the split-brain resolver's clock-driven part.
func (m *MembershipState) resolve() {
	now := m.now
	d := m.cfg.Downing
	selfUID := m.self.UID()
	if d.Strategy == AutoDown {
		var down []string
		for _, uid := range slices.Sorted(maps.Keys(m.unreachAt)) {
			if r := m.state[uid]; r != nil && !r.Status.Final() && now-m.unreachAt[uid] >= d.AutoDownAfter {
				down = append(down, uid)
			}
		}
		if len(down) > 0 {
			m.apply(decision{down: down, reason: "auto-down: unreachable for " + d.AutoDownAfter.String()})
		}
		return
	}
	v := view{self: selfUID, observations: map[string][]string{}}
	for _, uid := range slices.Sorted(maps.Keys(m.state)) {
		r := m.state[uid]
		if r.Status.Final() {
			continue
		}
		v.members = append(v.members, MemberState{Member: r.Member, Status: r.Status, Reachable: uid == selfUID || m.reachable[uid]})
		if len(r.Unreachable) > 0 {
			v.observations[uid] = r.Unreachable
		}
	}
	if dec := m.resolver.step(d, now, v); !dec.empty() {
		m.apply(dec)
	}
}

// apply marks members down.
func (m *MembershipState) apply(d decision) {
	m.emit(protocol.Event{Type: protocol.EventDowningDecision, Detail: d.reason + "; down: " + strings.Join(d.down, ",")})
	m.log(slog.LevelWarn, "split-brain resolver decided", "reason", d.reason, "down", d.down)
	for _, uid := range d.down {
		r := m.state[uid]
		if r == nil || r.Status.Final() {
			continue
		}
		m.setStatus(r, StatusDown, d.reason)
	}
	m.resolver.reset()
}

// setStatus moves r forward to st, logging and acting on it.
func (m *MembershipState) setStatus(r *record, st Status, reason string) {
	before := r.Status
	if !m.state.merge(&record{Member: r.Member, Status: st, DownReason: reason}) {
		return
	}
	m.dirty = true
	m.noteStatus(r.Member.UID(), before)
	m.bump()
}

// noteStatus logs a status change of uid and reacts to this member being
// downed.
func (m *MembershipState) noteStatus(uid string, before Status) {
	r := m.state[uid]
	if r == nil || r.Status == before {
		return
	}
	switch r.Status {
	case StatusLeaving:
		m.emit(protocol.Event{Type: protocol.EventMemberLeaving, Member: uid})
	case StatusRemoved:
		m.emit(protocol.Event{Type: protocol.EventMemberRemoved, Member: uid})
	case StatusDown:
		if uid == m.self.UID() {
			m.emit(protocol.Event{Type: protocol.EventSelfDowned, Member: uid, Detail: r.DownReason})
			m.log(slog.LevelWarn, "this member was downed", "reason", r.DownReason)
			m.out = append(m.out, SelfDowned{})
		} else {
			m.emit(protocol.Event{Type: protocol.EventMemberDowned, Member: uid, Detail: r.DownReason})
			m.downSeen[uid] = m.now
		}
	}
	if r.Status.Final() {
		delete(m.reachable, uid)
		delete(m.unreachAt, uid)
		delete(m.lastHeard, uid)
		m.state.pruneGone(m.cfg.MaxGone)
	}
}

// noteNew handles a member seen for the first time.
func (m *MembershipState) noteNew(uid string) {
	r := m.state[uid]
	if r == nil {
		return
	}
	if r.Status.Final() {
		switch {
		case uid == m.self.UID() && r.Status == StatusDown:
			m.noteStatus(uid, StatusUp)
		case r.Status == StatusDown:
			// First learnt as down (a new incarnation learns what the
			// cluster decided while it was away): tell it too. The member
			// that decided may not reach it, and this one may.
			m.downSeen[uid] = m.now
		}
		return
	}
	m.lastHeard[uid] = m.now // grace period before judging it
	m.emit(protocol.Event{Type: protocol.EventMemberUp, Member: uid, Detail: r.Member.String()})
	// A newer incarnation at the same address proves the older process is
	// gone (it held the port): down the old one at once.
	for _, id := range slices.Sorted(maps.Keys(m.state)) {
		o := m.state[id]
		if id == uid || o.Status.Final() || o.Member.GossipAddr != r.Member.GossipAddr {
			continue
		}
		older, newer := o, r
		if r.Member.IsOlderThan(o.Member) {
			older, newer = r, o
		}
		m.emit(protocol.Event{Type: protocol.EventIncarnationReplaced, Member: older.Member.UID(), Detail: "by " + newer.Member.UID()})
		m.setStatus(older, StatusDown, "replaced by new incarnation "+newer.Member.UID())
	}
}

// merge folds remote records into the state.
func (m *MembershipState) merge(recs []*record) {
	changed := false
	for _, r := range recs {
		if r == nil {
			continue
		}
		uid := r.Member.UID()
		if uid == m.self.UID() && r.Status == StatusUp && !m.joined {
			continue // our own record comes from us
		}
		prev, known := m.state[uid]
		var before Status
		if known {
			before = prev.Status
		}
		if !m.state.merge(r) {
			continue
		}
		changed = true
		if !known {
			m.noteNew(uid)
		} else {
			m.noteStatus(uid, before)
		}
	}
	if changed {
		m.bump()
	}
}

// heartbeat is the datagram every member sends every other member. It
// carries the sender's own reachability observation, so that a member
// whose outgoing packets are lost (a one-way partition: it hears everyone,
// nobody hears it, and no TCP push gets through either way) still learns
// that the others find it unreachable, and can down itself before they
// act. A heartbeat to a member the sender knows is down carries that
// member's down record instead (the down notice).
type heartbeat struct {
	From   string `json:"f"`
	Addr   string `json:"a"`
	Digest uint64 `json:"d"`
	// ObsVersion and Unreachable are the sender's observation.
	ObsVersion  uint64   `json:"ov,omitempty"`
	Unreachable []string `json:"u,omitempty"`
	// Down is the receiver's own record, down, in a down notice.
	Down *record `json:"down,omitempty"`
}

const (
	msgHeartbeat byte = 'h'
	msgState     byte = 's'
)

// heartbeat encodes a heartbeat; down, if not nil, makes it a down notice
// for that member.
func (m *MembershipState) heartbeat(down *record) []byte {
	hb := heartbeat{From: m.self.UID(), Addr: m.self.GossipAddr, Digest: m.state.digest(), Down: down}
	if me := m.state[m.self.UID()]; me != nil {
		hb.ObsVersion, hb.Unreachable = me.ObsVersion, me.Unreachable
	}
	b, _ := json.Marshal(hb)
	return append([]byte{msgHeartbeat}, b...)
}

// encodeState is the full state as a pushed message.
func (m *MembershipState) encodeState() []byte {
	b, _ := json.Marshal(m.state.records())
	return append([]byte{msgState}, b...)
}

// pushAll pushes the full state to every other member not final, in the
// order of their addresses.
func (m *MembershipState) pushAll() {
	var addrs []string
	for uid, r := range m.state {
		if uid != m.self.UID() && !r.Status.Final() {
			addrs = append(addrs, r.Member.GossipAddr)
		}
	}
	if len(addrs) == 0 {
		return
	}
	slices.Sort(addrs)
	msg := m.encodeState()
	for _, a := range addrs {
		m.out = append(m.out, PushState{To: a, Msg: msg})
	}
}

// onMessage handles a datagram or a pushed state.
func (m *MembershipState) onMessage(buf []byte) {
	if len(buf) < 2 {
		return
	}
	switch buf[0] {
	case msgHeartbeat:
		var hb heartbeat
		if json.Unmarshal(buf[1:], &hb) != nil {
			return
		}
		r := m.state[hb.From]
		if r != nil && !r.Status.Final() {
			m.lastHeard[hb.From] = m.now
		}
		if m.joined && !m.cfg.BlindToOneWay {
			// Only a member this one knows speaks for itself (as for
			// joins: only members vouch).
			if r != nil && hb.ObsVersion > r.ObsVersion {
				m.merge([]*record{{Member: r.Member, Status: r.Status, ObsVersion: hb.ObsVersion, Unreachable: hb.Unreachable}})
			}
			// A down notice is taken from any sender: it is this member's
			// own record, down, which only a decider writes, and a pushed
			// state carrying it is merged from anyone anyway. The sender
			// that can still reach a downed member is often one it does
			// not know: a new incarnation of a member the same decision
			// downed, which learnt the decision when it joined (a ring
			// partition, where the decider cannot reach the member it
			// downed).
			if d := hb.Down; d != nil && d.Status == StatusDown && d.Member.UID() == m.self.UID() {
				m.merge([]*record{d})
			}
		}
		if m.joined && hb.Digest != m.state.digest() && hb.Addr != "" {
			m.out = append(m.out, PushState{To: hb.Addr, Msg: m.encodeState()})
		}
	case msgState:
		var recs []*record
		if json.Unmarshal(buf[1:], &recs) != nil {
			return
		}
		m.merge(recs)
	}
}

// onMet learns of new members from the transport as early as possible.
func (m *MembershipState) onMet(meta []byte) {
	var nm Member
	if json.Unmarshal(meta, &nm) != nil || nm.Name == "" || nm.Incarnation == "" || nm.UpNumber <= 0 {
		return
	}
	if !m.joined && nm.GossipAddr != "" {
		if m.incarnations[nm.GossipAddr] == nil {
			m.incarnations[nm.GossipAddr] = map[string]bool{}
		}
		m.incarnations[nm.GossipAddr][nm.Incarnation] = true
	}
	// Only a member takes a newcomer in; before joining, this node learns
	// the members from a member's state.
	if _, known := m.state[nm.UID()]; !known && nm.UID() != m.self.UID() && m.inGoodStanding() {
		m.merge([]*record{{Member: nm, Status: StatusUp}})
	}
}

// errNotJoined: an operation that needs a member asked before joining.
var errNotJoined = errors.New("cluster: not joined yet")

// down marks member uid Down on an operator's word (see Cluster.Down).
func (m *MembershipState) down(uid string) {
	if !m.joined {
		m.out = append(m.out, Rejected{errNotJoined})
		return
	}
	r := m.state[uid]
	if r == nil {
		m.out = append(m.out, Rejected{fmt.Errorf("%w: %s", ErrUnknownMember, uid)})
		return
	}
	if r.Status.Final() {
		return
	}
	const reason = "downed by an operator"
	m.emit(protocol.Event{Type: protocol.EventDowningDecision, Detail: reason + "; down: " + uid})
	m.log(slog.LevelWarn, "member downed by an operator", "down", uid)
	m.setStatus(r, StatusDown, reason)
}

// beginLeave marks this member Leaving.
func (m *MembershipState) beginLeave() {
	r := m.state[m.self.UID()]
	if r == nil || !m.joined {
		m.out = append(m.out, Rejected{errNotJoined})
		return
	}
	if r.Status.Final() {
		m.out = append(m.out, Rejected{fmt.Errorf("cluster: cannot leave: this member is %s", r.Status)})
		return
	}
	m.setStatus(r, StatusLeaving, "")
}

// finishLeave marks this member Removed, pushes the state to every member
// and, once the pushes are done, leaves the transport.
func (m *MembershipState) finishLeave() {
	r := m.state[m.self.UID()]
	if r == nil || !m.joined {
		m.out = append(m.out, Rejected{errNotJoined})
		return
	}
	if r.Status == StatusDown {
		m.out = append(m.out, Rejected{errors.New("cluster: cannot leave: this member was downed")})
		return
	}
	m.setStatus(r, StatusRemoved, "")
	m.pushAll()
	m.out = append(m.out, AwaitPushes{}, LeaveTransport{Timeout: leaveTimeout})
}

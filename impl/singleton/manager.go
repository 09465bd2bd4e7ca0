package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
)

// Defaults of Config.
const (
	DefaultRetryInterval      = time.Second
	DefaultMaxHandOverRetries = 15
	DefaultMaxTakeOverRetries = 10
	DefaultStopTimeout        = 10 * time.Second
	// DefaultDownRemovalMarginFactor: a zero Config.DownRemovalMargin
	// becomes this many RetryIntervals.
	DefaultDownRemovalMarginFactor = 2
	// minAttemptTimeout bounds how long one hand-over / take-over request
	// may wait for its answer from below (it is max(RetryInterval, this)).
	minAttemptTimeout = 500 * time.Millisecond
)

// Config configures a Manager.
type Config struct {
	// Name is the singleton's name, [a-z0-9-]{1,64} (e.g. "id-generator").
	Name string
	// Role: only members with this role host it ("" = all members).
	Role string
	// RetryInterval is the hand-over / take-over retry interval and the
	// back-off before a failed instance is restarted. Default 1s.
	RetryInterval time.Duration
	// MaxHandOverRetries: HandOverToMe requests a new oldest sends to the
	// previous one without an answer before it decides (start if the
	// previous oldest is final or unknown, otherwise give up and restart
	// from Start). Default 15.
	MaxHandOverRetries int
	// MaxTakeOverRetries: TakeOverFromMe requests an oldest that is no
	// longer the oldest sends before it stops its instance anyway. Default
	// min(10, MaxHandOverRetries-1); it must be less than MaxHandOverRetries
	// so that the previous oldest stops before the new one gives up.
	MaxTakeOverRetries int
	// DownRemovalMargin is how long a new oldest waits, after it has seen
	// the previous oldest downed (or vanish), before it starts the instance:
	// time for the downed member to learn its fate and stop its own
	// instance. 0 means the default, DefaultDownRemovalMarginFactor ×
	// RetryInterval (2s with the default interval); a negative value means
	// no wait.
	DownRemovalMargin time.Duration
	// StopTimeout is how long an instance may take to stop (from the moment
	// the manager asks it to) before the manager gives up waiting, forgets
	// it and counts it as stopped. Default 10s.
	StopTimeout time.Duration
}

func (c *Config) normalize() error {
	if !validName(c.Name) {
		return fmt.Errorf("singleton: name %q must match [a-z0-9-]{1,64}", c.Name)
	}
	if c.RetryInterval < 0 || c.StopTimeout < 0 {
		return fmt.Errorf("singleton %s: RetryInterval and StopTimeout must not be negative", c.Name)
	}
	if c.MaxHandOverRetries < 0 || c.MaxTakeOverRetries < 0 {
		return fmt.Errorf("singleton %s: retry limits must not be negative", c.Name)
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.MaxHandOverRetries == 0 {
		c.MaxHandOverRetries = DefaultMaxHandOverRetries
	}
	if c.MaxTakeOverRetries == 0 {
		c.MaxTakeOverRetries = min(DefaultMaxTakeOverRetries, c.MaxHandOverRetries-1)
		if c.MaxTakeOverRetries < 1 {
			return fmt.Errorf("singleton %s: MaxHandOverRetries (%d) must be at least 2 so that MaxTakeOverRetries can be less", c.Name, c.MaxHandOverRetries)
		}
	}
	if c.MaxTakeOverRetries >= c.MaxHandOverRetries {
		return fmt.Errorf("singleton %s: MaxTakeOverRetries (%d) must be less than MaxHandOverRetries (%d), so that a previous oldest stops its instance before a new oldest gives up waiting for it",
			c.Name, c.MaxTakeOverRetries, c.MaxHandOverRetries)
	}
	switch {
	case c.DownRemovalMargin == 0:
		c.DownRemovalMargin = DefaultDownRemovalMarginFactor * c.RetryInterval
	case c.DownRemovalMargin < 0:
		c.DownRemovalMargin = 0
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	return nil
}

// Deps are what a Manager uses of its node.
type Deps struct {
	Membership cluster.Membership
	Peers      peer.Caller
	Clock      clock.Clock
	// Events receives the protocol steps; nil: a private log.
	Events *kit.EventLog
	// Logger: nil discards.
	Logger  *slog.Logger
	Factory Factory
}

// State is a manager's state.
type State string

// Manager states (as in Akka's ClusterSingletonManager).
const (
	StateStart          State = "start"
	StateYounger        State = "younger"
	StateBecomingOldest State = "becoming-oldest"
	StateOldest         State = "oldest"
	StateWasOldest      State = "was-oldest"
	StateHandingOver    State = "handing-over"
	StateStopping       State = "stopping"
	// StateEnd: this member left (or is leaving) and has handed over; it
	// will not run the singleton again.
	StateEnd State = "end"
	// StateStopped: this member was downed (or the manager shut down); it
	// will not run the singleton again.
	StateStopped State = "stopped"
)

// ManagerStatus is a manager's state as the node protocol shows it.
type ManagerStatus struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// Running: an instance runs here and accepts requests.
	Running bool `json:"running"`
	// Started counts instances this manager started.
	Started int64 `json:"started"`
	// Oldest is the oldest Up member with the role as this node sees it.
	Oldest string `json:"oldest,omitempty"`
	// Partner is the other party of the hand-over in progress (previous
	// oldest while becoming oldest, new oldest while handing over).
	Partner string `json:"partner,omitempty"`
	// Retries are hand-over / take-over requests sent to Partner without a
	// confirmation.
	Retries    int  `json:"retries,omitempty"`
	HandedOver bool `json:"handed_over"`
}

// Manager is the ClusterSingletonManager of one singleton on one member.
type Manager struct {
	cfg            Config
	d              Deps
	log            *slog.Logger
	base           string // /internal/v1/singleton/{name}/
	attemptTimeout time.Duration

	inbox   chan inMsg
	results chan sendResult
	once    atomic.Bool // Run was called
	active  atomic.Bool // Run is running
	exited  chan struct{}

	handedOver     chan struct{}
	handedOverOnce sync.Once
	started        atomic.Int64

	mu     sync.Mutex
	run    *runner // the instance (running, starting or stopping); owner writes under mu
	status ManagerStatus

	// Owner goroutine only.
	ctx         context.Context
	wg          sync.WaitGroup
	snap        cluster.Snapshot
	state       State
	partner     string
	margin      bool   // BecomingOldest: waiting DownRemovalMargin (else handing over)
	retries     int    // requests to partner without confirmation
	gen         uint64 // bumped at every state or partner change
	hint        string // the previous oldest (Younger, Start)
	hold        bool   // Younger after handing over: wait for a new view
	holdVersion uint64
	takenFrom   string // Oldest: the member this one took over from
	handOverTo  string // whom to tell HandOverDone when the instance has stopped
	// handedTo is the member this one last told it may start (HandOverDone,
	// or "done" to its HandOverToMe) since it last ran an instance itself;
	// handedToDown is when this member first saw it down (Elapsed, valid
	// while handedToSeenDown).
	handedTo         string
	handedToDown     time.Duration
	handedToSeenDown bool
	lastOldest       string
	numbered         int // instances created
	stateTimer       clock.Timer
	stopTimer        clock.Timer
}

type inMsg struct {
	op    string
	from  string
	reply chan string
}

type sendResult struct {
	gen   uint64
	op    string
	to    string
	state string
	err   error
}

// Protocol operations (path suffixes) and answers.
const (
	opHandOverToMe   = "hand-over-to-me"
	opTakeOverFromMe = "take-over-from-me"
	opHandOverDone   = "hand-over-done"
	opRequest        = "request"

	answerInProgress = "in-progress"
	answerDone       = "done"
	answerAck        = "ack"
	answerIgnored    = "ignored"
)

// fromBody is the body of hand-over-to-me, take-over-from-me and
// hand-over-done.
type fromBody struct {
	From string `json:"from"`
}

// stateBody is their answer.
type stateBody struct {
	State string `json:"state"`
}

// NewManager validates cfg and returns a manager; Run drives it.
func NewManager(cfg Config, d Deps) (*Manager, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	switch {
	case d.Membership == nil:
		return nil, errors.New("singleton: Deps.Membership is required")
	case d.Peers == nil:
		return nil, errors.New("singleton: Deps.Peers is required")
	case d.Clock == nil:
		return nil, errors.New("singleton: Deps.Clock is required")
	case d.Factory == nil:
		return nil, errors.New("singleton: Deps.Factory is required")
	}
	if d.Events == nil {
		d.Events = kit.NewEventLog(d.Clock.Now, 0)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		cfg:            cfg,
		d:              d,
		log:            d.Logger.With("singleton", cfg.Name),
		base:           routePrefix + cfg.Name + "/",
		attemptTimeout: max(cfg.RetryInterval, minAttemptTimeout),
		inbox:          make(chan inMsg),
		results:        make(chan sendResult, 16),
		exited:         make(chan struct{}),
		handedOver:     make(chan struct{}),
		state:          StateStart,
	}
	m.status = ManagerStatus{Name: cfg.Name, State: StateStart}
	return m, nil
}

// Config returns the configuration with defaults applied.
func (m *Manager) Config() Config { return m.cfg }

// Name is the singleton's name.
func (m *Manager) Name() string { return m.cfg.Name }

// HandedOver is closed when this member no longer runs the singleton and
// will not run it, because it is leaving (or downed, or the manager has
// shut down) and any hand-over has finished — or it never ran it. A
// graceful leave waits on it.
func (m *Manager) HandedOver() <-chan struct{} { return m.handedOver }

// Status returns the manager's current state.
func (m *Manager) Status() ManagerStatus {
	m.mu.Lock()
	st, r := m.status, m.run
	m.mu.Unlock()
	st.Running = r != nil && r.running()
	st.Started = m.started.Load()
	select {
	case <-m.handedOver:
		st.HandedOver = true
	default:
	}
	return st
}

// Handle passes req to the instance running here, in mailbox order. It
// returns an error wrapping ErrNotRunning (definite) if none runs here.
func (m *Manager) Handle(ctx context.Context, req Request) (json.RawMessage, error) {
	if req.Op == "" {
		return nil, fmt.Errorf("%w: empty op", ErrBadRequest)
	}
	m.mu.Lock()
	r := m.run
	m.mu.Unlock()
	if r == nil {
		return nil, fmt.Errorf("%w: singleton %s", ErrNotRunning, m.cfg.Name)
	}
	return r.call(ctx, req)
}

// Run is the manager's owner goroutine. It returns nil once ctx is done,
// after it has stopped the instance (waiting at most StopTimeout).
func (m *Manager) Run(ctx context.Context) error {
	if !m.once.CompareAndSwap(false, true) {
		return errors.New("singleton: Run called twice")
	}
	m.ctx = ctx
	m.active.Store(true)
	defer func() {
		m.active.Store(false)
		close(m.exited)
	}()
	changed := m.d.Membership.Changed()
	m.snap = m.d.Membership.Snapshot()
	m.evaluate()
	m.checkHandedOver()
	m.publish()
	for {
		var runDone <-chan struct{}
		if m.run != nil {
			runDone = m.run.done
		}
		select {
		case <-ctx.Done():
			m.shutdown()
			return nil
		case <-changed:
			changed = m.d.Membership.Changed()
			m.snap = m.d.Membership.Snapshot()
			m.evaluate()
		case msg := <-m.inbox:
			msg.reply <- m.onMessage(msg)
		case res := <-m.results:
			m.onResult(res)
		case <-timerC(m.stateTimer):
			m.stateTimer = nil
			m.onStateTimer()
		case <-timerC(m.stopTimer):
			m.stopTimer = nil
			if m.run != nil {
				m.log.Warn("singleton instance did not stop in time; forgetting it", "stop_timeout", m.cfg.StopTimeout)
				m.run.giveUp(fmt.Sprintf("instance %d did not stop within %v; forgotten", m.run.num, m.cfg.StopTimeout))
			}
		case <-runDone:
			m.onRunnerDone()
		}
		m.checkHandedOver()
		m.publish()
	}
}

func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

func (m *Manager) shutdown() {
	m.stopStateTimer()
	if r := m.run; r != nil {
		m.requestStop(true)
		select {
		case <-r.done:
		case <-timerC(m.stopTimer):
			m.stopTimer = nil
			r.giveUp(fmt.Sprintf("instance %d did not stop within %v at shutdown; forgotten", r.num, m.cfg.StopTimeout))
		}
		m.clearRun()
	}
	if m.stopTimer != nil {
		m.stopTimer.Stop()
		m.stopTimer = nil
	}
	m.setState(StateStopped, "")
	m.wg.Wait()
	m.closeHandedOver()
	m.publish()
}

func (m *Manager) publish() {
	st := ManagerStatus{
		Name:    m.cfg.Name,
		State:   m.state,
		Oldest:  m.lastOldest,
		Partner: m.partner,
		Retries: m.retries,
	}
	m.mu.Lock()
	m.status = st
	m.mu.Unlock()
}

func (m *Manager) selfUID() string { return m.snap.Self.UID() }

// selfGoing reports whether this member is leaving or gone.
func (m *Manager) selfGoing() bool {
	s := m.snap.Self.Status
	return s == cluster.StatusLeaving || s.Final()
}

func (m *Manager) event(typ, peerUID, detail string) {
	m.d.Events.Append(protocol.Event{Type: typ, Member: m.selfUID(), Peer: peerUID, Singleton: m.cfg.Name, Detail: detail})
}

func (m *Manager) setState(s State, partner string) {
	if s != m.state || partner != m.partner {
		m.log.Info("singleton manager state", "from", m.state, "to", s, "partner", partner)
	}
	m.state, m.partner = s, partner
	m.retries = 0
	m.margin = false
	m.gen++
	m.stopStateTimer()
}

func (m *Manager) stopStateTimer() {
	if m.stateTimer != nil {
		m.stateTimer.Stop()
		m.stateTimer = nil
	}
}

func (m *Manager) armStateTimer(d time.Duration) {
	m.stopStateTimer()
	m.stateTimer = m.d.Clock.NewTimer(d)
}

func (m *Manager) closeHandedOver() {
	m.handedOverOnce.Do(func() {
		m.log.Info("singleton handed over (or never run here)")
		close(m.handedOver)
	})
}

func (m *Manager) checkHandedOver() {
	if m.run != nil {
		return
	}
	switch m.state {
	case StateEnd, StateStopped:
		m.closeHandedOver()
	case StateStart, StateYounger:
		if m.selfGoing() {
			m.closeHandedOver()
		}
	}
}

// evaluate reacts to a new view of the cluster.
func (m *Manager) evaluate() {
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
		m.d.Events.Append(protocol.Event{Type: protocol.EventOldestChanged, Member: oldestUID, Peer: m.lastOldest, Singleton: m.cfg.Name, Detail: detail})
		m.lastOldest = oldestUID
	}

	// This member was downed or removed: stop at once, never start again.
	if self.Status.Final() {
		if m.state != StateStopped && m.state != StateEnd {
			m.log.Warn("this member is "+string(self.Status)+"; stopping the singleton at once", "running", m.run != nil)
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
		if !hasOldest || (!isSelf && oldestUID != m.partner) {
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
			m.log.Info("previous oldest removed; it stopped before it left", "previous", m.partner)
			m.startOldest()
		}
	case StateOldest, StateWasOldest:
		m.evaluateOldest(oldest, hasOldest)
	}
}

// evaluateOldest handles a new view in Oldest or WasOldest.
func (m *Manager) evaluateOldest(oldest cluster.MemberState, hasOldest bool) {
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
			if m.run == nil {
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
func (m *Manager) successor() (cluster.MemberState, bool) {
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

func (m *Manager) toYounger(hint string, hold bool) {
	m.setState(StateYounger, "")
	m.hint = hint
	m.hold = hold
	m.holdVersion = m.snap.Version
}

type prevKind int

const (
	prevNone prevKind = iota
	prevHandOver
	prevMargin
)

// choosePrev decides, for a member that has become the oldest, which member
// may still run the singleton: hint is the previous oldest it saw.
func (m *Manager) choosePrev(hint string) (prevKind, string) {
	s := m.snap
	self := s.Self
	selfUID := self.UID()
	downed := ""
	if hint != "" && hint != selfUID {
		ms, ok := s.Find(hint)
		switch {
		case !ok || ms.Status == cluster.StatusDown:
			downed = hint
		case !ms.Status.Final():
			return prevHandOver, hint
		}
	}
	// An older member not yet gone (leaving) may run it.
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
	if downed != "" {
		return prevMargin, downed
	}
	if hint == "" {
		// Nothing seen yet: an older member downed before this manager
		// started may not have stopped yet.
		for _, ms := range s.Gone {
			if ms.Status == cluster.StatusDown && ms.HasRole(m.cfg.Role) && ms.IsOlderThan(self.Member) {
				return prevMargin, ms.UID()
			}
		}
	}
	return prevNone, ""
}

func (m *Manager) becomeOldest(hint string) {
	kind, prev := m.choosePrev(hint)
	switch kind {
	case prevHandOver:
		m.enterHandOver(prev)
	case prevMargin:
		m.enterMargin(prev, "previous oldest downed or gone")
	default:
		m.log.Info("oldest, no previous oldest known: starting")
		m.startOldest()
	}
}

func (m *Manager) enterHandOver(prev string) {
	m.setState(StateBecomingOldest, prev)
	m.sendHandOverToMe()
}

func (m *Manager) enterMargin(prev, why string) {
	m.setState(StateBecomingOldest, prev)
	m.margin = true
	if m.cfg.DownRemovalMargin <= 0 {
		m.startOldest()
		return
	}
	m.log.Info("waiting DownRemovalMargin before starting", "previous", prev, "margin", m.cfg.DownRemovalMargin, "why", why)
	m.armStateTimer(m.cfg.DownRemovalMargin)
}

// startOldest moves to Oldest and starts the instance.
func (m *Manager) startOldest() {
	from := ""
	if m.state == StateBecomingOldest {
		from = m.partner
	}
	m.setState(StateOldest, "")
	m.takenFrom = from
	if m.takenFrom != "" {
		if tf, ok := m.snap.Find(m.takenFrom); !ok || tf.Status != cluster.StatusUp {
			m.takenFrom = ""
		}
	}
	m.startInstance()
}

func (m *Manager) startInstance() {
	m.handTo("") // it is this member's own to run now
	if m.run != nil {
		// Never two instances here; the old one must stop first. Only
		// reachable if it is still stopping: retry after it is done.
		m.log.Warn("previous instance still stopping; start deferred")
		return
	}
	m.numbered++
	r := newRunner(m.ctx, m.numbered, m.cfg.Name, m.selfUID(), m.d.Factory, m.d.Events, m.log,
		func() { m.started.Add(1) })
	m.mu.Lock()
	m.run = r
	m.mu.Unlock()
	go r.loop()
}

func (m *Manager) clearRun() {
	m.mu.Lock()
	m.run = nil
	m.mu.Unlock()
}

// requestStop sends the termination message to the instance (now: ahead of
// queued requests) and starts the StopTimeout clock.
func (m *Manager) requestStop(now bool) {
	if m.run == nil {
		return
	}
	m.run.stop(now)
	if m.stopTimer == nil {
		m.stopTimer = m.d.Clock.NewTimer(m.cfg.StopTimeout)
	}
}

// enterStopping stops the instance without a hand-over partner (none left,
// or it did not answer).
func (m *Manager) enterStopping(partner string) {
	m.setState(StateStopping, partner)
	if m.run != nil {
		m.requestStop(false)
		return
	}
	m.afterStopping()
}

func (m *Manager) afterStopping() {
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
func (m *Manager) afterHandOver(to string) {
	if m.selfGoing() {
		m.setState(StateEnd, "")
		return
	}
	// Not leaving: the views disagree. Do not take it back before this
	// member's view changes (or the new oldest asks to take over).
	m.toYounger(to, true)
}

func (m *Manager) onRunnerDone() {
	r := m.run
	m.clearRun()
	if m.stopTimer != nil {
		m.stopTimer.Stop()
		m.stopTimer = nil
	}
	if to := m.handOverTo; to != "" {
		m.handOverTo = ""
		m.event(protocol.EventHandOverDone, to, "sent: instance stopped")
		m.handTo(to)
		m.send(opHandOverDone, to)
	}
	switch m.state {
	case StateOldest:
		m.log.Warn("singleton instance ended; restarting after back-off", "err", r.failErr, "retry_interval", m.cfg.RetryInterval)
		m.armStateTimer(m.cfg.RetryInterval)
	case StateHandingOver:
		m.afterHandOver(m.partner)
	case StateStopping:
		m.afterStopping()
	}
}

func (m *Manager) onStateTimer() {
	switch m.state {
	case StateOldest:
		if m.run == nil {
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

func (m *Manager) sendHandOverToMe() {
	m.retries++
	m.event(protocol.EventHandOverToMe, m.partner, fmt.Sprintf("sent (attempt %d)", m.retries))
	m.send(opHandOverToMe, m.partner)
	m.armStateTimer(m.cfg.RetryInterval)
}

func (m *Manager) sendTakeOver() {
	m.retries++
	m.event(protocol.EventTakeOverFromMe, m.partner, fmt.Sprintf("sent (attempt %d)", m.retries))
	m.send(opTakeOverFromMe, m.partner)
	m.armStateTimer(m.cfg.RetryInterval)
}

// lookup finds a member's addresses.
func (m *Manager) lookup(uid string) (cluster.MemberState, bool) {
	if ms, ok := m.snap.Find(uid); ok {
		return ms, true
	}
	return m.d.Membership.Find(uid)
}

// send POSTs op to the member uid in the background; the answer comes back
// through m.results tagged with the current generation.
func (m *Manager) send(op, uid string) {
	ms, ok := m.lookup(uid)
	if !ok {
		m.log.Info("cannot send: member unknown", "op", op, "to", uid)
		return
	}
	gen := m.gen
	body := fromBody{From: m.selfUID()}
	ctx := m.ctx
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		cctx, cancel := clock.WithTimeout(ctx, m.d.Clock, m.attemptTimeout)
		defer cancel()
		var resp stateBody
		err := m.d.Peers.Call(cctx, ms.Target(), m.base+op, body, &resp)
		select {
		case m.results <- sendResult{gen: gen, op: op, to: uid, state: resp.State, err: err}:
		case <-ctx.Done():
		}
	}()
}

func (m *Manager) onResult(res sendResult) {
	if res.err != nil {
		m.log.Debug("peer request failed", "op", res.op, "to", res.to, "err", res.err)
		return
	}
	if res.op != opHandOverToMe || res.gen != m.gen || m.state != StateBecomingOldest || m.margin || res.to != m.partner {
		return
	}
	switch res.state {
	case answerInProgress:
		m.event(protocol.EventHandOverInProgress, res.to, "received")
		m.retries = 0
	case answerDone:
		m.event(protocol.EventHandOverDone, res.to, "received: previous instance stopped")
		m.startOldest()
	}
}

func (m *Manager) onMessage(msg inMsg) string {
	switch msg.op {
	case opHandOverToMe:
		return m.onHandOverToMe(msg.from)
	case opTakeOverFromMe:
		return m.onTakeOverFromMe(msg.from)
	case opHandOverDone:
		m.event(protocol.EventHandOverDone, msg.from, "received")
		if m.state == StateBecomingOldest && msg.from == m.partner {
			m.startOldest()
		}
		return answerAck
	}
	return answerIgnored
}

func (m *Manager) onHandOverToMe(from string) string {
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
		if m.run != nil {
			m.setState(StateHandingOver, from)
			m.handOverTo = from
			m.requestStop(false)
			return inProgress()
		}
		m.afterHandOver(from)
		return done()
	case StateHandingOver, StateStopping, StateStopped, StateEnd:
		if m.run != nil {
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
func (m *Manager) handTo(uid string) {
	m.handedTo, m.handedToSeenDown = uid, false
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
func (m *Manager) handedElsewhere(from string) bool {
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
		now := m.d.Clock.Elapsed()
		if !m.handedToSeenDown {
			m.handedToSeenDown, m.handedToDown = true, now
		}
		if now-m.handedToDown >= m.cfg.DownRemovalMargin {
			m.handTo("")
			return false
		}
	}
	return true
}

func (m *Manager) onTakeOverFromMe(from string) string {
	m.event(protocol.EventTakeOverFromMe, from, "received")
	if _, ok := m.snap.Find(from); !ok {
		m.log.Info("ignoring TakeOverFromMe from an unknown member", "from", from)
		return answerIgnored
	}
	switch m.state {
	case StateStart, StateYounger:
		if !m.mayTakeOverFrom(from) {
			m.log.Info("ignoring TakeOverFromMe: this member is not next in line", "from", from)
			return answerIgnored
		}
		m.enterHandOver(from)
	case StateBecomingOldest:
		if m.partner == from && !m.margin {
			return answerAck
		}
		// The sender runs the instance: it is the one to hand over.
		m.enterHandOver(from)
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
func (m *Manager) mayTakeOverFrom(from string) bool {
	self := m.snap.Self
	if self.Status != cluster.StatusUp || !self.HasRole(m.cfg.Role) {
		return false
	}
	oldest, ok := m.snap.Oldest(m.cfg.Role)
	return ok && (oldest.UID() == self.UID() || oldest.UID() == from)
}

package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol/kit"
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

// Normalized is c with its defaults filled in, or why it is invalid: what
// NewManagerState needs, for a driver other than Manager (a simulation).
func (c Config) Normalized() (Config, error) {
	err := c.normalize()
	return c, err
}

// AttemptTimeout is how long one hand-over or take-over request waits for
// its answer.
func (c Config) AttemptTimeout() time.Duration { return max(c.RetryInterval, minAttemptTimeout) }

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

// Manager is the ClusterSingletonManager of one singleton on one member:
// the driver of its ManagerState. Its owner goroutine (Run) feeds the state
// machine the member's views of the cluster, the other managers' messages,
// the answers to its own, its timers and its instance's end, and carries
// out what the state machine decides: requests to other members (each in a
// goroutine of its own, the answer fed back), the instance's runner, the
// timers on the node's clock, the events.
type Manager struct {
	cfg            Config
	d              Deps
	log            *slog.Logger
	base           string // /internal/v1/singleton/{name}/
	attemptTimeout time.Duration

	inbox   chan inMsg
	results chan InResult
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
	ctx        context.Context
	wg         sync.WaitGroup
	st         *ManagerState
	snap       cluster.Snapshot // the last view given to st
	stateTimer clock.Timer
	stopTimer  clock.Timer
}

type inMsg struct {
	op    string
	from  string
	reply chan Reply
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
	// answerDeclined answers a HandOverDone its receiver does not act on
	// (it is no longer becoming the oldest from the sender): the sender
	// need not wait for it to hand the singleton on.
	answerDeclined = "declined"
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
	log := d.Logger.With("singleton", cfg.Name)
	m := &Manager{
		cfg:            cfg,
		d:              d,
		log:            log,
		base:           routePrefix + cfg.Name + "/",
		attemptTimeout: cfg.AttemptTimeout(),
		inbox:          make(chan inMsg),
		results:        make(chan InResult, 16),
		exited:         make(chan struct{}),
		handedOver:     make(chan struct{}),
		st:             NewManagerState(cfg, log),
	}
	m.status = m.st.Status()
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
	m.view()
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
			m.view()
		case msg := <-m.inbox:
			msg.reply <- m.step(InMessage{Op: msg.op, From: msg.from})
		case res := <-m.results:
			m.step(res)
		case <-timerC(m.stateTimer):
			m.stateTimer = nil
			m.step(InStateTimer{})
		case <-timerC(m.stopTimer):
			m.stopTimer = nil
			m.step(InStopTimer{})
		case <-runDone:
			err := m.run.failErr
			m.clearRun()
			m.step(InInstanceDone{Err: err})
		}
	}
}

func timerC(t clock.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// view steps the state machine on the membership's current view.
func (m *Manager) view() {
	m.snap = m.d.Membership.Snapshot()
	m.step(InView{Snapshot: m.snap})
}

// step takes one input and carries out the effects; it returns the Reply
// the state machine gave, if any.
func (m *Manager) step(in Input) (answer Reply) {
	for _, e := range m.st.Step(m.d.Clock.Elapsed(), in) {
		switch e := e.(type) {
		case Emit:
			m.d.Events.Append(e.Event)
		case Send:
			m.send(e)
		case StartInstance:
			r := newRunner(m.ctx, e.Num, m.cfg.Name, m.snap.Self.UID(), m.d.Factory, m.d.Events, m.log,
				func() { m.started.Add(1) })
			m.mu.Lock()
			m.run = r
			m.mu.Unlock()
			go r.loop()
		case StopInstance:
			if m.run != nil {
				m.run.stop(e.Now)
			}
		case GiveUp:
			if m.run != nil {
				m.run.giveUp(e.Reason)
			}
		case ArmStateTimer:
			stopTimer(&m.stateTimer)
			m.stateTimer = m.d.Clock.NewTimer(e.After)
		case CancelStateTimer:
			stopTimer(&m.stateTimer)
		case ArmStopTimer:
			stopTimer(&m.stopTimer)
			m.stopTimer = m.d.Clock.NewTimer(e.After)
		case CancelStopTimer:
			stopTimer(&m.stopTimer)
		case Reply:
			answer = e
		case HandedOver:
			m.closeHandedOver()
		}
	}
	m.publish()
	return answer
}

func stopTimer(t *clock.Timer) {
	if *t != nil {
		(*t).Stop()
		*t = nil
	}
}

func (m *Manager) shutdown() {
	m.step(InShutdown{})
	if r := m.run; r != nil {
		select {
		case <-r.done:
		case <-timerC(m.stopTimer):
			m.stopTimer = nil
			r.giveUp(fmt.Sprintf("instance %d did not stop within %v at shutdown; forgotten", r.num, m.cfg.StopTimeout))
		}
		m.clearRun()
		m.step(InInstanceDone{Err: r.failErr})
	}
	stopTimer(&m.stopTimer)
	stopTimer(&m.stateTimer)
	m.wg.Wait()
	m.closeHandedOver()
	m.publish()
}

func (m *Manager) publish() {
	st := m.st.Status()
	m.mu.Lock()
	m.status = st
	m.mu.Unlock()
}

func (m *Manager) closeHandedOver() {
	m.handedOverOnce.Do(func() {
		close(m.handedOver)
	})
}

func (m *Manager) clearRun() {
	m.mu.Lock()
	m.run = nil
	m.mu.Unlock()
}

// lookup finds a member's addresses.
func (m *Manager) lookup(uid string) (cluster.MemberState, bool) {
	if ms, ok := m.snap.Find(uid); ok {
		return ms, true
	}
	return m.d.Membership.Find(uid)
}

// send POSTs the request in the background; the answer comes back through
// m.results, tagged with the state machine's generation at the time.
func (m *Manager) send(s Send) {
	ms, ok := m.lookup(s.To)
	if !ok {
		m.log.Info("cannot send: member unknown", "op", s.Op, "to", s.To)
		return
	}
	body := fromBody{From: m.snap.Self.UID()}
	ctx := m.ctx
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		cctx, cancel := clock.WithTimeout(ctx, m.d.Clock, m.attemptTimeout)
		defer cancel()
		var resp stateBody
		err := m.d.Peers.Call(cctx, ms.Target(), m.base+s.Op, body, &resp)
		select {
		case m.results <- InResult{Gen: s.Gen, Op: s.Op, To: s.To, Said: resp.State, Err: err}:
		case <-ctx.Done():
		}
	}()
}

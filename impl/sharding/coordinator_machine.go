package sharding

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
)

// CoordinatorMachine is the decisions of one ShardCoordinator instance,
// as a state machine: answering register, get-shard-home and
// graceful-shutdown; making a home host a shard before anyone is sent
// there; the hand-off protocol (every region begins buffering, the owner
// stops the shard, only then is it deallocated); rebalancing; terminating
// the regions of members that are gone. Step does no I/O and reads no
// clock: persisting is an effect (CoAppend) whose outcome comes back as an
// input, one append at a time — a change takes effect only once the
// journal has it, and no decision is taken on a state an append in flight
// may change. The coordinator instance drives it over the journal, the
// peer client and the membership; a simulation over its own.
type CoordinatorMachine struct {
	cfg      CoordinatorConfig
	strategy AllocationStrategy
	log      *slog.Logger

	st    *State
	epoch uint64
	seq   int64
	// broken: a write was fenced, conflicted or has an unknown outcome;
	// this instance must not act any more (the manager replaces it).
	broken  error
	stopped bool
	snap    cluster.Snapshot

	// In memory only, as in Akka: a new coordinator starts with none.
	rebalancing  map[string]*handOffRun // shards being handed off
	hosting      map[string]bool        // shards whose host-shard is in flight
	shuttingDown map[string]*shutdownRun
	downSince    map[string]time.Duration
	// terminating: regions whose termination is being persisted.
	terminating map[string]bool

	// writes wait for the append in flight (appending) to be done.
	writes    []*coWrite
	appending *coWrite
	// waits are the continuations of effects in flight, by tag.
	waits   map[uint64]coWait
	lastTag uint64

	now time.Duration
	out []CoEffect
}

// CoordinatorConfig is what a CoordinatorMachine decides with.
type CoordinatorConfig struct {
	Settings Settings
	// Self is the member uid running the coordinator.
	Self string
}

// handOffRun is one shard's hand-off in progress.
type handOffRun struct {
	owner, why string
	pending    int     // begin-hand-off answers awaited
	errs       []error // of begin-hand-off
}

// shutdownRun is a region's graceful shutdown in progress: the shards it
// waits for in this round.
type shutdownRun struct {
	waiting map[string]bool
	started int
	before  int
	timer   bool
}

// coWrite is a change to persist: decided when its turn comes (on the
// state as the appends before it left it), then done with the outcome.
type coWrite struct {
	decide func() ([]CoordinatorEvent, error)
	done   func(evs []CoordinatorEvent, err error)
	evs    []CoordinatorEvent
	tag    uint64
}

// NewCoordinatorMachine returns the machine of an instance that recovered
// st from the journal (its events up to seq) under the writer epoch epoch.
// strategy nil means NewLeastShardAllocation(RebalanceThreshold,
// MaxSimultaneousRebalance).
func NewCoordinatorMachine(cfg CoordinatorConfig, strategy AllocationStrategy, st *State, epoch uint64, seq int64, log *slog.Logger) *CoordinatorMachine {
	cfg.Settings = cfg.Settings.WithDefaults()
	if strategy == nil {
		strategy = NewLeastShardAllocation(cfg.Settings.RebalanceThreshold, cfg.Settings.MaxSimultaneousRebalance)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &CoordinatorMachine{
		cfg: cfg, strategy: strategy, log: log, st: st, epoch: epoch, seq: seq,
		rebalancing: map[string]*handOffRun{}, hosting: map[string]bool{},
		shuttingDown: map[string]*shutdownRun{}, downSince: map[string]time.Duration{},
		terminating: map[string]bool{},
		waits:       map[uint64]coWait{},
	}
}

// CoInput is what a CoordinatorMachine steps on.
type CoInput interface{ coInput() }

// CoRequest is a request to the coordinator (its singleton's mailbox);
// it is answered by a CoAnswer with the same ID.
type CoRequest struct {
	ID      uint64
	Op      string
	Payload json.RawMessage
}

// CoView is a new view of the cluster (watching members follows it).
type CoView struct{ Snapshot cluster.Snapshot }

// CoWatchTick: look again at the members that are gone (the margin may
// have passed).
type CoWatchTick struct{}

// CoRebalanceTick: time to rebalance (every RebalanceInterval).
type CoRebalanceTick struct{}

// CoAppended is the outcome of a CoAppend: the journal's last sequence
// number, or the error.
type CoAppended struct {
	Tag  uint64
	Last int64
	Err  error
}

// CoHighestIs is the outcome of a CoCheckHighest.
type CoHighestIs struct {
	Tag     uint64
	Highest int64
	Err     error
}

// CoCalled is the outcome of a CoCall.
type CoCalled struct {
	Tag uint64
	Err error
}

// CoTimer: the timer armed by CoArm fired.
type CoTimer struct{ Tag uint64 }

// CoStop: the instance stops; what is in flight is abandoned (the journal
// is its truth) and nothing more is decided.
type CoStop struct{}

func (CoRequest) coInput()       {}
func (CoView) coInput()          {}
func (CoWatchTick) coInput()     {}
func (CoRebalanceTick) coInput() {}
func (CoAppended) coInput()      {}
func (CoHighestIs) coInput()     {}
func (CoCalled) coInput()        {}
func (CoTimer) coInput()         {}
func (CoStop) coInput()          {}

// CoEffect is what a Step asks its driver to do, in order.
type CoEffect interface{ coEffect() }

// CoAppend: append the events to the coordinator's journal id, expecting
// ExpectSeq events there, under Epoch; step CoAppended.
type CoAppend struct {
	Tag       uint64
	ExpectSeq int64
	Epoch     uint64
	Events    []CoordinatorEvent
}

// CoCheckHighest: read the journal's highest sequence number; step
// CoHighestIs.
type CoCheckHighest struct{ Tag uint64 }

// CoCall: send a region protocol request (Op one of host-shard,
// begin-hand-off, hand-off) for Shard to Region, giving up after Timeout;
// step CoCalled.
type CoCall struct {
	Tag               uint64
	Region, Op, Shard string
	Timeout           time.Duration
}

// CoArm: step CoTimer after the delay.
type CoArm struct {
	Tag   uint64
	After time.Duration
}

// CoAnswer answers the request ID: Reply (to marshal) or Err.
type CoAnswer struct {
	ID    uint64
	Reply any
	Err   error
}

// CoEmit: append the event to the node's event log.
type CoEmit struct{ Event protocol.Event }

func (CoAppend) coEffect()       {}
func (CoCheckHighest) coEffect() {}
func (CoCall) coEffect()         {}
func (CoArm) coEffect()          {}
func (CoAnswer) coEffect()       {}
func (CoEmit) coEffect()         {}

// Step takes one input at time now (the clock's Elapsed reading) and
// returns the effects to carry out, in order.
func (m *CoordinatorMachine) Step(now time.Duration, in CoInput) []CoEffect {
	m.now = now
	m.out = nil
	switch in := in.(type) {
	case CoRequest:
		m.request(in)
	case CoView:
		m.snap = in.Snapshot
		m.watchMembers()
	case CoWatchTick:
		m.watchMembers()
	case CoRebalanceTick:
		m.rebalance()
	case CoAppended:
		m.resume(in.Tag, in)
	case CoHighestIs:
		m.resume(in.Tag, in)
	case CoCalled:
		m.resume(in.Tag, in)
	case CoTimer:
		m.resume(in.Tag, in)
	case CoStop:
		m.stopped = true
		m.waits = map[uint64]coWait{}
		m.writes, m.appending = nil, nil
	default:
		panic(fmt.Sprintf("sharding: unknown coordinator input %T", in))
	}
	out := m.out
	m.out = nil
	return out
}

func (m *CoordinatorMachine) emit(e CoEffect) { m.out = append(m.out, e) }

func (m *CoordinatorMachine) event(typ, region, shard, detail string) {
	m.emit(CoEmit{Event: protocol.Event{Type: typ, Member: region, EntityType: m.cfg.Settings.TypeName, Shard: shard, Detail: detail}})
}

// coWait is the continuation of an effect in flight: it takes only the
// input that reports that kind of effect.
type coWait struct {
	kind string
	k    func(CoInput)
}

// await registers the continuation of an effect in flight and returns its
// tag; kind is the type of input it waits for.
func (m *CoordinatorMachine) await(kind CoInput, k func(CoInput)) uint64 {
	m.lastTag++
	m.waits[m.lastTag] = coWait{kind: fmt.Sprintf("%T", kind), k: k}
	return m.lastTag
}

// resume runs the continuation of tag with in; an input of another kind,
// or for no effect in flight, is ignored (a driver's stale or mistaken
// report must not crash the coordinator).
func (m *CoordinatorMachine) resume(tag uint64, in CoInput) {
	w, ok := m.waits[tag]
	if !ok || m.stopped || w.kind != fmt.Sprintf("%T", in) {
		return
	}
	delete(m.waits, tag)
	w.k(in)
}

// call sends a region protocol request, or fails it at once if the
// region's member is gone.
func (m *CoordinatorMachine) call(region, op, shard string, timeout time.Duration, k func(error)) {
	if mem, ok := m.snap.Find(region); !ok || mem.Status.Final() {
		k(fmt.Errorf("member %s is gone", region))
		return
	}
	tag := m.await(CoCalled{}, func(in CoInput) { k(in.(CoCalled).Err) })
	m.emit(CoCall{Tag: tag, Region: region, Op: op, Shard: shard, Timeout: timeout})
}

// write persists a change: one append at a time, each decided on the state
// the appends before it left.
func (m *CoordinatorMachine) write(decide func() ([]CoordinatorEvent, error), done func([]CoordinatorEvent, error)) {
	m.writes = append(m.writes, &coWrite{decide: decide, done: done})
	m.pump()
}

func (m *CoordinatorMachine) pump() {
	for m.appending == nil && len(m.writes) > 0 && !m.stopped {
		w := m.writes[0]
		m.writes = m.writes[1:]
		if m.broken != nil {
			w.done(nil, m.brokenErr())
			continue
		}
		evs, err := w.decide()
		if err != nil || len(evs) == 0 {
			w.done(nil, err)
			continue
		}
		if m.cfg.Settings.Bugs.NoCoordinatorPersistence {
			// Deliberate bug: the state lives in memory only; a new
			// coordinator replays an empty journal.
			w.done(evs, m.apply(evs, m.seq))
			continue
		}
		w.evs = evs
		w.tag = m.await(CoAppended{}, func(in CoInput) { m.appended(in.(CoAppended)) })
		m.appending = w
		m.emit(CoAppend{Tag: w.tag, ExpectSeq: m.seq, Epoch: m.epoch, Events: evs})
	}
}

// appended: a fenced or conflicting append means another coordinator has
// taken over; an append with an unknown outcome leaves this instance
// unsure of its own state. Either way the instance is broken: the error
// wraps singleton.ErrInstanceFailed so that the manager stops it (and
// restarts it, recovering from the journal, if this member is still the
// oldest).
func (m *CoordinatorMachine) appended(in CoAppended) {
	w := m.appending
	m.appending = nil
	name := m.cfg.Settings.TypeName
	var err error
	switch {
	case in.Err == nil:
		err = m.apply(w.evs, in.Last)
	case errors.Is(in.Err, journal.ErrFenced), errors.Is(in.Err, journal.ErrSeqConflict):
		m.broken = in.Err
		m.log.Warn("coordinator is stale", "err", in.Err)
		err = fmt.Errorf("%w: coordinator %s (epoch %d) is stale: %w", singleton.ErrInstanceFailed, name, m.epoch, in.Err)
	case journal.IsDefinite(in.Err):
		err = fmt.Errorf("sharding coordinator %s: append: %w", name, in.Err)
	default:
		m.broken = in.Err
		m.log.Warn("coordinator append outcome unknown; instance will be replaced", "err", in.Err)
		err = fmt.Errorf("%w: %w: coordinator %s: append: %w", singleton.ErrInstanceFailed, singleton.ErrUnknownOutcome, name, in.Err)
	}
	if err != nil {
		w.done(nil, err)
	} else {
		w.done(w.evs, nil)
	}
	m.pump()
}

// apply folds persisted events into the state.
func (m *CoordinatorMachine) apply(evs []CoordinatorEvent, last int64) error {
	for _, e := range evs {
		if err := m.st.Apply(e); err != nil {
			// Decide produced an event that does not apply: a bug. The
			// journal has it; only a replay can tell what the state is.
			m.broken = err
			return fmt.Errorf("%w: %w", singleton.ErrInstanceFailed, err)
		}
	}
	m.seq = last
	return nil
}

// brokenErr: the request was not processed; another instance (or a
// restart of this one) must take it.
func (m *CoordinatorMachine) brokenErr() error {
	return fmt.Errorf("%w: %w: coordinator %s: %v", singleton.ErrInstanceFailed, singleton.ErrNotRunning, m.cfg.Settings.TypeName, m.broken)
}

func (m *CoordinatorMachine) answer(id uint64, reply any, err error) {
	m.emit(CoAnswer{ID: id, Reply: reply, Err: err})
}

func decode(req CoRequest, v any) error {
	if len(req.Payload) == 0 {
		return fmt.Errorf("%w: %s: missing payload", singleton.ErrBadRequest, req.Op)
	}
	if err := json.Unmarshal(req.Payload, v); err != nil {
		return fmt.Errorf("%w: %s: %w", singleton.ErrBadRequest, req.Op, err)
	}
	return nil
}

func (m *CoordinatorMachine) request(req CoRequest) {
	if m.stopped {
		m.answer(req.ID, nil, fmt.Errorf("%w: coordinator %s stopped", singleton.ErrNotRunning, m.cfg.Settings.TypeName))
		return
	}
	if m.broken != nil {
		m.answer(req.ID, nil, m.brokenErr())
		return
	}
	switch req.Op {
	case OpRegister:
		var rr RegisterRequest
		if err := decode(req, &rr); err != nil {
			m.answer(req.ID, nil, err)
			return
		}
		m.register(req.ID, rr)
	case OpGetShardHome:
		var gr GetShardHomeRequest
		if err := decode(req, &gr); err != nil {
			m.answer(req.ID, nil, err)
			return
		}
		m.getShardHome(req.ID, gr)
	case OpGracefulShutdown:
		var gr GracefulShutdownRequest
		if err := decode(req, &gr); err != nil {
			m.answer(req.ID, nil, err)
			return
		}
		m.gracefulShutdown(req.ID, gr)
	case OpState:
		m.answer(req.ID, m.State(), nil)
	default:
		m.answer(req.ID, nil, fmt.Errorf("%w: sharding coordinator: unknown op %q", singleton.ErrBadRequest, req.Op))
	}
}

func (m *CoordinatorMachine) register(id uint64, rr RegisterRequest) {
	if rr.Region == "" {
		m.answer(id, nil, fmt.Errorf("%w: register: empty region", singleton.ErrBadRequest))
		return
	}
	// A member the coordinator does not know yet would look gone to the
	// membership watch: let it retry once the views agree.
	mem, ok := m.snap.Find(rr.Region)
	switch {
	case !ok:
		m.answer(id, nil, fmt.Errorf("%w: register: member %s not known to the coordinator yet", singleton.ErrUnavailable, rr.Region))
		return
	case mem.Status.Final():
		m.answer(id, nil, fmt.Errorf("%w: register: member %s is %s", singleton.ErrUnavailable, rr.Region, mem.Status))
		return
	}
	m.write(func() ([]CoordinatorEvent, error) { return m.st.DecideRegister(rr.Region, rr.Proxy) },
		func(evs []CoordinatorEvent, err error) {
			if err != nil {
				m.answer(id, nil, err)
				return
			}
			if len(evs) > 0 {
				detail := "region"
				if rr.Proxy {
					detail = "proxy"
				}
				m.event(protocol.EventRegionRegistered, rr.Region, "", detail)
				m.log.Info("region registered", "region", rr.Region, "proxy", rr.Proxy)
			}
			m.answer(id, AckReply{Ack: true}, nil)
		})
}

// allocatable: new shards go only to regions whose member is Up and that
// are not shutting down, nor being terminated: a region whose shutdown
// handed off its last shard is no longer shutting down but still
// registered until its termination is written, and, holding nothing, it
// is the least loaded; a shard allocated to it then would be freed by the
// termination while the region starts it (found by join-rebalance in
// simulation: testdata/coordinator/found-allocated-while-terminating.txt).
func (m *CoordinatorMachine) allocatable(region string) bool {
	if m.shuttingDown[region] != nil || m.terminating[region] {
		return false
	}
	mem, ok := m.snap.Find(region)
	return ok && mem.Status == cluster.StatusUp
}

func (m *CoordinatorMachine) getShardHome(id uint64, gr GetShardHomeRequest) {
	if gr.Shard == "" {
		m.answer(id, nil, fmt.Errorf("%w: get-shard-home: empty shard", singleton.ErrBadRequest))
		return
	}
	if m.rebalancing[gr.Shard] != nil {
		m.answer(id, nil, fmt.Errorf("%w: %w: shard %s", singleton.ErrUnavailable, ErrRebalanceInProgress, gr.Shard))
		return
	}
	var home string
	m.write(func() ([]CoordinatorEvent, error) {
		if m.rebalancing[gr.Shard] != nil {
			return nil, fmt.Errorf("%w: %w: shard %s", singleton.ErrUnavailable, ErrRebalanceInProgress, gr.Shard)
		}
		h, evs, err := m.st.DecideAllocate(gr.Shard, gr.Region, m.st.Allocations(m.allocatable), m.strategy)
		if err != nil {
			return nil, fmt.Errorf("%w: allocate shard %s: %w", singleton.ErrUnavailable, gr.Shard, err)
		}
		home = h
		return evs, nil
	}, func(evs []CoordinatorEvent, err error) {
		if err != nil {
			m.answer(id, nil, err)
			return
		}
		fresh := len(evs) > 0
		reply := ShardHomeReply{Shard: gr.Shard, Region: home}
		if fresh {
			m.event(protocol.EventShardAllocated, home, gr.Shard, "requested by "+gr.Region)
			m.log.Info("shard allocated", "shard", gr.Shard, "region", home)
		}
		// The home must host the shard before anyone is sent there:
		// always for a new allocation, and again when the home itself
		// asks or was reported not to host it (a hand-off that a previous
		// coordinator began but never finished).
		if !fresh && gr.Region != home && gr.NotHere != home {
			m.answer(id, reply, nil)
			return
		}
		m.hosting[gr.Shard] = true
		m.ensureHosted(gr.Shard, home, fresh, m.seq, func(err error) {
			delete(m.hosting, gr.Shard)
			if err != nil {
				m.answer(id, nil, err)
				return
			}
			m.answer(id, reply, nil)
		})
	})
}

// ensureHosted sends host-shard to home. For an allocation this instance
// did not just make, it first checks that no newer coordinator has written
// since (a stale instance must not make a region host a shard that has
// moved on).
func (m *CoordinatorMachine) ensureHosted(shard, home string, fresh bool, seq int64, k func(error)) {
	host := func() {
		m.call(home, opHostShard, shard, m.cfg.Settings.hostTimeout(), func(err error) {
			if err != nil {
				err = fmt.Errorf("%w: host shard %s at %s: %w", singleton.ErrUnavailable, shard, home, err)
			}
			k(err)
		})
	}
	if fresh {
		host()
		return
	}
	tag := m.await(CoHighestIs{}, func(in CoInput) {
		h := in.(CoHighestIs)
		switch {
		case h.Err != nil:
			k(fmt.Errorf("%w: check journal before host-shard: %w", singleton.ErrUnavailable, h.Err))
		case h.Highest != seq:
			if m.broken == nil {
				m.broken = fmt.Errorf("journal has %d events, this instance wrote up to %d", h.Highest, seq)
			}
			k(m.brokenErr())
		default:
			host()
		}
	})
	m.emit(CoCheckHighest{Tag: tag})
}

func (m *CoordinatorMachine) gracefulShutdown(id uint64, gr GracefulShutdownRequest) {
	if gr.Region == "" {
		m.answer(id, nil, fmt.Errorf("%w: graceful-shutdown: empty region", singleton.ErrBadRequest))
		return
	}
	start := m.st.Regions[gr.Region] && m.shuttingDown[gr.Region] == nil
	m.answer(id, AckReply{Ack: true}, nil)
	if start {
		m.log.Info("graceful shutdown of region", "region", gr.Region)
		m.shuttingDown[gr.Region] = &shutdownRun{}
		m.shutdownRound(gr.Region)
	}
}

// shutdownRound hands off the region's shards, MaxSimultaneousRebalance at
// a time; once none is left it terminates the region.
func (m *CoordinatorMachine) shutdownRound(region string) {
	run := m.shuttingDown[region]
	if run == nil || m.stopped {
		return
	}
	owned := m.st.ShardsOf(region)
	if !m.st.Regions[region] {
		delete(m.shuttingDown, region)
		return
	}
	if len(owned) == 0 {
		delete(m.shuttingDown, region)
		m.terminate(region, "graceful shutdown")
		return
	}
	*run = shutdownRun{waiting: map[string]bool{}, before: len(owned)}
	for _, sh := range owned {
		if run.started >= m.cfg.Settings.MaxSimultaneousRebalance {
			break
		}
		if m.startHandOff(sh, "graceful shutdown") {
			run.waiting[sh] = true
			run.started++
		}
	}
	m.shutdownProgress(region)
}

// shutdownProgress goes on with a shutdown once its round's hand-offs are
// over: at once if it made progress, else after RetryInterval.
func (m *CoordinatorMachine) shutdownProgress(region string) {
	run := m.shuttingDown[region]
	if run == nil || len(run.waiting) > 0 || run.timer {
		return
	}
	if run.started == 0 || len(m.st.ShardsOf(region)) >= run.before {
		run.timer = true
		tag := m.await(CoTimer{}, func(CoInput) {
			run.timer = false
			m.shutdownRound(region)
		})
		m.emit(CoArm{Tag: tag, After: m.cfg.Settings.RetryInterval})
		return
	}
	m.shutdownRound(region)
}

// terminate persists RegionTerminated (which frees the region's shards).
func (m *CoordinatorMachine) terminate(region, why string) {
	if m.terminating[region] {
		return
	}
	m.terminating[region] = true
	var freed int
	m.write(func() ([]CoordinatorEvent, error) {
		freed = len(m.st.ShardsOf(region))
		return m.st.DecideTerminate(region), nil
	}, func(evs []CoordinatorEvent, err error) {
		delete(m.terminating, region)
		if err != nil {
			m.log.Warn("could not persist region termination", "region", region, "err", err)
			return
		}
		delete(m.downSince, region)
		if len(evs) > 0 {
			m.event(protocol.EventRegionTerminated, region, "", fmt.Sprintf("%s; %d shards freed", why, freed))
			m.log.Info("region terminated", "region", region, "why", why, "shards_freed", freed)
		}
	})
}

// startHandOff begins handing shard off from its region; false if it is
// not allocated, already being handed off, or being hosted right now.
//
// The hand-off protocol: every region and proxy begins buffering the
// shard, then the owner stops all its entities and answers, and only then
// is the shard deallocated (so the next get-shard-home allocates it anew).
// If any region does not answer, the round is abandoned and the shard
// stays where it is: safety over progress.
func (m *CoordinatorMachine) startHandOff(shard, why string) bool {
	owner, ok := m.st.Shards[shard]
	if !ok || m.rebalancing[shard] != nil || m.hosting[shard] || m.broken != nil {
		return false
	}
	run := &handOffRun{owner: owner, why: why}
	m.rebalancing[shard] = run
	targets := slices.Sorted(maps.Keys(m.st.Regions))
	targets = append(targets, slices.Sorted(maps.Keys(m.st.Proxies))...)
	m.event(protocol.EventShardHandOffBegun, owner, shard, why)
	for _, t := range targets {
		if mem, ok := m.snap.Find(t); !ok || mem.Status.Final() {
			continue // gone: it will be terminated
		}
		run.pending++
		m.call(t, opBeginHandOff, shard, m.cfg.Settings.hostTimeout(), func(err error) {
			run.pending--
			if err != nil {
				run.errs = append(run.errs, err)
			}
			if run.pending == 0 {
				m.handOffBegun(shard, run)
			}
		})
	}
	if run.pending == 0 {
		m.handOffBegun(shard, run)
	}
	return true
}

func (m *CoordinatorMachine) handOffBegun(shard string, run *handOffRun) {
	if err := errors.Join(run.errs...); err != nil {
		m.log.Info("hand-off abandoned: a region did not begin it", "shard", shard, "err", err)
		m.handOffOver(shard)
		return
	}
	timeout := m.cfg.Settings.HandOffTimeout + m.cfg.Settings.hostTimeout()
	if m.cfg.Settings.Bugs.StartBeforeStopped {
		// Deliberate bug: tell the owner to stop the shard but do not wait
		// for its ShardStopped; the shard is deallocated (and may be
		// allocated and started elsewhere) while its entities still run.
		m.call(run.owner, opHandOff, shard, timeout, func(err error) {
			if err != nil {
				m.log.Info("hand-off: the owner did not answer", "shard", shard, "owner", run.owner, "err", err)
			}
		})
		m.deallocate(shard, run)
		return
	}
	m.call(run.owner, opHandOff, shard, timeout, func(err error) {
		if err != nil {
			m.log.Info("hand-off abandoned: the owner did not answer", "shard", shard, "owner", run.owner, "err", err)
			m.handOffOver(shard)
			return
		}
		m.deallocate(shard, run)
	})
}

func (m *CoordinatorMachine) deallocate(shard string, run *handOffRun) {
	m.write(func() ([]CoordinatorEvent, error) { return m.st.DecideDeallocate(shard, run.owner), nil },
		func(evs []CoordinatorEvent, err error) {
			if err != nil {
				m.log.Warn("could not persist shard deallocation", "shard", shard, "err", err)
			} else {
				m.event(protocol.EventShardRebalanced, run.owner, shard, run.why)
				m.log.Info("shard handed off", "shard", shard, "from", run.owner, "why", run.why)
			}
			m.handOffOver(shard)
		})
}

// handOffOver ends a shard's hand-off, done or abandoned.
func (m *CoordinatorMachine) handOffOver(shard string) {
	delete(m.rebalancing, shard)
	for _, region := range slices.Sorted(maps.Keys(m.shuttingDown)) {
		if run := m.shuttingDown[region]; run.waiting[shard] {
			delete(run.waiting, shard)
			m.shutdownProgress(region)
		}
	}
}

// watchMembers terminates regions whose member is Removed (at once) or Down
// or unknown for DownRemovalMargin — time for a downed member to notice
// and stop its entities before they start elsewhere. A member that is
// merely unreachable keeps its shards.
func (m *CoordinatorMachine) watchMembers() {
	if m.stopped {
		return
	}
	all := slices.Sorted(maps.Keys(m.st.Regions))
	all = append(all, slices.Sorted(maps.Keys(m.st.Proxies))...)
	for _, uid := range all {
		mem, ok := m.snap.Find(uid)
		switch {
		case ok && !mem.Status.Final():
			delete(m.downSince, uid)
			continue
		case ok && mem.Status == cluster.StatusRemoved:
			m.terminate(uid, "member removed")
			continue
		}
		since, seen := m.downSince[uid]
		if !seen {
			m.downSince[uid] = m.now
			since = m.now
		}
		if m.now-since >= m.cfg.Settings.DownRemovalMargin {
			why := "member downed"
			if !ok {
				why = "member unknown"
			}
			m.terminate(uid, why)
		}
	}
}

// rebalance asks the strategy which shards to move and starts their
// hand-offs.
func (m *CoordinatorMachine) rebalance() {
	if m.broken != nil || m.stopped {
		return
	}
	current := m.st.Allocations(m.allocatable)
	inProgress := map[string]bool{}
	for sh := range m.rebalancing {
		inProgress[sh] = true
	}
	budget := m.cfg.Settings.MaxSimultaneousRebalance - len(inProgress)
	for _, sh := range m.strategy.Rebalance(current, inProgress) {
		if budget <= 0 {
			break
		}
		if m.startHandOff(sh, "rebalance") {
			budget--
		}
	}
}

// State returns the allocation table.
func (m *CoordinatorMachine) State() CoordinatorState {
	return CoordinatorState{
		Type: m.cfg.Settings.TypeName, Coordinator: m.cfg.Self,
		Regions:      m.st.Allocations(nil),
		Proxies:      slices.Sorted(maps.Keys(m.st.Proxies)),
		Rebalancing:  slices.Sorted(maps.Keys(m.rebalancing)),
		ShuttingDown: slices.Sorted(maps.Keys(m.shuttingDown)),
		Epoch:        m.epoch, Seq: m.seq,
	}
}

// Epoch and Seq are the writer epoch and the last event persisted.
func (m *CoordinatorMachine) Epoch() uint64 { return m.epoch }

// Seq: see Epoch.
func (m *CoordinatorMachine) Seq() int64 { return m.seq }

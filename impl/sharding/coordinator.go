package sharding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"
)

// Coordinator operations (singleton.Request.Op).
const (
	// OpRegister: RegisterRequest → AckReply.
	OpRegister = "register"
	// OpGetShardHome: GetShardHomeRequest → ShardHomeReply.
	OpGetShardHome = "get-shard-home"
	// OpGracefulShutdown: GracefulShutdownRequest → AckReply; the shards
	// of the region are handed off in the background.
	OpGracefulShutdown = "graceful-shutdown"
	// OpState: no payload → CoordinatorState.
	OpState = "state"
)

// RegisterRequest registers a region (member uid) with the coordinator.
type RegisterRequest struct {
	Region string `json:"region"`
	Proxy  bool   `json:"proxy,omitempty"`
}

// GetShardHomeRequest asks where a shard lives. NotHere names a home that
// answered it does not host the shard; the coordinator then makes it host
// the shard again before answering (after a hand-off it never finished).
type GetShardHomeRequest struct {
	Shard   string `json:"shard"`
	Region  string `json:"region"`
	NotHere string `json:"not_here,omitempty"`
}

// ShardHomeReply is the home of a shard.
type ShardHomeReply struct {
	Shard  string `json:"shard"`
	Region string `json:"region"`
}

// GracefulShutdownRequest asks for every shard of Region to be handed off.
type GracefulShutdownRequest struct {
	Region string `json:"region"`
}

// AckReply acknowledges a request.
type AckReply struct {
	Ack bool `json:"ack"`
}

// CoordinatorState is the allocation table as the node's status shows it.
type CoordinatorState struct {
	Type string `json:"type"`
	// Coordinator is the member uid running this coordinator.
	Coordinator string `json:"coordinator"`
	// Regions maps each registered hosting region to its shards.
	Regions      map[string][]string `json:"regions"`
	Proxies      []string            `json:"proxies"`
	Rebalancing  []string            `json:"rebalancing"`
	ShuttingDown []string            `json:"shutting_down"`
	Epoch        uint64              `json:"epoch"`
	Seq          int64               `json:"seq"`
}

// CoordinatorName is the singleton name of the coordinator of typeName:
// "shard-coordinator-" + the type lower-cased, characters outside
// [a-z0-9-] replaced by '-', cut to the singleton's 64 characters.
func CoordinatorName(typeName string) string {
	var b strings.Builder
	b.WriteString("shard-coordinator-")
	for _, c := range strings.ToLower(typeName) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// CoordinatorPID is the journal persistence id of typeName's coordinator.
func CoordinatorPID(typeName string) string { return "sharding/coordinator/" + typeName }

// CoordinatorFactory makes the ShardCoordinator singleton of s.TypeName.
// The instance fences the journal id and recovers its state by replaying
// it; every change is persisted (under its epoch and the expected sequence
// number) before it takes effect, so a stale instance can change nothing
// once a new one has started. strategy nil means
// NewLeastShardAllocation(RebalanceThreshold, MaxSimultaneousRebalance).
func CoordinatorFactory(s Settings, d Deps, strategy AllocationStrategy) singleton.Factory {
	s = s.WithDefaults()
	return func(ctx context.Context) (singleton.Instance, error) {
		if err := s.Validate(); err != nil {
			return nil, err
		}
		switch {
		case d.Membership == nil, d.Peers == nil, d.Clock == nil, d.Journal == nil:
			return nil, errors.New("sharding coordinator: Deps.Membership, Peers, Clock and Journal are required")
		}
		if d.Events == nil {
			d.Events = kit.NewEventLog(d.Clock.Now, 0)
		}
		if d.Logger == nil {
			d.Logger = slog.New(slog.DiscardHandler)
		}
		strat := strategy
		if strat == nil {
			strat = NewLeastShardAllocation(s.RebalanceThreshold, s.MaxSimultaneousRebalance)
		}
		c := &coordinator{
			s: s, d: d, strategy: strat,
			pid:          CoordinatorPID(s.TypeName),
			self:         d.Membership.Snapshot().Self.UID(),
			log:          d.Logger.With("coordinator", s.TypeName),
			st:           NewState(),
			rebalancing:  map[string]bool{},
			hosting:      map[string]bool{},
			shuttingDown: map[string]bool{},
			downSince:    map[string]time.Duration{},
		}
		if err := c.recover(ctx); err != nil {
			return nil, err
		}
		c.ctx, c.cancel = context.WithCancel(context.Background())
		c.wg.Add(1)
		go c.loop()
		c.event(protocol.EventCoordinatorStarted, c.self, "", fmt.Sprintf("epoch %d, %d events, %d regions, %d proxies, %d shards",
			c.epoch, c.seq, len(c.st.Regions), len(c.st.Proxies), len(c.st.Shards)))
		c.log.Info("coordinator started", "epoch", c.epoch, "seq", c.seq, "shards", len(c.st.Shards))
		return c, nil
	}
}

// coordinator is the ShardCoordinator instance. Handle runs one request at
// a time (the singleton's mailbox); a background goroutine rebalances and
// watches membership. Both change state only under mu, persisting first.
type coordinator struct {
	s        Settings
	d        Deps
	strategy AllocationStrategy
	pid      string
	self     string
	log      *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	st    *State
	epoch uint64
	seq   int64
	// broken: a write was fenced, conflicted or has an unknown outcome;
	// this instance must not act any more (the manager replaces it).
	broken error
	// In memory only, as in Akka: a new coordinator starts with none.
	rebalancing  map[string]bool          // shards being handed off
	hosting      map[string]bool          // shards whose host-shard is in flight
	shuttingDown map[string]bool          // regions in graceful shutdown
	downSince    map[string]time.Duration // Elapsed readings: a clock bump must not end the margin
}

func (c *coordinator) event(typ, region, shardID, detail string) {
	c.d.Events.Append(protocol.Event{Type: typ, Member: region, EntityType: c.s.TypeName, Shard: shardID, Detail: detail})
}

// recover fences the journal id and replays it.
func (c *coordinator) recover(ctx context.Context) error {
	epoch, highest, err := c.d.Journal.Fence(ctx, c.pid)
	if err != nil {
		return fmt.Errorf("sharding coordinator %s: fence: %w", c.s.TypeName, err)
	}
	evs, err := c.d.Journal.Replay(ctx, c.pid, 1, 0)
	if err != nil {
		return fmt.Errorf("sharding coordinator %s: replay: %w", c.s.TypeName, err)
	}
	var last int64
	for _, je := range evs {
		if je.Seq > highest {
			break
		}
		var e CoordinatorEvent
		if err := json.Unmarshal(je.Data, &e); err != nil {
			return fmt.Errorf("sharding coordinator %s: event %d: %w", c.s.TypeName, je.Seq, err)
		}
		if err := c.st.Apply(e); err != nil {
			return fmt.Errorf("sharding coordinator %s: event %d: %w", c.s.TypeName, je.Seq, err)
		}
		last = je.Seq
	}
	if last != highest {
		return fmt.Errorf("sharding coordinator %s: replay ended at %d, journal has %d", c.s.TypeName, last, highest)
	}
	c.epoch, c.seq = epoch, highest
	return nil
}

// persistLocked appends evs and applies them. A fenced or conflicting
// append means another coordinator has taken over; an append with an
// unknown outcome leaves this instance unsure of its own state. Either way
// the instance is broken: the error wraps singleton.ErrInstanceFailed so
// that the manager stops it (and restarts it, recovering from the journal,
// if this member is still the oldest).
func (c *coordinator) persistLocked(ctx context.Context, evs []CoordinatorEvent) error {
	if len(evs) == 0 {
		return nil
	}
	if c.broken != nil {
		return c.brokenErrLocked()
	}
	data, err := encodeEvents(evs)
	if err != nil {
		return fmt.Errorf("%w: encode events: %w", singleton.ErrInstanceFailed, err)
	}
	var last int64
	if c.s.Bugs.NoCoordinatorPersistence {
		// Deliberate bug: the state lives in memory only; a new
		// coordinator replays an empty journal.
		last = c.seq
	} else {
		last, err = c.d.Journal.Append(ctx, c.pid, c.seq, c.epoch, data)
	}
	switch {
	case err == nil:
	case errors.Is(err, journal.ErrFenced), errors.Is(err, journal.ErrSeqConflict):
		c.broken = err
		c.log.Warn("coordinator is stale", "err", err)
		return fmt.Errorf("%w: coordinator %s (epoch %d) is stale: %w", singleton.ErrInstanceFailed, c.s.TypeName, c.epoch, err)
	case journal.IsDefinite(err):
		return fmt.Errorf("sharding coordinator %s: append: %w", c.s.TypeName, err)
	default:
		c.broken = err
		c.log.Warn("coordinator append outcome unknown; instance will be replaced", "err", err)
		return fmt.Errorf("%w: %w: coordinator %s: append: %w", singleton.ErrInstanceFailed, singleton.ErrUnknownOutcome, c.s.TypeName, err)
	}
	for _, e := range evs {
		if err := c.st.Apply(e); err != nil {
			// Decide produced an event that does not apply: a bug. The
			// journal has it; only a replay can tell what the state is.
			c.broken = err
			return fmt.Errorf("%w: %w", singleton.ErrInstanceFailed, err)
		}
	}
	c.seq = last
	return nil
}

// brokenErrLocked: the request was not processed; another instance (or a
// restart of this one) must take it.
func (c *coordinator) brokenErrLocked() error {
	return fmt.Errorf("%w: %w: coordinator %s: %v", singleton.ErrInstanceFailed, singleton.ErrNotRunning, c.s.TypeName, c.broken)
}

func decode(req singleton.Request, v any) error {
	if len(req.Payload) == 0 {
		return fmt.Errorf("%w: %s: missing payload", singleton.ErrBadRequest, req.Op)
	}
	if err := json.Unmarshal(req.Payload, v); err != nil {
		return fmt.Errorf("%w: %s: %w", singleton.ErrBadRequest, req.Op, err)
	}
	return nil
}

// Handle implements singleton.Instance.
func (c *coordinator) Handle(ctx context.Context, req singleton.Request) (json.RawMessage, error) {
	c.mu.Lock()
	if c.broken != nil {
		err := c.brokenErrLocked()
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Unlock()
	switch req.Op {
	case OpRegister:
		var rr RegisterRequest
		if err := decode(req, &rr); err != nil {
			return nil, err
		}
		return c.register(ctx, rr)
	case OpGetShardHome:
		var gr GetShardHomeRequest
		if err := decode(req, &gr); err != nil {
			return nil, err
		}
		return c.getShardHome(ctx, gr)
	case OpGracefulShutdown:
		var gr GracefulShutdownRequest
		if err := decode(req, &gr); err != nil {
			return nil, err
		}
		return c.gracefulShutdown(gr)
	case OpState:
		return json.Marshal(c.State())
	}
	return nil, fmt.Errorf("%w: sharding coordinator: unknown op %q", singleton.ErrBadRequest, req.Op)
}

func (c *coordinator) register(ctx context.Context, rr RegisterRequest) (json.RawMessage, error) {
	if rr.Region == "" {
		return nil, fmt.Errorf("%w: register: empty region", singleton.ErrBadRequest)
	}
	// A member the coordinator does not know yet would look gone to the
	// membership watch: let it retry once the views agree.
	m, ok := c.d.Membership.Find(rr.Region)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: register: member %s not known to the coordinator yet", singleton.ErrUnavailable, rr.Region)
	case m.Status.Final():
		return nil, fmt.Errorf("%w: register: member %s is %s", singleton.ErrUnavailable, rr.Region, m.Status)
	}
	c.mu.Lock()
	evs, err := c.st.DecideRegister(rr.Region, rr.Proxy)
	if err == nil {
		err = c.persistLocked(ctx, evs)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if len(evs) > 0 {
		detail := "region"
		if rr.Proxy {
			detail = "proxy"
		}
		c.event(protocol.EventRegionRegistered, rr.Region, "", detail)
		c.log.Info("region registered", "region", rr.Region, "proxy", rr.Proxy)
	}
	return json.Marshal(AckReply{Ack: true})
}

// allocatableLocked: new shards go only to regions whose member is Up and
// that are not shutting down.
func (c *coordinator) allocatableLocked(snap cluster.Snapshot) func(string) bool {
	return func(region string) bool {
		if c.shuttingDown[region] {
			return false
		}
		m, ok := snap.Find(region)
		return ok && m.Status == cluster.StatusUp
	}
}

func (c *coordinator) getShardHome(ctx context.Context, gr GetShardHomeRequest) (json.RawMessage, error) {
	if gr.Shard == "" {
		return nil, fmt.Errorf("%w: get-shard-home: empty shard", singleton.ErrBadRequest)
	}
	snap := c.d.Membership.Snapshot()
	c.mu.Lock()
	if c.rebalancing[gr.Shard] {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %w: shard %s", singleton.ErrUnavailable, ErrRebalanceInProgress, gr.Shard)
	}
	candidates := c.st.Allocations(c.allocatableLocked(snap))
	home, evs, err := c.st.DecideAllocate(gr.Shard, gr.Region, candidates, c.strategy)
	if err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: allocate shard %s: %w", singleton.ErrUnavailable, gr.Shard, err)
	}
	if err := c.persistLocked(ctx, evs); err != nil {
		c.mu.Unlock()
		return nil, err
	}
	fresh := len(evs) > 0
	// The home must host the shard before anyone is sent there: always
	// for a new allocation, and again when the home itself asks or was
	// reported not to host it (a hand-off that a previous coordinator
	// began but never finished).
	ensure := fresh || gr.Region == home || gr.NotHere == home
	seq := c.seq
	if ensure {
		c.hosting[gr.Shard] = true
	}
	c.mu.Unlock()
	if fresh {
		c.event(protocol.EventShardAllocated, home, gr.Shard, "requested by "+gr.Region)
		c.log.Info("shard allocated", "shard", gr.Shard, "region", home)
	}
	if ensure {
		err := c.ensureHosted(ctx, gr.Shard, home, fresh, seq)
		c.mu.Lock()
		delete(c.hosting, gr.Shard)
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return json.Marshal(ShardHomeReply{Shard: gr.Shard, Region: home})
}

// ensureHosted sends host-shard to home. For an allocation this instance
// did not just make, it first checks that no newer coordinator has written
// since (a stale instance must not make a region host a shard that has
// moved on).
func (c *coordinator) ensureHosted(ctx context.Context, shardID, home string, fresh bool, seq int64) error {
	if !fresh {
		h, err := c.d.Journal.Highest(ctx, c.pid)
		if err != nil {
			return fmt.Errorf("%w: check journal before host-shard: %w", singleton.ErrUnavailable, err)
		}
		if h != seq {
			c.mu.Lock()
			if c.broken == nil {
				c.broken = fmt.Errorf("journal has %d events, this instance wrote up to %d", h, seq)
			}
			err := c.brokenErrLocked()
			c.mu.Unlock()
			return err
		}
	}
	if err := c.callRegion(ctx, home, opHostShard, shardID, c.s.hostTimeout()); err != nil {
		return fmt.Errorf("%w: host shard %s at %s: %w", singleton.ErrUnavailable, shardID, home, err)
	}
	return nil
}

// callRegion sends a region protocol request to region.
func (c *coordinator) callRegion(ctx context.Context, region, op, shardID string, timeout time.Duration) error {
	m, ok := c.d.Membership.Find(region)
	if !ok || m.Status.Final() {
		return fmt.Errorf("member %s is gone", region)
	}
	cctx, cancel := clock.WithTimeout(ctx, c.d.Clock, timeout)
	defer cancel()
	path := regionPath(c.s.TypeName, op)
	var ans ShardAnswer
	return c.d.Peers.Call(cctx, m.Target(), path, ShardRequest{Shard: shardID}, &ans)
}

func (c *coordinator) gracefulShutdown(gr GracefulShutdownRequest) (json.RawMessage, error) {
	if gr.Region == "" {
		return nil, fmt.Errorf("%w: graceful-shutdown: empty region", singleton.ErrBadRequest)
	}
	c.mu.Lock()
	start := c.st.Regions[gr.Region] && !c.shuttingDown[gr.Region]
	if start {
		c.shuttingDown[gr.Region] = true
		c.wg.Add(1)
	}
	c.mu.Unlock()
	if start {
		c.log.Info("graceful shutdown of region", "region", gr.Region)
		go c.shutdownRegion(gr.Region)
	}
	return json.Marshal(AckReply{Ack: true})
}

// shutdownRegion hands off every shard of region, MaxSimultaneousRebalance
// at a time, then terminates it.
func (c *coordinator) shutdownRegion(region string) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		delete(c.shuttingDown, region)
		c.mu.Unlock()
	}()
	for c.ctx.Err() == nil {
		c.mu.Lock()
		registered := c.st.Regions[region]
		owned := c.st.ShardsOf(region)
		c.mu.Unlock()
		if !registered {
			return
		}
		if len(owned) == 0 {
			c.terminate(region, "graceful shutdown")
			return
		}
		var waits []<-chan struct{}
		for _, sh := range owned {
			if len(waits) >= c.s.MaxSimultaneousRebalance {
				break
			}
			if done, ok := c.startHandOff(sh, "graceful shutdown"); ok {
				waits = append(waits, done)
			}
		}
		for _, w := range waits {
			select {
			case <-w:
			case <-c.ctx.Done():
				return
			}
		}
		if len(waits) == 0 || !c.progressed(region, len(owned)) {
			if c.d.Clock.Sleep(c.ctx, c.s.RetryInterval) != nil {
				return
			}
		}
	}
}

func (c *coordinator) progressed(region string, before int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.st.ShardsOf(region)) < before
}

// terminate persists RegionTerminated (which frees the region's shards).
func (c *coordinator) terminate(region, why string) {
	c.mu.Lock()
	evs := c.st.DecideTerminate(region)
	freed := c.st.ShardsOf(region)
	err := c.persistLocked(c.ctx, evs)
	delete(c.downSince, region)
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("could not persist region termination", "region", region, "err", err)
		return
	}
	if len(evs) > 0 {
		c.event(protocol.EventRegionTerminated, region, "", fmt.Sprintf("%s; %d shards freed", why, len(freed)))
		c.log.Info("region terminated", "region", region, "why", why, "shards_freed", len(freed))
	}
}

// startHandOff begins handing shardID off from its region in the
// background; false if it is not allocated, already being handed off, or
// being hosted right now.
func (c *coordinator) startHandOff(shardID, why string) (<-chan struct{}, bool) {
	c.mu.Lock()
	owner, ok := c.st.Shards[shardID]
	if !ok || c.rebalancing[shardID] || c.hosting[shardID] || c.broken != nil {
		c.mu.Unlock()
		return nil, false
	}
	c.rebalancing[shardID] = true
	targets := slices.Sorted(maps.Keys(c.st.Regions))
	targets = append(targets, slices.Sorted(maps.Keys(c.st.Proxies))...)
	c.wg.Add(1)
	c.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer c.wg.Done()
		defer close(done)
		defer func() {
			c.mu.Lock()
			delete(c.rebalancing, shardID)
			c.mu.Unlock()
		}()
		c.handOff(shardID, owner, targets, why)
	}()
	return done, true
}

// handOff runs the hand-off protocol for one shard: every region and proxy
// begins buffering it, then the owner stops all its entities and answers,
// and only then is the shard deallocated (so the next get-shard-home
// allocates it anew). If any region does not answer, the round is
// abandoned and the shard stays where it is: safety over progress.
func (c *coordinator) handOff(shardID, owner string, targets []string, why string) {
	c.event(protocol.EventShardHandOffBegun, owner, shardID, why)
	snap := c.d.Membership.Snapshot()
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	for i, t := range targets {
		if m, ok := snap.Find(t); !ok || m.Status.Final() {
			continue // gone: it will be terminated
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.callRegion(c.ctx, t, opBeginHandOff, shardID, c.s.hostTimeout())
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.log.Info("hand-off abandoned: a region did not begin it", "shard", shardID, "err", err)
		return
	}
	if c.s.Bugs.StartBeforeStopped {
		// Deliberate bug: tell the owner to stop the shard but do not wait
		// for its ShardStopped; the shard is deallocated (and may be
		// allocated and started elsewhere) while its entities still run.
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if err := c.callRegion(c.ctx, owner, opHandOff, shardID, c.s.HandOffTimeout+c.s.hostTimeout()); err != nil {
				c.log.Info("hand-off: the owner did not answer", "shard", shardID, "owner", owner, "err", err)
			}
		}()
	} else if err := c.callRegion(c.ctx, owner, opHandOff, shardID, c.s.HandOffTimeout+c.s.hostTimeout()); err != nil {
		c.log.Info("hand-off abandoned: the owner did not answer", "shard", shardID, "owner", owner, "err", err)
		return
	}
	c.mu.Lock()
	evs := c.st.DecideDeallocate(shardID, owner)
	err := c.persistLocked(c.ctx, evs)
	c.mu.Unlock()
	if err != nil {
		c.log.Warn("could not persist shard deallocation", "shard", shardID, "err", err)
		return
	}
	c.event(protocol.EventShardRebalanced, owner, shardID, why)
	c.log.Info("shard handed off", "shard", shardID, "from", owner, "why", why)
}

// loop rebalances every RebalanceInterval and watches membership.
func (c *coordinator) loop() {
	defer c.wg.Done()
	rebalance := c.d.Clock.NewTicker(c.s.RebalanceInterval)
	defer rebalance.Stop()
	watch := c.d.Clock.NewTicker(max(c.s.RetryInterval, 10*time.Millisecond))
	defer watch.Stop()
	for {
		changed := c.d.Membership.Changed()
		c.watchMembers()
		select {
		case <-c.ctx.Done():
			return
		case <-rebalance.C():
			c.rebalance()
		case <-changed:
		case <-watch.C():
		}
	}
}

// watchMembers terminates regions whose member is Removed (at once) or Down
// or unknown for DownRemovalMargin — time for a downed member to notice
// and stop its entities before they start elsewhere. A member that is
// merely unreachable keeps its shards.
func (c *coordinator) watchMembers() {
	snap := c.d.Membership.Snapshot()
	now := c.d.Clock.Elapsed()
	c.mu.Lock()
	all := slices.Collect(maps.Keys(c.st.Regions))
	all = append(all, slices.Collect(maps.Keys(c.st.Proxies))...)
	var due []string
	var whys []string
	for _, uid := range all {
		m, ok := snap.Find(uid)
		switch {
		case ok && !m.Status.Final():
			delete(c.downSince, uid)
			continue
		case ok && m.Status == cluster.StatusRemoved:
			due, whys = append(due, uid), append(whys, "member removed")
			continue
		}
		since, seen := c.downSince[uid]
		if !seen {
			c.downSince[uid] = now
			since = now
		}
		if now-since >= c.s.DownRemovalMargin {
			why := "member downed"
			if !ok {
				why = "member unknown"
			}
			due, whys = append(due, uid), append(whys, why)
		}
	}
	c.mu.Unlock()
	for i, uid := range due {
		c.terminate(uid, whys[i])
	}
}

// rebalance asks the strategy which shards to move and starts their
// hand-offs.
func (c *coordinator) rebalance() {
	snap := c.d.Membership.Snapshot()
	c.mu.Lock()
	if c.broken != nil {
		c.mu.Unlock()
		return
	}
	current := c.st.Allocations(c.allocatableLocked(snap))
	inProgress := maps.Clone(c.rebalancing)
	c.mu.Unlock()
	budget := c.s.MaxSimultaneousRebalance - len(inProgress)
	for _, sh := range c.strategy.Rebalance(current, inProgress) {
		if budget <= 0 {
			break
		}
		if _, ok := c.startHandOff(sh, "rebalance"); ok {
			budget--
		}
	}
}

// State returns the allocation table.
func (c *coordinator) State() CoordinatorState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := CoordinatorState{
		Type: c.s.TypeName, Coordinator: c.self,
		Regions:      c.st.Allocations(nil),
		Proxies:      slices.Sorted(maps.Keys(c.st.Proxies)),
		Rebalancing:  slices.Sorted(maps.Keys(c.rebalancing)),
		ShuttingDown: slices.Sorted(maps.Keys(c.shuttingDown)),
		Epoch:        c.epoch, Seq: c.seq,
	}
	return st
}

// Stop implements singleton.Instance: the background work ends (hand-offs
// in flight are abandoned; the journal is their truth) before it returns.
func (c *coordinator) Stop(ctx context.Context) error {
	c.cancel()
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	c.event(protocol.EventCoordinatorStopped, c.self, "", fmt.Sprintf("epoch %d", c.epoch))
	c.log.Info("coordinator stopped", "epoch", c.epoch)
	return err
}

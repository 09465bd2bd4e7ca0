package sharding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
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
			s: s, d: d,
			pid:     CoordinatorPID(s.TypeName),
			self:    d.Membership.Snapshot().Self.UID(),
			log:     d.Logger.With("coordinator", s.TypeName),
			answers: map[uint64]chan CoAnswer{},
		}
		st, epoch, seq, err := c.recover(ctx)
		if err != nil {
			return nil, err
		}
		c.m = NewCoordinatorMachine(CoordinatorConfig{Settings: s, Self: c.self}, strat, st, epoch, seq, c.log)
		c.ctx, c.cancel = context.WithCancel(context.Background())
		c.step(CoView{Snapshot: d.Membership.Snapshot()})
		c.wg.Add(1)
		go c.loop()
		c.event(protocol.EventCoordinatorStarted, c.self, "", fmt.Sprintf("epoch %d, %d events, %d regions, %d proxies, %d shards",
			epoch, seq, len(st.Regions), len(st.Proxies), len(st.Shards)))
		c.log.Info("coordinator started", "epoch", epoch, "seq", seq, "shards", len(st.Shards))
		return c, nil
	}
}

// coordinator is the ShardCoordinator instance: the driver of its
// CoordinatorMachine over the journal, the peer client, the clock and the
// membership. Handle runs one request at a time (the singleton's
// mailbox); a background goroutine rebalances and watches membership.
type coordinator struct {
	s    Settings
	d    Deps
	pid  string
	self string
	log  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the loop and every effect in flight

	mu      sync.Mutex
	m       *CoordinatorMachine
	answers map[uint64]chan CoAnswer
	lastReq uint64
}

func (c *coordinator) event(typ, region, shardID, detail string) {
	c.d.Events.Append(protocol.Event{Type: typ, Member: region, EntityType: c.s.TypeName, Shard: shardID, Detail: detail})
}

// recover fences the journal id and replays it.
func (c *coordinator) recover(ctx context.Context) (*State, uint64, int64, error) {
	return RecoverCoordinator(ctx, c.d.Journal, c.s.TypeName)
}

// RecoverCoordinator is a starting coordinator's recovery: it fences the
// journal id of typeName's coordinator (no older instance can write after
// this) and replays its events into the allocation table. It returns the
// table, the writer epoch and the last sequence number.
func RecoverCoordinator(ctx context.Context, j journal.Journal, typeName string) (*State, uint64, int64, error) {
	pid := CoordinatorPID(typeName)
	epoch, highest, err := j.Fence(ctx, pid)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("sharding coordinator %s: fence: %w", typeName, err)
	}
	evs, err := j.Replay(ctx, pid, 1, 0)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("sharding coordinator %s: replay: %w", typeName, err)
	}
	st := NewState()
	var last int64
	for _, je := range evs {
		if je.Seq > highest {
			break
		}
		var e CoordinatorEvent
		if err := json.Unmarshal(je.Data, &e); err != nil {
			return nil, 0, 0, fmt.Errorf("sharding coordinator %s: event %d: %w", typeName, je.Seq, err)
		}
		if err := st.Apply(e); err != nil {
			return nil, 0, 0, fmt.Errorf("sharding coordinator %s: event %d: %w", typeName, je.Seq, err)
		}
		last = je.Seq
	}
	if last != highest {
		return nil, 0, 0, fmt.Errorf("sharding coordinator %s: replay ended at %d, journal has %d", typeName, last, highest)
	}
	return st, epoch, highest, nil
}

// step steps the machine and carries out its effects.
func (c *coordinator) step(in CoInput) {
	c.mu.Lock()
	effs := c.m.Step(c.d.Clock.Elapsed(), in)
	c.mu.Unlock()
	c.carryOut(effs)
}

// carryOut does the effects: answers and events at once, the journal and
// region calls in goroutines the instance owns (Stop ends them).
func (c *coordinator) carryOut(effs []CoEffect) {
	for _, eff := range effs {
		switch e := eff.(type) {
		case CoAnswer:
			c.mu.Lock()
			ch := c.answers[e.ID]
			delete(c.answers, e.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- e
			}
		case CoEmit:
			c.d.Events.Append(e.Event)
		case CoAppend:
			c.goStep(func(ctx context.Context) CoInput {
				data, err := EncodeEvents(e.Events)
				if err != nil {
					return CoAppended{Tag: e.Tag, Err: fmt.Errorf("%w: encode events: %w", journal.ErrInvalid, err)}
				}
				last, err := c.d.Journal.Append(ctx, c.pid, e.ExpectSeq, e.Epoch, data)
				return CoAppended{Tag: e.Tag, Last: last, Err: err}
			})
		case CoCheckHighest:
			c.goStep(func(ctx context.Context) CoInput {
				h, err := c.d.Journal.Highest(ctx, c.pid)
				return CoHighestIs{Tag: e.Tag, Highest: h, Err: err}
			})
		case CoCall:
			c.goStep(func(ctx context.Context) CoInput {
				return CoCalled{Tag: e.Tag, Err: c.callRegion(ctx, e.Region, e.Op, e.Shard, e.Timeout)}
			})
		case CoArm:
			c.wg.Go(func() {
				if c.d.Clock.Sleep(c.ctx, e.After) == nil {
					c.step(CoTimer{Tag: e.Tag})
				}
			})
		default:
			panic(fmt.Sprintf("sharding: coordinator effect %T not carried out", eff))
		}
	}
}

// goStep runs an I/O effect in a goroutine the instance owns, bounded by
// the ask timeout and the instance's life, and steps its outcome.
func (c *coordinator) goStep(do func(ctx context.Context) CoInput) {
	c.wg.Go(func() {
		ctx, cancel := clock.WithTimeout(c.ctx, c.d.Clock, c.s.askTimeout())
		defer cancel()
		in := do(ctx)
		if c.ctx.Err() != nil {
			return
		}
		c.step(in)
	})
}

// Handle implements singleton.Instance.
func (c *coordinator) Handle(ctx context.Context, req singleton.Request) (json.RawMessage, error) {
	ch := make(chan CoAnswer, 1)
	c.mu.Lock()
	c.lastReq++
	id := c.lastReq
	c.answers[id] = ch
	effs := c.m.Step(c.d.Clock.Elapsed(), CoRequest{ID: id, Op: req.Op, Payload: req.Payload})
	c.mu.Unlock()
	c.carryOut(effs)
	select {
	case a := <-ch:
		if a.Err != nil {
			return nil, a.Err
		}
		return json.Marshal(a.Reply)
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.answers, id)
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: sharding coordinator %s: %s: %w", singleton.ErrUnknownOutcome, c.s.TypeName, req.Op, ctx.Err())
	}
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

// loop rebalances every RebalanceInterval and watches membership.
func (c *coordinator) loop() {
	defer c.wg.Done()
	rebalance := c.d.Clock.NewTicker(c.s.RebalanceInterval)
	defer rebalance.Stop()
	watch := c.d.Clock.NewTicker(max(c.s.RetryInterval, 10*time.Millisecond))
	defer watch.Stop()
	for {
		changed := c.d.Membership.Changed()
		c.step(CoView{Snapshot: c.d.Membership.Snapshot()})
		select {
		case <-c.ctx.Done():
			return
		case <-rebalance.C():
			c.step(CoRebalanceTick{})
		case <-changed:
		case <-watch.C():
		}
	}
}

// State returns the allocation table.
func (c *coordinator) State() CoordinatorState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.State()
}

// Stop implements singleton.Instance: the background work ends (hand-offs
// in flight are abandoned; the journal is their truth) before it returns.
func (c *coordinator) Stop(ctx context.Context) error {
	c.cancel()
	c.mu.Lock()
	c.m.Step(c.d.Clock.Elapsed(), CoStop{})
	epoch := c.m.Epoch()
	c.mu.Unlock()
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
	c.event(protocol.EventCoordinatorStopped, c.self, "", fmt.Sprintf("epoch %d", epoch))
	c.log.Info("coordinator stopped", "epoch", epoch)
	return err
}

// Package cluster is the reference node's cluster membership: members and
// their age, reachability as this node sees it, and a split-brain resolver
// that downs members so that at most one side of a partition goes on.
//
// Membership rides on hashicorp/memberlist for discovery and state
// exchange, but reachability is this package's own: every member sends a
// heartbeat datagram to every other member, and a member this node has not
// heard from within FailureTimeout is unreachable from here. Each member
// gossips its own observations, so the resolver can also see indirectly
// connected members. Age is an up-number allocated from the journal at
// join, never a wall clock.
//
// Every decision — failure detection, the resolver's, merging gossip,
// status changes, joining, leaving — is taken by MembershipState, a pure
// state machine (membership_state.go) that a simulation can drive over a
// virtual network; Cluster is its driver over memberlist, the journal and
// the node's clock.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"
)

// UpNumbersID is the journal persistence id up-numbers are allocated from:
// the sequence number of a member's allocation event is its up-number.
const UpNumbersID = "shardtest/cluster/up-numbers"

// Config configures one member.
type Config struct {
	Name  string
	Roles []string
	// BindAddr is the IP the gossip transport binds; it is also advertised
	// unless AdvertiseAddr is set. It must be an IP address.
	BindAddr      string
	BindPort      int // 0 picks a free port
	AdvertiseAddr string
	// HTTPAddr is this node's protocol address, gossiped to others.
	HTTPAddr string
	// PeerAddr is this node's peer address, gossiped to others.
	PeerAddr string
	// Seeds are gossip addresses to join. The first seed bootstraps a new
	// cluster if no other seed answers within SeedTimeout.
	Seeds   []string
	Journal journal.Journal
	Downing DowningConfig

	HeartbeatInterval time.Duration // default 200ms
	FailureTimeout    time.Duration // default 2s
	RejoinInterval    time.Duration // default 2s
	SeedTimeout       time.Duration // default 3s
	// JoinOnly: never bootstrap a new cluster, even as the first seed;
	// wait until some seed answers. A member that was downed belongs to a
	// cluster that still exists (the one that downed it): if it formed a
	// new one while cut off, that island would run its own singletons.
	JoinOnly bool
	// Previous is the last view of this node's member that was downed
	// before this one (with JoinOnly). A JoinOnly first seed bootstraps a
	// new cluster after all once that cluster is provably gone: every
	// member it still counted has since been seen as a new incarnation (a
	// new process at the same address: the old one is dead), and
	// DownNoticeFor has passed, so a member downed without knowing it has
	// stopped too. Without that, a cluster whose survivors downed
	// themselves (a crashed majority) never re-formed: the survivors,
	// restarted in process, only ever join, and the crashed nodes' new
	// processes are not the first seed.
	Previous *Snapshot
	// MaxGone bounds how many down/removed members are remembered.
	MaxGone int // default 1000
	// DownNoticeFor: how long this member keeps telling a member it saw
	// downed that it is down, in a heartbeat datagram of its own (default
	// 15 s). A one-way partition delivers datagrams in one direction but no
	// stream (a TCP push needs both), so without the notice a member whose
	// own packets are lost would never hear that it was downed.
	DownNoticeFor time.Duration
	// BlindToOneWay is a deliberate bug (impl/node's blind-to-one-way):
	// heartbeats are taken for liveness only, their observations and down
	// notices ignored and none sent.
	BlindToOneWay bool

	Clock  clock.Clock
	Events *kit.EventLog
	Logger *slog.Logger
	Filter *peer.Filter
	// Transport starts the member's transport; nil means memberlist on
	// BindAddr:BindPort behind Filter (Memberlist).
	Transport StartTransport
	// Random is where the member's incarnation comes from; nil means
	// crypto/rand. A simulation gives its seeded source, so that a seed
	// replays the same incarnations.
	Random io.Reader
}

// The defaults of Config's timings and bounds (a simulation of the node
// takes them too).
const (
	DefaultHeartbeatInterval = 200 * time.Millisecond
	DefaultFailureTimeout    = 2 * time.Second
	DefaultRejoinInterval    = 2 * time.Second
	DefaultSeedTimeout       = 3 * time.Second
	DefaultMaxGone           = 1000
)

func (c *Config) setDefaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.FailureTimeout <= 0 {
		c.FailureTimeout = DefaultFailureTimeout
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = DefaultRejoinInterval
	}
	if c.SeedTimeout <= 0 {
		c.SeedTimeout = DefaultSeedTimeout
	}
	if c.MaxGone <= 0 {
		c.MaxGone = DefaultMaxGone
	}
	if c.DownNoticeFor <= 0 {
		c.DownNoticeFor = 15 * time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Events == nil {
		c.Events = kit.NewEventLog(c.Clock.Now, 0)
	}
	if c.Filter == nil {
		c.Filter = &peer.Filter{}
	}
	if c.Transport == nil {
		c.Transport = Memberlist(*c)
	}
	if c.Random == nil {
		c.Random = rand.Reader
	}
}

func (c *Config) validate() error {
	if c.Name == "" || strings.ContainsAny(c.Name, "@ /") {
		return fmt.Errorf("cluster: node name %q must be non-empty without '@', '/' or spaces", c.Name)
	}
	if net.ParseIP(c.BindAddr) == nil {
		return fmt.Errorf("cluster: bind address %q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return fmt.Errorf("cluster: advertise address %q is not an IP address", c.AdvertiseAddr)
	}
	if c.Journal == nil {
		return errors.New("cluster: a journal is needed to allocate up-numbers")
	}
	if c.FailureTimeout <= c.HeartbeatInterval {
		return fmt.Errorf("cluster: failure timeout %v must exceed the heartbeat interval %v", c.FailureTimeout, c.HeartbeatInterval)
	}
	for _, s := range c.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("cluster: seed %q: %w", s, err)
		}
	}
	return c.Downing.Validate()
}

// Cluster is one member's membership service. Create it with New, run it
// with Run; it ends when its context ends, when it has left, or when it is
// downed.
//
// Cluster decides nothing itself: every decision is its MembershipState's.
// It drives that machine — steps it under its lock with the clock's
// Elapsed reading, on its ticker, on what its transport delivers and on
// the calls of its API — and carries out the effects the machine asks for:
// the events and logs, the signals (Changed, Downed, Left), and the I/O
// over its Transport and journal.
type Cluster struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	m       *MembershipState
	tr      Transport // nil until started
	changed chan struct{}
	// fresh is the machine's Freshness after its last tick, for Fresh,
	// which runs on every entity request and takes no lock.
	fresh atomic.Pointer[Freshness]
	// pushing: the addresses a state push is in flight to (at most one per
	// address).
	pushing map[string]bool
	// pushes tracks state pushes in flight; Run waits for them before it
	// shuts the transport down.
	pushes   sync.WaitGroup
	stopping bool // no new pushes once set (under mu)

	bound      chan struct{} // closed once the gossip transport is bound
	downed     chan struct{}
	downedOnce sync.Once
	leaveDone  chan struct{}
	leaveOnce  sync.Once
}

// New prepares a member with a fresh incarnation. Nothing runs until Run.
func New(cfg Config) (*Cluster, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	inc, err := newIncarnation(cfg.Random)
	if err != nil {
		return nil, err
	}
	self := Member{Name: cfg.Name, Incarnation: inc, HTTPAddr: cfg.HTTPAddr, PeerAddr: cfg.PeerAddr, Roles: slices.Clone(cfg.Roles)}
	return newCluster(cfg, self), nil
}

// newCluster drives a new MembershipState of self under cfg (defaulted,
// except in tests that set only what they use).
func newCluster(cfg Config, self Member) *Cluster {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Cluster{
		cfg:       cfg,
		log:       logger.With("member", self.UID()),
		m:         NewMembershipState(cfg.membershipConfig(), self),
		changed:   make(chan struct{}),
		pushing:   map[string]bool{},
		bound:     make(chan struct{}),
		downed:    make(chan struct{}),
		leaveDone: make(chan struct{}),
	}
}

func newIncarnation(random io.Reader) (string, error) {
	b := make([]byte, 6)
	if _, err := io.ReadFull(random, b); err != nil {
		return "", fmt.Errorf("cluster: incarnation: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Fresh reports whether this member may act on what it believes: its
// failure detector has run within FailureTimeout, and not just after a
// freeze. A member frozen past its downing (a GC pause, SIGSTOP) wakes up
// with requests waiting in its sockets and its old view; it must not serve
// them before it has heard what happened meanwhile — the down notices and
// pushes that are waiting too arrive within a heartbeat, so it waits a
// failure timeout after the thaw. (Found by the pause-coordinator scenario:
// on thawing, the frozen node answered a read waiting in its socket from
// an entity whose shard had moved, with state 26 writes old.)
func (c *Cluster) Fresh() bool {
	f := c.fresh.Load()
	if f == nil {
		return true
	}
	return f.At(c.cfg.Clock.Elapsed(), c.cfg.FailureTimeout)
}

// Self returns this member (its up-number is 0 until allocated).
func (c *Cluster) Self() Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.Self()
}

// Bound is closed once the gossip transport is bound: Self().GossipAddr is
// known from then on.
func (c *Cluster) Bound() <-chan struct{} { return c.bound }

// Left is closed once this member has finished leaving gracefully.
func (c *Cluster) Left() <-chan struct{} { return c.leaveDone }

// Downed is closed when this member has been downed (by itself or others).
func (c *Cluster) Downed() <-chan struct{} { return c.downed }

// Changed implements Membership.
func (c *Cluster) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// Snapshot implements Membership.
func (c *Cluster) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.Snapshot()
}

// SelfStatus is Snapshot().Self.Status without building the view: what
// every client request asks (is this member ready?).
func (c *Cluster) SelfStatus() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.SelfStatus()
}

// Find implements Membership: the member uid as Snapshot would show it.
func (c *Cluster) Find(uid string) (MemberState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.Find(uid)
}

// stepLocked steps the machine at the clock's Elapsed reading and carries
// out the local effects at once, under the lock, so that the events of
// concurrent steps are logged in the order the machine took them. It
// returns the I/O effects, for carryOut without the lock.
func (c *Cluster) stepLocked(in Input) []Effect {
	effs := c.m.Step(c.cfg.Clock.Elapsed(), in)
	if _, ok := in.(InTick); ok {
		f := c.m.Freshness()
		c.fresh.Store(&f)
	}
	var io []Effect
	for _, e := range effs {
		switch e := e.(type) {
		case Emit:
			c.cfg.Events.Append(e.Event)
		case Log:
			c.log.Log(context.Background(), e.Level, e.Msg, e.Args...)
		case ViewChanged:
			close(c.changed)
			c.changed = make(chan struct{})
		case SelfDowned:
			c.downedOnce.Do(func() { close(c.downed) })
		case LeftCluster:
			c.leaveOnce.Do(func() { close(c.leaveDone) })
		default:
			io = append(io, e)
		}
	}
	return io
}

// exec steps in and carries out its effects, then steps the outcomes of
// those that have one (a journal append, a join attempt, a wait), until
// none is left. It returns a Rejected effect's error, or why ctx ended a
// wait.
func (c *Cluster) exec(ctx context.Context, in Input) error {
	queue := []Input{in}
	for len(queue) > 0 {
		in := queue[0]
		queue = queue[1:]
		c.mu.Lock()
		effs := c.stepLocked(in)
		c.mu.Unlock()
		next, err := c.carryOut(ctx, effs)
		if err != nil {
			return err
		}
		queue = append(queue, next...)
	}
	return nil
}

// carryOut carries out I/O effects in order, and returns the inputs that
// report their outcomes. Called from a transport's callback it meets only
// PushState, which runs in a goroutine: it never calls back into the
// transport there.
func (c *Cluster) carryOut(ctx context.Context, effs []Effect) ([]Input, error) {
	var next []Input
	var rejected error
	var wg sync.WaitGroup // the pushes of these effects
	for _, e := range effs {
		switch e := e.(type) {
		case Rejected:
			rejected = e.Err
		case SendDatagram:
			what := "heartbeat"
			if e.DownNotice != "" {
				what = "down notice"
			}
			if err := c.transport().Send(e.To, e.Msg); err != nil {
				c.log.Debug(what, "to", e.To, "err", err)
			}
		case PushState:
			c.goPush(ctx, e.To, e.Msg, &wg)
		case AwaitPushes:
			wg.Wait()
		case AllocateUpNumber:
			if e.After > 0 {
				if err := c.cfg.Clock.Sleep(ctx, e.After); err != nil {
					return nil, fmt.Errorf("cluster: allocate up-number: %w", err)
				}
			}
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			seq, err := c.cfg.Journal.Append(actx, UpNumbersID, journal.AnySeq, journal.NoEpoch, [][]byte{e.Payload})
			cancel()
			if err != nil && ctx.Err() != nil {
				return nil, fmt.Errorf("cluster: allocate up-number: %w", ctx.Err())
			}
			next = append(next, InUpNumber{UpNumber: seq, Err: err})
		case JoinSeeds:
			n, err := c.transport().Join(e.Addrs)
			next = append(next, InJoinResult{Answered: n, Err: err})
		case RetryJoin:
			if err := c.cfg.Clock.Sleep(ctx, e.After); err != nil {
				return nil, fmt.Errorf("cluster: join: %w", err)
			}
			next = append(next, InJoinTick{})
		case Rejoin:
			if n, err := c.transport().Join(e.Addrs); n > 0 {
				c.log.Debug("re-joined", "contacted", n)
			} else if err != nil {
				c.log.Debug("re-join found nobody", "addrs", e.Addrs, "err", err)
			}
		case LeaveTransport:
			if tr := c.transport(); tr != nil {
				if err := tr.Leave(e.Timeout); err != nil {
					c.log.Debug("gossip leave", "err", err)
				}
			}
			next = append(next, InTransportLeft{})
		default:
			panic(fmt.Sprintf("cluster: effect %T has no driver", e))
		}
	}
	return next, rejected
}

func (c *Cluster) transport() Transport {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tr
}

// Run joins the cluster and serves membership until ctx ends, the member
// has left, or it has been downed. It allocates the up-number first,
// waiting for the journal as long as it takes.
func (c *Cluster) Run(ctx context.Context) error {
	if err := c.exec(ctx, InStart{}); err != nil {
		return err
	}
	if err := c.startTransport(); err != nil {
		return err
	}
	defer c.shutdownTransport()
	defer func() {
		c.mu.Lock()
		c.stopping = true
		c.mu.Unlock()
		c.pushes.Wait()
	}()
	var wg sync.WaitGroup
	loopCtx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	// The join's attempts and waits come back as inputs until it joined.
	// It runs beside the heartbeat ticker: the member has joined as soon as
	// a member of the cluster answered it, while memberlist's Join may
	// still be asking the other seeds one by one (one across a partition
	// answers only at its stream timeout), and from then on it must
	// heartbeat and pass on the down notices it learnt. A tick before it
	// joined does nothing.
	joinDone := make(chan error, 1) // nil once the join has ended
	wg.Add(1)
	go func() { defer wg.Done(); joinDone <- c.exec(loopCtx, InJoinTick{}) }()

	t := c.cfg.Clock.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if joinDone != nil {
				return <-joinDone // why the join ended, as before
			}
			return nil
		case err := <-joinDone:
			joinDone = nil
			if err != nil {
				return err
			}
			wg.Add(1)
			go func() { defer wg.Done(); c.rejoinLoop(loopCtx) }()
		case <-c.leaveDone:
			return nil
		case <-c.downed:
			_ = c.exec(ctx, InFarewell{}) // tell whoever still listens
			return nil
		case <-t.C():
			_ = c.exec(loopCtx, InTick{})
		}
	}
}

func (c *Cluster) startTransport() error {
	uid := c.Self().UID()
	c.cfg.Events.SetIncarnation(c.Self().Incarnation)
	tr, err := c.cfg.Transport(uid, (*receiver)(c))
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.tr = tr
	c.mu.Unlock()
	close(c.bound)
	return nil
}

func (c *Cluster) shutdownTransport() {
	if tr := c.transport(); tr != nil {
		if err := tr.Shutdown(); err != nil {
			c.log.Warn("gossip transport shutdown", "err", err)
		}
	}
}

// rejoinLoop re-joins known members the transport has lost, so that the
// cluster merges again after a long partition.
func (c *Cluster) rejoinLoop(ctx context.Context) {
	t := c.cfg.Clock.NewTicker(c.cfg.RejoinInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		_ = c.exec(ctx, InRejoinTick{Alive: c.transport().Alive()})
	}
}

// goPush runs pushTo in a goroutine Run waits for; wg is also told when it
// is done.
func (c *Cluster) goPush(ctx context.Context, addr string, msg []byte, wg *sync.WaitGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return
	}
	c.pushes.Add(1)
	wg.Add(1)
	go func() {
		defer c.pushes.Done()
		defer wg.Done()
		c.pushTo(ctx, addr, msg)
	}()
}

// pushTo sends the full state msg to one address over a stream, at most
// one push in flight per address.
func (c *Cluster) pushTo(ctx context.Context, addr string, msg []byte) {
	c.mu.Lock()
	if c.pushing[addr] || c.tr == nil || ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.pushing[addr] = true
	tr := c.tr
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pushing, addr)
		c.mu.Unlock()
	}()
	if err := tr.SendReliable(addr, msg); err != nil {
		c.log.Debug("state push", "to", addr, "err", err)
	}
}

// ErrUnknownMember: no member with that uid is known.
var ErrUnknownMember = errors.New("cluster: unknown member")

// Down marks member uid Down on an operator's word (Akka's Cluster.down,
// Akka Management's manual downing): for members known to be dead when no
// split-brain strategy can decide for the survivors (the oldest half
// crashed). The decision spreads by gossip like the resolver's; the member
// is then treated as any downed one (its shards move after the removal
// margin). Downing an already downed or removed member is a no-op.
func (c *Cluster) Down(uid string) error {
	return c.exec(context.Background(), InDown{UID: uid})
}

// BeginLeave marks this member Leaving: it stays a member while it hands
// over what it runs; then FinishLeave removes it.
func (c *Cluster) BeginLeave() error {
	return c.exec(context.Background(), InBeginLeave{})
}

// FinishLeave marks this member Removed, tells the others, and leaves
// memberlist; Run then returns.
func (c *Cluster) FinishLeave(ctx context.Context) error {
	return c.exec(ctx, InFinishLeave{})
}

// receiver is the Cluster as its transport's Receiver. The transport calls
// it under its own locks: it never calls back into the transport.
type receiver Cluster

func (d *receiver) Bound(addr string) {
	c := (*Cluster)(d)
	c.mu.Lock()
	c.stepLocked(InBound{Addr: addr})
	c.mu.Unlock()
}

func (d *receiver) Meta() []byte {
	c := (*Cluster)(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.Meta()
}

func (d *receiver) Message(b []byte) {
	_ = (*Cluster)(d).exec(context.Background(), InReceived{Msg: b})
}

func (d *receiver) LocalState(join bool) []byte {
	c := (*Cluster)(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m.LocalState(join)
}

func (d *receiver) MergeRemoteState(buf []byte, join bool) {
	_ = (*Cluster)(d).exec(context.Background(), InRemoteState{State: buf, Join: join})
}

// Met learns of new members from the transport as early as possible.
func (d *receiver) Met(meta []byte) {
	_ = (*Cluster)(d).exec(context.Background(), InMet{Meta: meta})
}

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
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
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

func (c *Config) setDefaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 200 * time.Millisecond
	}
	if c.FailureTimeout <= 0 {
		c.FailureTimeout = 2 * time.Second
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = 2 * time.Second
	}
	if c.SeedTimeout <= 0 {
		c.SeedTimeout = 3 * time.Second
	}
	if c.MaxGone <= 0 {
		c.MaxGone = 1000
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
type Cluster struct {
	cfg  Config
	log  *slog.Logger
	self Member

	mu     sync.Mutex
	tr     Transport // nil until started
	joined bool
	state  gossip
	// lastHeard, unreachAt and the stability marks are readings of the
	// clock's Elapsed: a clock bump must not make a member look silent or a
	// problem look stable.
	lastHeard map[string]time.Duration
	reachable map[string]bool
	unreachAt map[string]time.Duration // for auto-down
	// downSeen: members this node saw downed, for the down notices.
	downSeen map[string]time.Duration
	// lastTick is the Elapsed reading of the last tick; thawedAt that of
	// the tick that found the one before it more than FailureTimeout ago
	// (the process was frozen — a GC pause, SIGSTOP — or starved), for Fresh.
	// Atomics: Fresh runs on every entity request and takes no lock.
	lastTick, thawedAt atomic.Int64 // Elapsed readings
	ticked, thawed     atomic.Bool
	// incarnations: the incarnations seen at each gossip address before
	// joining (from memberlist's join notices), for Config.Previous.
	incarnations map[string]map[string]bool
	obsVersion   uint64
	version      uint64
	changed      chan struct{}
	dirty        bool
	resolver     resolver
	pushing      map[string]bool
	// pushes tracks state pushes in flight; Run waits for them before it
	// shuts memberlist down.
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
	c := &Cluster{
		cfg:          cfg,
		self:         Member{Name: cfg.Name, Incarnation: inc, HTTPAddr: cfg.HTTPAddr, PeerAddr: cfg.PeerAddr, Roles: slices.Clone(cfg.Roles)},
		state:        gossip{},
		lastHeard:    map[string]time.Duration{},
		reachable:    map[string]bool{},
		unreachAt:    map[string]time.Duration{},
		downSeen:     map[string]time.Duration{},
		incarnations: map[string]map[string]bool{},
		changed:      make(chan struct{}),
		pushing:      map[string]bool{},
		bound:        make(chan struct{}),
		downed:       make(chan struct{}),
		leaveDone:    make(chan struct{}),
	}
	c.log = cfg.Logger.With("member", c.self.UID())
	return c, nil
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
	if !c.ticked.Load() {
		return true
	}
	now := c.cfg.Clock.Elapsed()
	if now-time.Duration(c.lastTick.Load()) > c.cfg.FailureTimeout {
		return false
	}
	return !c.thawed.Load() || now-time.Duration(c.thawedAt.Load()) >= c.cfg.FailureTimeout
}

// Self returns this member (its up-number is 0 until allocated).
func (c *Cluster) Self() Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.self
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

// bumpLocked records a change of the view and wakes Changed waiters.
func (c *Cluster) bumpLocked() {
	c.version++
	close(c.changed)
	c.changed = make(chan struct{})
}

// Snapshot implements Membership.
func (c *Cluster) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshotLocked()
}

// SelfStatus is Snapshot().Self.Status without building the view: what
// every client request asks (is this member ready?).
func (c *Cluster) SelfStatus() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.state[c.self.UID()]; ok && c.joined {
		return r.Status
	}
	return StatusJoining
}

// Find implements Membership: the member uid as Snapshot would show it.
func (c *Cluster) Find(uid string) (MemberState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.state[uid]
	self := c.self.UID()
	if !ok || uid == self && !c.joined {
		return MemberState{}, false
	}
	return MemberState{Member: r.Member, Status: r.Status, Reachable: uid == self || c.reachable[uid]}, true
}

func (c *Cluster) snapshotLocked() Snapshot {
	s := Snapshot{Version: c.version}
	uid := c.self.UID()
	s.Self = MemberState{Member: c.self, Status: StatusJoining, Reachable: true}
	if r, ok := c.state[uid]; ok && c.joined {
		s.Self.Status = r.Status
	}
	for id, r := range c.state {
		if id == uid && !c.joined {
			continue
		}
		ms := MemberState{Member: r.Member, Status: r.Status, Reachable: id == uid || c.reachable[id]}
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

// Run joins the cluster and serves membership until ctx ends, the member
// has left, or it has been downed. It allocates the up-number first,
// waiting for the journal as long as it takes.
func (c *Cluster) Run(ctx context.Context) error {
	up, err := c.allocateUpNumber(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.self.UpNumber = up
	c.mu.Unlock()

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
	if err := c.join(ctx); err != nil {
		return err
	}

	var wg sync.WaitGroup
	loopCtx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); c.rejoinLoop(loopCtx) }()

	t := c.cfg.Clock.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.leaveDone:
			return nil
		case <-c.downed:
			c.pushState(ctx, true) // tell whoever still listens
			return nil
		case <-t.C():
			c.tick(loopCtx)
		}
	}
}

// firstEver reports whether m holds the journal's first up-number.
func firstEver(m Member) bool { return m.UpNumber == 1 }

func (c *Cluster) allocateUpNumber(ctx context.Context) (int64, error) {
	payload, _ := json.Marshal(struct {
		UID  string `json:"uid"`
		Addr string `json:"http_addr"`
	}{c.self.UID(), c.self.HTTPAddr})
	backoff := 200 * time.Millisecond
	reported := false
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		seq, err := c.cfg.Journal.Append(actx, UpNumbersID, journal.AnySeq, journal.NoEpoch, [][]byte{payload})
		cancel()
		if err == nil {
			return seq, nil
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("cluster: allocate up-number: %w", ctx.Err())
		}
		if !reported {
			c.cfg.Events.Append(protocol.Event{Type: protocol.EventJournalUnavailable, Detail: "allocating up-number: " + err.Error()})
			reported = true
		}
		// An unknown outcome may have allocated a number that is then never
		// used: harmless, up-numbers need only be unique and ordered.
		c.log.Warn("cannot allocate up-number from the journal; retrying", "err", err)
		if err := c.cfg.Clock.Sleep(ctx, backoff); err != nil {
			return 0, fmt.Errorf("cluster: allocate up-number: %w", err)
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (c *Cluster) startTransport() error {
	c.mu.Lock()
	uid := c.self.UID()
	c.mu.Unlock()
	c.cfg.Events.SetIncarnation(c.self.Incarnation)
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
	c.mu.Lock()
	tr := c.tr
	c.mu.Unlock()
	if tr != nil {
		if err := tr.Shutdown(); err != nil {
			c.log.Warn("gossip transport shutdown", "err", err)
		}
	}
}

// join contacts the seeds until one answers; the first seed bootstraps a
// new cluster at once if it is the first member the journal ever gave an
// up-number to, else if no seed answers within SeedTimeout (unless
// JoinOnly).
func (c *Cluster) join(ctx context.Context) error {
	self := c.Self()
	var others []string
	for _, s := range c.cfg.Seeds {
		if s != self.GossipAddr {
			others = append(others, s)
		}
	}
	firstSeed := len(c.cfg.Seeds) == 0 || c.cfg.Seeds[0] == self.GossipAddr
	first := firstSeed && !c.cfg.JoinOnly
	afterGone := firstSeed && c.cfg.JoinOnly && c.cfg.Previous != nil
	start := c.cfg.Clock.Elapsed()
	for {
		if first && firstEver(self) {
			// Up-number 1: no member was ever allocated one from this
			// journal before this one, and every member allocates before
			// it joins, so no cluster exists to be joined, and asking the
			// other seeds (each unreachable one costs a connect timeout)
			// and waiting for one is time lost. The other seeds never
			// bootstrap; they join this one. A restarted first seed has a
			// later number, and waits as before.
			c.log.Info("the first member of this journal: bootstrapping a new cluster")
			break
		}
		if len(others) > 0 {
			n, err := c.tr.Join(others)
			if n > 0 && c.knowsMembers() {
				break
			}
			// Seeds that answer but have not joined a cluster themselves
			// (restarted members waiting, like this one, on the far side
			// of a partition) are no cluster to join: as in Akka, only a
			// member acknowledges a join. Joining each other would make
			// an island with its own singletons.
			c.log.Debug("no member of a cluster answered", "answered", n, "err", err)
		}
		if first && c.cfg.Clock.Elapsed()-start >= c.cfg.SeedTimeout {
			c.log.Info("no seed answered; bootstrapping a new cluster")
			break
		}
		if afterGone && c.cfg.Clock.Elapsed()-start >= c.cfg.DownNoticeFor {
			if gone, why := c.previousGone(); gone {
				c.log.Info("the cluster that downed this node is gone; bootstrapping a new cluster", "why", why)
				c.cfg.Events.Append(protocol.Event{Type: protocol.EventDowningDecision, Detail: "bootstrapping: the previous cluster is gone (" + why + ")"})
				break
			}
		}
		if err := c.cfg.Clock.Sleep(ctx, 500*time.Millisecond); err != nil {
			return fmt.Errorf("cluster: join: %w", err)
		}
	}
	c.mu.Lock()
	c.joined = true
	c.state.merge(&record{Member: c.self, Status: StatusUp})
	c.noteNewLocked(c.self.UID())
	c.dirty = true
	c.bumpLocked()
	c.mu.Unlock()
	c.pushState(ctx, false)
	return nil
}

// inGoodStandingLocked reports whether this node is a member that may
// vouch for others: joined, and neither down nor removed.
func (c *Cluster) inGoodStandingLocked() bool {
	if !c.joined {
		return false
	}
	r := c.state[c.self.UID()]
	return r != nil && !r.Status.Final()
}

// knowsMembers reports whether this member has learnt of another member
// that is not down or removed: state that only members of a cluster hand
// out (an unjoined node shares none, see LocalState and NotifyJoin).
// previousGone reports whether every member of Config.Previous other than
// this node's own is down or removed there, or has been seen since as a
// newer incarnation at its address.
func (c *Cluster) previousGone() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var replaced []string
	for _, m := range c.cfg.Previous.Members {
		if m.Name == c.self.Name || m.Status.Final() {
			continue
		}
		newer := false
		for inc := range c.incarnations[m.GossipAddr] {
			if inc != m.Incarnation {
				newer = true
			}
		}
		if !newer {
			return false, ""
		}
		replaced = append(replaced, m.UID())
	}
	sort.Strings(replaced)
	if len(replaced) == 0 {
		return true, "every other member was downed or removed"
	}
	return true, "the others were downed, or restarted as new processes: " + strings.Join(replaced, ",")
}

func (c *Cluster) knowsMembers() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, r := range c.state {
		if uid != c.self.UID() && !r.Status.Final() {
			return true
		}
	}
	return false
}

// rejoinLoop re-joins known members memberlist has lost, so that the
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
		alive := map[string]bool{}
		for _, a := range c.tr.Alive() {
			alive[a] = true
		}
		snap := c.Snapshot()
		want := map[string]bool{}
		for _, s := range c.cfg.Seeds {
			want[s] = true
		}
		for _, m := range snap.Members {
			want[m.GossipAddr] = true
		}
		var addrs []string
		for a := range want {
			if !alive[a] && a != snap.Self.GossipAddr {
				addrs = append(addrs, a)
			}
		}
		if len(addrs) == 0 {
			continue
		}
		sort.Strings(addrs)
		if n, err := c.tr.Join(addrs); n > 0 {
			c.log.Debug("re-joined", "contacted", n)
		} else if err != nil {
			c.log.Debug("re-join found nobody", "addrs", addrs, "err", err)
		}
	}
}

// judgeLocked runs the failure detector and the resolver (no I/O), and
// returns the clock's Elapsed reading it judged at.
func (c *Cluster) judgeLocked() time.Duration {
	now := c.cfg.Clock.Elapsed()
	if last := time.Duration(c.lastTick.Load()); c.ticked.Load() && now-last > c.cfg.FailureTimeout {
		c.thawedAt.Store(int64(now))
		c.thawed.Store(true)
		c.log.Warn("this member was frozen or starved; not fresh for a failure timeout", "silent", now-last)
	}
	c.lastTick.Store(int64(now))
	c.ticked.Store(true)
	selfUID := c.self.UID()
	var unreach []string
	// In a fixed order: the events it logs, and so a simulation's run,
	// must not depend on a map's.
	for _, uid := range slices.Sorted(maps.Keys(c.state)) {
		r := c.state[uid]
		if uid == selfUID || r.Status.Final() {
			continue
		}
		ok := now-c.lastHeard[uid] <= c.cfg.FailureTimeout
		if was, seen := c.reachable[uid]; !seen || was != ok {
			c.reachable[uid] = ok
			if ok {
				delete(c.unreachAt, uid)
				if seen {
					c.cfg.Events.Append(protocol.Event{Type: protocol.EventMemberReachable, Member: uid})
				}
			} else {
				c.unreachAt[uid] = now
				c.cfg.Events.Append(protocol.Event{Type: protocol.EventMemberUnreachable, Member: uid})
				c.log.Info("member unreachable", "peer", uid)
			}
			c.bumpLocked()
		}
		if !ok {
			unreach = append(unreach, uid)
		}
	}
	sort.Strings(unreach)
	if me := c.state[selfUID]; me != nil && !slices.Equal(me.Unreachable, unreach) {
		c.obsVersion++
		me.ObsVersion = c.obsVersion
		me.Unreachable = unreach
		c.dirty = true
	}
	if me := c.state[selfUID]; me != nil && !me.Status.Final() {
		c.resolveLocked(now)
	}
	return now
}

// tick runs the failure detector and the resolver, then sends heartbeats
// and, if the state changed, pushes it.
func (c *Cluster) tick(ctx context.Context) {
	c.mu.Lock()
	now := c.judgeLocked()
	selfUID := c.self.UID()
	hb := c.heartbeatLocked(nil)
	var targets []string
	live := map[string]bool{}
	for uid, r := range c.state {
		if uid != selfUID && !r.Status.Final() {
			targets = append(targets, r.Member.GossipAddr)
			live[r.Member.GossipAddr] = true
		}
	}
	slices.Sort(targets) // sent in a fixed order
	notices := map[string][]byte{}
	for uid, at := range c.downSeen {
		r := c.state[uid]
		if r == nil || r.Status != StatusDown || now-at > c.cfg.DownNoticeFor {
			delete(c.downSeen, uid)
			continue
		}
		if !live[r.Member.GossipAddr] && !c.cfg.BlindToOneWay { // not once a new incarnation holds the address
			notices[r.Member.GossipAddr] = c.heartbeatLocked(r)
		}
	}
	push := c.dirty
	c.dirty = false
	c.mu.Unlock()

	for _, a := range targets {
		if err := c.tr.Send(a, hb); err != nil {
			c.log.Debug("heartbeat", "to", a, "err", err)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(notices)) {
		if err := c.tr.Send(a, notices[a]); err != nil {
			c.log.Debug("down notice", "to", a, "err", err)
		}
	}
	if push {
		c.pushState(ctx, false)
	}
}

// resolveLocked is the split-brain resolver's clock-driven part.
func (c *Cluster) resolveLocked(now time.Duration) {
	d := c.cfg.Downing
	selfUID := c.self.UID()
	if d.Strategy == AutoDown {
		var down []string
		for uid, at := range c.unreachAt {
			if r := c.state[uid]; r != nil && !r.Status.Final() && now-at >= d.AutoDownAfter {
				down = append(down, uid)
			}
		}
		if len(down) > 0 {
			sort.Strings(down)
			c.applyLocked(decision{down: down, reason: "auto-down: unreachable for " + d.AutoDownAfter.String()})
		}
		return
	}
	v := view{self: selfUID, observations: map[string][]string{}}
	for uid, r := range c.state {
		if r.Status.Final() {
			continue
		}
		v.members = append(v.members, MemberState{Member: r.Member, Status: r.Status, Reachable: uid == selfUID || c.reachable[uid]})
		if len(r.Unreachable) > 0 {
			v.observations[uid] = r.Unreachable
		}
	}
	if dec := c.resolver.step(d, now, v); !dec.empty() {
		c.applyLocked(dec)
	}
}

// applyLocked marks members down.
func (c *Cluster) applyLocked(d decision) {
	c.cfg.Events.Append(protocol.Event{Type: protocol.EventDowningDecision, Detail: d.reason + "; down: " + strings.Join(d.down, ",")})
	c.log.Warn("split-brain resolver decided", "reason", d.reason, "down", d.down)
	for _, uid := range d.down {
		r := c.state[uid]
		if r == nil || r.Status.Final() {
			continue
		}
		c.setStatusLocked(r, StatusDown, d.reason)
	}
	c.resolver.reset()
}

// setStatusLocked moves r forward to st, logging and acting on it.
func (c *Cluster) setStatusLocked(r *record, st Status, reason string) {
	before := r.Status
	if !c.state.merge(&record{Member: r.Member, Status: st, DownReason: reason}) {
		return
	}
	c.dirty = true
	c.noteStatusLocked(r.Member.UID(), before)
	c.bumpLocked()
}

// noteStatusLocked logs a status change of uid and reacts to this member
// being downed.
func (c *Cluster) noteStatusLocked(uid string, before Status) {
	r := c.state[uid]
	if r == nil || r.Status == before {
		return
	}
	selfUID := c.self.UID()
	switch r.Status {
	case StatusLeaving:
		c.cfg.Events.Append(protocol.Event{Type: protocol.EventMemberLeaving, Member: uid})
	case StatusRemoved:
		c.cfg.Events.Append(protocol.Event{Type: protocol.EventMemberRemoved, Member: uid})
	case StatusDown:
		if uid == selfUID {
			c.cfg.Events.Append(protocol.Event{Type: protocol.EventSelfDowned, Member: uid, Detail: r.DownReason})
			c.log.Warn("this member was downed", "reason", r.DownReason)
			c.downedOnce.Do(func() { close(c.downed) })
		} else {
			c.cfg.Events.Append(protocol.Event{Type: protocol.EventMemberDowned, Member: uid, Detail: r.DownReason})
			c.downSeen[uid] = c.cfg.Clock.Elapsed()
		}
	}
	if r.Status.Final() {
		delete(c.reachable, uid)
		delete(c.unreachAt, uid)
		delete(c.lastHeard, uid)
		c.state.pruneGone(c.cfg.MaxGone)
	}
}

// noteNewLocked handles a member seen for the first time.
func (c *Cluster) noteNewLocked(uid string) {
	r := c.state[uid]
	if r == nil {
		return
	}
	if r.Status.Final() {
		if uid == c.self.UID() && r.Status == StatusDown {
			c.noteStatusLocked(uid, StatusUp)
		}
		return
	}
	c.lastHeard[uid] = c.cfg.Clock.Elapsed() // grace period before judging it
	c.cfg.Events.Append(protocol.Event{Type: protocol.EventMemberUp, Member: uid, Detail: r.Member.String()})
	// A newer incarnation at the same address proves the older process is
	// gone (it held the port): down the old one at once.
	for id, o := range c.state {
		if id == uid || o.Status.Final() || o.Member.GossipAddr != r.Member.GossipAddr {
			continue
		}
		older, newer := o, r
		if r.Member.IsOlderThan(o.Member) {
			older, newer = r, o
		}
		c.cfg.Events.Append(protocol.Event{Type: protocol.EventIncarnationReplaced, Member: older.Member.UID(), Detail: "by " + newer.Member.UID()})
		c.setStatusLocked(older, StatusDown, "replaced by new incarnation "+newer.Member.UID())
	}
}

// mergeLocked folds remote records into the state.
func (c *Cluster) mergeLocked(recs []*record) {
	changed := false
	for _, r := range recs {
		if r == nil {
			continue
		}
		uid := r.Member.UID()
		if uid == c.self.UID() && r.Status == StatusUp && !c.joined {
			continue // our own record comes from us
		}
		prev, known := c.state[uid]
		var before Status
		if known {
			before = prev.Status
		}
		if !c.state.merge(r) {
			continue
		}
		changed = true
		if !known {
			c.noteNewLocked(uid)
		} else {
			c.noteStatusLocked(uid, before)
		}
	}
	if changed {
		c.bumpLocked()
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

// heartbeatLocked encodes a heartbeat; down, if not nil, makes it a down
// notice for that member.
func (c *Cluster) heartbeatLocked(down *record) []byte {
	hb := heartbeat{From: c.self.UID(), Addr: c.self.GossipAddr, Digest: c.state.digest(), Down: down}
	if me := c.state[c.self.UID()]; me != nil {
		hb.ObsVersion, hb.Unreachable = me.ObsVersion, me.Unreachable
	}
	b, _ := json.Marshal(hb)
	return append([]byte{msgHeartbeat}, b...)
}

// onMessage handles a user message from memberlist (heartbeat or state).
func (c *Cluster) onMessage(buf []byte) {
	if len(buf) < 2 {
		return
	}
	switch buf[0] {
	case msgHeartbeat:
		var hb heartbeat
		if json.Unmarshal(buf[1:], &hb) != nil {
			return
		}
		c.mu.Lock()
		r := c.state[hb.From]
		if r != nil && !r.Status.Final() {
			c.lastHeard[hb.From] = c.cfg.Clock.Elapsed()
		}
		// Only a member this one knows speaks for itself (as for joins:
		// only members vouch), and only once this one has joined.
		if r != nil && c.joined && !c.cfg.BlindToOneWay {
			if hb.ObsVersion > r.ObsVersion {
				c.mergeLocked([]*record{{Member: r.Member, Status: r.Status, ObsVersion: hb.ObsVersion, Unreachable: hb.Unreachable}})
			}
			if d := hb.Down; d != nil && d.Status == StatusDown && d.Member.UID() == c.self.UID() {
				c.mergeLocked([]*record{d})
			}
		}
		differ := c.joined && hb.Digest != c.state.digest()
		c.mu.Unlock()
		if differ && hb.Addr != "" {
			c.goPush(context.Background(), hb.Addr, nil)
		}
	case msgState:
		var recs []*record
		if json.Unmarshal(buf[1:], &recs) != nil {
			return
		}
		c.mu.Lock()
		c.mergeLocked(recs)
		c.mu.Unlock()
	}
}

func (c *Cluster) encodeStateLocked() []byte {
	b, _ := json.Marshal(c.state.records())
	return append([]byte{msgState}, b...)
}

// pushState sends the full state to every non-final member; with wait it
// returns only when every send finished.
func (c *Cluster) pushState(ctx context.Context, wait bool) {
	c.mu.Lock()
	var addrs []string
	for uid, r := range c.state {
		if uid != c.self.UID() && !r.Status.Final() {
			addrs = append(addrs, r.Member.GossipAddr)
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, a := range addrs {
		c.goPush(ctx, a, &wg)
	}
	if wait {
		wg.Wait()
	}
}

// goPush runs pushTo in a goroutine Run waits for; wg, if not nil, is
// also told when it is done.
func (c *Cluster) goPush(ctx context.Context, addr string, wg *sync.WaitGroup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return
	}
	c.pushes.Add(1)
	if wg != nil {
		wg.Add(1)
	}
	go func() {
		defer c.pushes.Done()
		if wg != nil {
			defer wg.Done()
		}
		c.pushTo(ctx, addr)
	}()
}

// pushTo sends the full state to one address over a stream, at most one
// push in flight per address.
func (c *Cluster) pushTo(ctx context.Context, addr string) {
	c.mu.Lock()
	if c.pushing[addr] || c.tr == nil || ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.pushing[addr] = true
	msg := c.encodeStateLocked()
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.joined {
		return errors.New("cluster: not joined yet")
	}
	r := c.state[uid]
	if r == nil {
		return fmt.Errorf("%w: %s", ErrUnknownMember, uid)
	}
	if r.Status.Final() {
		return nil
	}
	const reason = "downed by an operator"
	c.cfg.Events.Append(protocol.Event{Type: protocol.EventDowningDecision, Detail: reason + "; down: " + uid})
	c.log.Warn("member downed by an operator", "down", uid)
	c.setStatusLocked(r, StatusDown, reason)
	return nil
}

// BeginLeave marks this member Leaving: it stays a member while it hands
// over what it runs; then FinishLeave removes it.
func (c *Cluster) BeginLeave() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.state[c.self.UID()]
	if r == nil || !c.joined {
		return errors.New("cluster: not joined yet")
	}
	if r.Status.Final() {
		return fmt.Errorf("cluster: cannot leave: this member is %s", r.Status)
	}
	c.setStatusLocked(r, StatusLeaving, "")
	return nil
}

// FinishLeave marks this member Removed, tells the others, and leaves
// memberlist; Run then returns.
func (c *Cluster) FinishLeave(ctx context.Context) error {
	c.mu.Lock()
	r := c.state[c.self.UID()]
	if r == nil || !c.joined {
		c.mu.Unlock()
		return errors.New("cluster: not joined yet")
	}
	if r.Status == StatusDown {
		c.mu.Unlock()
		return errors.New("cluster: cannot leave: this member was downed")
	}
	c.setStatusLocked(r, StatusRemoved, "")
	tr := c.tr
	c.mu.Unlock()
	c.pushState(ctx, true)
	if tr != nil {
		if err := tr.Leave(time.Second); err != nil {
			c.log.Debug("gossip leave", "err", err)
		}
	}
	c.leaveOnce.Do(func() {
		c.cfg.Events.Append(protocol.Event{Type: protocol.EventLeaveCompleted})
		close(c.leaveDone)
	})
	return nil
}

// receiver is the Cluster as its transport's Receiver. The transport calls
// it under its own locks: it never calls back into the transport.
type receiver Cluster

func (d *receiver) Bound(addr string) {
	c := (*Cluster)(d)
	c.mu.Lock()
	c.self.GossipAddr = addr
	c.mu.Unlock()
}

func (d *receiver) Meta() []byte {
	c := (*Cluster)(d)
	c.mu.Lock()
	b, _ := json.Marshal(c.self)
	c.mu.Unlock()
	return b
}

func (d *receiver) Message(b []byte) { (*Cluster)(d).onMessage(b) }

func (d *receiver) LocalState(join bool) []byte {
	c := (*Cluster)(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.inGoodStandingLocked() {
		// Not a member (yet, or any more: downed): nothing to vouch for.
		// A node joining through this one must find a member elsewhere;
		// a downed member's view would make the joiner part of a cluster
		// that has cast it out.
		return []byte("[]")
	}
	b, _ := json.Marshal(c.state.records())
	return b
}

func (d *receiver) MergeRemoteState(buf []byte, join bool) {
	var recs []*record
	if json.Unmarshal(buf, &recs) != nil {
		return
	}
	c := (*Cluster)(d)
	c.mu.Lock()
	c.mergeLocked(recs)
	c.mu.Unlock()
}

// Met learns of new members from the transport as early as possible.
func (d *receiver) Met(meta []byte) {
	var m Member
	if json.Unmarshal(meta, &m) != nil || m.Name == "" || m.Incarnation == "" || m.UpNumber <= 0 {
		return
	}
	c := (*Cluster)(d)
	c.mu.Lock()
	if !c.joined && m.GossipAddr != "" {
		if c.incarnations[m.GossipAddr] == nil {
			c.incarnations[m.GossipAddr] = map[string]bool{}
		}
		c.incarnations[m.GossipAddr][m.Incarnation] = true
	}
	// Only a member takes a newcomer in; before joining, this node learns
	// the members from a member's state.
	if _, known := c.state[m.UID()]; !known && m.UID() != c.self.UID() && c.inGoodStandingLocked() {
		c.mergeLocked([]*record{{Member: m, Status: StatusUp}})
	}
	c.mu.Unlock()
}

// Package nodes runs reference nodes in a deterministic simulation: each
// node's membership (cluster.MembershipState), singleton managers and
// proxies (singleton.ManagerState, ProxyState), and sharding (per entity
// type a sharding.RegionState, the ShardStates of the shards it hosts with
// the real register and log entities, and the coordinator singleton, a
// sharding.CoordinatorMachine) are the very state machines the real node
// runs, driven here over sim's virtual network, an in-memory journal
// (sim.Journal) and virtual time instead of memberlist, HTTP, the journal
// server and the machine's clock. Everything happens as events of one
// sim.World, on one goroutine, in an order the seed decides, so a seed
// replays exactly, and the events the nodes log come out byte for byte
// the same.
//
// A node here is what the real node is: it allocates its up-number from
// the journal, joins through its seeds, sends heartbeats and pushes its
// state, resolves partitions, restarts in process after it was downed
// (joining only, with its previous view), leaves gracefully (shards
// first, then singletons), runs the id-generator and the coordinators,
// routes, buffers and forwards entity messages and fire-and-forget tells,
// runs at-least-once senders that redeliver to log entities (simSender),
// and has a clock of its own that clock faults skew. Faults act on the
// simulated world: partitions and one-way cuts, loss, kills (volatile
// state lost), pauses, journal cuts and a stopped journal, operator
// downing, graceful leaves, nodes added and removed.
//
// Not here: memberlist's own gossip, modelled by push/pull exchanges over
// streams (see exchange).
package nodes

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/entities"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/sim"
)

// Config is a simulated cluster. Zero durations take the reference node's
// defaults.
type Config struct {
	Seed  uint64
	Nodes int
	// Link is how every direction between nodes behaves until a fault
	// changes it (default: 1 ms delay, 2 ms jitter, no loss).
	Link sim.Link
	// Journal is the journal every node uses (nil: a sim.Journal, in
	// memory, stamped with the virtual time).
	Journal journal.Journal
	// StartEvery: node i (from 0) starts at i × StartEvery; 0 starts all
	// at once. Started together, the nodes draw their up-numbers (their
	// age) in an order the seed decides, and the first seed need not be
	// the oldest (see docs/simulation.md, "open").
	StartEvery time.Duration

	HeartbeatInterval time.Duration // 200 ms
	FailureTimeout    time.Duration // 2 s
	SeedTimeout       time.Duration // 3 s
	RejoinInterval    time.Duration // 2 s
	Downing           cluster.DowningConfig
	DownRemovalMargin time.Duration // Downing.StableAfter
	RetryInterval     time.Duration // the singleton manager's default
	RestartDelay      time.Duration // 1 s: a downed node's restart in process
	LeaveTimeout      time.Duration // 30 s
	RequestTimeout    time.Duration // 10 s: a client request's bound in the node
	RedeliverInterval time.Duration // 1 s: an at-least-once sender's redelivery tick
	// NoFencing and BlindToOneWay are the deliberate bugs
	// singleton-no-fencing and blind-to-one-way.
	NoFencing, BlindToOneWay bool

	// EntityTypes are the sharded entity types every node runs (of
	// protocol.TypeRegister, TypeLog and TypeSender);
	// none: the nodes run no sharding. Sharding configures each (its
	// TypeName is set per type; zero fields take the reference node's
	// defaults, its Bugs the deliberate sharding bugs). EntitySkipReplay
	// is the deliberate bug entity-skip-replay.
	EntityTypes      []string
	Sharding         sharding.Settings
	EntitySkipReplay bool

	// Events, if set, receives every event a node logs, as the harness
	// records it (Lo = Hi = the virtual time).
	Events func(history.NodeEvent)
	// Trace, if set, receives a line for each step taken, for reading a
	// failing seed.
	Trace func(string)
}

func (c *Config) setDefaults() {
	if c.Link == (sim.Link{}) {
		c.Link = sim.Link{Delay: time.Millisecond, Jitter: 2 * time.Millisecond}
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = cluster.DefaultHeartbeatInterval
	}
	if c.FailureTimeout <= 0 {
		c.FailureTimeout = cluster.DefaultFailureTimeout
	}
	if c.SeedTimeout <= 0 {
		c.SeedTimeout = cluster.DefaultSeedTimeout
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = cluster.DefaultRejoinInterval
	}
	if c.Downing.Strategy == "" {
		c.Downing.Strategy = cluster.KeepMajority
	}
	if c.Downing.StableAfter <= 0 {
		c.Downing.StableAfter = 5 * time.Second
	}
	if c.DownRemovalMargin <= 0 {
		c.DownRemovalMargin = c.Downing.StableAfter
	}
	if c.RestartDelay <= 0 {
		c.RestartDelay = time.Second
	}
	if c.LeaveTimeout <= 0 {
		c.LeaveTimeout = 30 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.RedeliverInterval <= 0 {
		c.RedeliverInterval = time.Second
	}
	if c.Sharding.DownRemovalMargin <= 0 {
		c.Sharding.DownRemovalMargin = c.DownRemovalMargin
	}
	c.Sharding = c.Sharding.WithDefaults()
}

// epochUnix is the wall-clock time a simulation starts at (2026-01-01
// UTC), for the events' Time: fixed, so that the same seed writes the same
// bytes.
const epochUnix = 1767225600

// Cluster is the simulated cluster: its world, its network, its nodes.
type Cluster struct {
	cfg   Config
	World *sim.World
	Net   *sim.Network
	nodes []*Node
	// lives are the singleton instances' lives, in the order they began.
	lives []Life
	// journalCut: nodes that cannot reach the journal; healed: what waits
	// for each node's cut to heal (entity calls waiting on the journal).
	journalCut  map[string]bool
	journalDown bool
	healed      map[string][]func()
	// calls: entity calls running as coroutines (waiting on a cut
	// journal), stopped by Close.
	calls map[*sim.Co]bool
}

// Life is one singleton instance's life as the simulation knows it: from
// its start (StartInstance) until it counts as stopped (InInstanceDone),
// the span its manager cannot tell apart from running.
type Life struct {
	Node, Member string
	Num          int
	From, Till   time.Duration // Till 0: alive
}

// New builds a cluster of cfg.Nodes nodes n1…nN, each seeded with them all,
// started from time 0 (see Config.StartEvery).
func New(cfg Config) (*Cluster, error) {
	cfg.setDefaults()
	if cfg.Nodes < 1 {
		return nil, fmt.Errorf("sim nodes: %d nodes: want at least 1", cfg.Nodes)
	}
	if err := cfg.Downing.Validate(); err != nil {
		return nil, fmt.Errorf("sim nodes: %w", err)
	}
	w := sim.New(cfg.Seed)
	if cfg.Journal == nil {
		cfg.Journal = sim.NewJournal(func() time.Time { return time.Unix(epochUnix, 0).UTC().Add(w.Now()) })
	}
	c := &Cluster{cfg: cfg, World: w, Net: sim.NewNetwork(w, cfg.Link), journalCut: map[string]bool{},
		healed: map[string][]func(){}, calls: map[*sim.Co]bool{}}
	for i := range cfg.Nodes {
		n := &Node{c: c, Name: fmt.Sprintf("n%d", i+1)}
		n.addr = n.Name + ":7946"
		c.nodes = append(c.nodes, n)
	}
	for i, n := range c.nodes {
		w.At(time.Duration(i)*cfg.StartEvery, n.startProcess)
	}
	return c, nil
}

// EntityTypes are the sharded entity types its nodes run.
func (c *Cluster) EntityTypes() []string { return slices.Clone(c.cfg.EntityTypes) }

// Nodes are the cluster's nodes, n1 first.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// AddNode adds a node to the cluster and starts its process now: it
// joins through the cluster's seeds, as a node the runtimes add does. Its
// name is the next unused one.
func (c *Cluster) AddNode() *Node {
	name := ""
	for i := len(c.nodes) + 1; ; i++ {
		if name = fmt.Sprintf("n%d", i); c.Node(name) == nil {
			break
		}
	}
	n := &Node{c: c, Name: name, addr: name + ":7946"}
	c.nodes = append(c.nodes, n)
	c.tracef("%s added", name)
	n.startProcess()
	return n
}

// RemoveNode ends node name's process and takes the node out of the
// cluster (the others see it unreachable, and down it).
func (c *Cluster) RemoveNode(name string) {
	c.Kill(name)
	c.nodes = slices.DeleteFunc(c.nodes, func(n *Node) bool { return n.Name == name })
}

// Node is the node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Lives are the singleton instances' lives so far.
func (c *Cluster) Lives() []Life { return slices.Clone(c.lives) }

func (c *Cluster) tracef(format string, args ...any) {
	if c.cfg.Trace != nil {
		c.cfg.Trace(fmt.Sprintf("%10v ", c.World.Now()) + fmt.Sprintf(format, args...))
	}
}

// seeds are every node's gossip address, n1 first, as the harness's
// runtimes give them.
func (c *Cluster) seeds() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr)
	}
	return out
}

// Node is one simulated node: a process that runs one member (an
// incarnation) at a time, restarted in process after it is downed.
type Node struct {
	c    *Cluster
	Name string
	addr string
	inc  *incarnation // nil: the process is not running
	// process: bumped at each process start; events of a killed process's
	// timers and messages find it changed and do nothing.
	process int
	seq     uint64 // the process's event log's last sequence number
	// restarted: this process ran a member before (it was downed), so the
	// next joins only; prev is that member's last view.
	restarted bool
	prev      *cluster.Snapshot
	// paused: the process is stopped (SIGSTOP); what reaches it waits in
	// backlog, in order, and runs when it resumes.
	paused  bool
	backlog []waiting
	// reading: the gossip the node's reader has taken but not yet handled
	// (after a pause), one message a step; reads: a step of it is due.
	reading []func()
	reads   bool
	// ticking: the kinds of periodic work waiting in backlog, so that a
	// long pause leaves one tick of each, as a Go ticker does.
	ticking map[string]bool
	// entityStarts numbers the process's entity incarnations.
	entityStarts uint64
	// clock is the process's clock: the real node's (clock.Adjustable)
	// over the virtual time, skewed by clock faults.
	clock *clock.Adjustable
}

// elapsed is the node clock's monotonic reading: what its machines step
// with (it drifts with the clock, never jumps).
func (n *Node) elapsed() time.Duration { return n.clock.Elapsed() }

// SetClock skews the node's clock, as the real node's admin endpoint does
// (offset and drift; the clock goes on from now), and logs it.
func (n *Node) SetClock(s clock.Skew) error {
	if n.clock == nil {
		return fmt.Errorf("node %s: its process is not running", n.Name)
	}
	if err := n.clock.Set(s); err != nil {
		return err
	}
	n.emit(protocol.Event{Type: protocol.EventClockChanged, Detail: fmt.Sprintf("offset %v drift %v", s.Offset, s.Drift)})
	return nil
}

// Clock is the node's clock (nil when its process is not running).
func (n *Node) Clock() *clock.Adjustable { return n.clock }

// worldTime is the virtual time as a clock's base: what the machine's
// clock is to a real node. The node's timers are world events (see
// incarnation.after), so it makes none.
type worldTime struct{ c *Cluster }

func (w worldTime) Now() time.Time { return time.Unix(epochUnix, 0).UTC().Add(w.c.World.Now()) }
func (worldTime) NewTimer(time.Duration) clock.Timer {
	panic("sim: a node's timers are world events")
}
func (worldTime) NewTicker(time.Duration) clock.Ticker {
	panic("sim: a node's tickers are world events")
}

// Running reports whether the node's process runs (paused or not).
func (n *Node) Running() bool { return n.inc != nil }

// Paused reports whether the node's process is paused.
func (n *Node) Paused() bool { return n.paused }

// Member is the node's current member, if its process runs.
func (n *Node) Member() (cluster.Member, bool) {
	if n.inc == nil {
		return cluster.Member{}, false
	}
	return n.inc.m.Self(), true
}

// Snapshot is the node's current view, if its process runs.
func (n *Node) Snapshot() (cluster.Snapshot, bool) {
	if n.inc == nil {
		return cluster.Snapshot{}, false
	}
	return n.inc.m.Snapshot(), true
}

// Do runs f in the node's process: now, or when it resumes if it is
// paused; never if it is not running (what reaches a killed process is
// lost). It reports whether the process runs.
func (n *Node) Do(f func()) bool {
	if n.inc == nil {
		return false
	}
	process := n.process
	n.run("", func() {
		if n.process == process {
			f()
		}
	})
	return true
}

// Status is the node's member's status ("" when its process is not
// running).
func (n *Node) Status() cluster.Status {
	if n.inc == nil {
		return ""
	}
	return n.inc.m.SelfStatus()
}

// run runs f now, or when the node resumes if it is paused; kind, if not
// empty, is a periodic task of which one waiting run is enough, or
// kindGossip (what the node's reader takes, in order).
func (n *Node) run(kind string, f func()) {
	if !n.paused {
		if kind == kindGossip && len(n.reading) > 0 {
			n.reading = append(n.reading, f) // behind what the reader holds
			return
		}
		f()
		return
	}
	periodic := kind != "" && kind != kindGossip
	if periodic {
		if n.ticking[kind] {
			return
		}
		n.ticking[kind] = true
	}
	n.backlog = append(n.backlog, waiting{group: groupOf(kind), f: func() {
		if periodic {
			delete(n.ticking, kind)
		}
		f()
	}})
}

// waiting is what reached a paused process; group names the goroutine of
// the real node that would take it ("": one of its own).
type waiting struct {
	group string
	f     func()
}

// kindGossip is what the node's datagram and stream reader takes: one
// goroutine (memberlist's), in the order it came.
const kindGossip = "gossip"

func groupOf(kind string) string {
	if kind == kindGossip {
		return kindGossip
	}
	return ""
}

// emit logs an event of the node's process.
func (n *Node) emit(e protocol.Event) {
	n.seq++
	e.Seq = n.seq
	now := n.c.World.Now()
	e.Time = n.clock.Now()
	if n.inc != nil && e.Incarnation == "" {
		e.Incarnation = n.inc.m.Self().Incarnation
	}
	if n.c.cfg.Events != nil {
		n.c.cfg.Events(history.NodeEvent{Node: n.Name, Lo: int64(now), Hi: int64(now), Event: e})
	}
}

// startProcess starts a new process on the node: its volatile state is
// new (event log, restart memory), its journal is the cluster's.
func (n *Node) startProcess() {
	n.process++
	n.seq = 0
	n.restarted, n.prev = false, nil
	n.paused, n.backlog, n.reading, n.ticking = false, nil, nil, map[string]bool{}
	n.entityStarts = 0
	n.clock = clock.On(worldTime{n.c})
	n.emit(protocol.Event{Type: protocol.EventNodeStarted, Detail: "http " + n.Name + ":8080"})
	n.startIncarnation()
}

// startIncarnation starts a new member in the running process.
func (n *Node) startIncarnation() {
	c := n.c
	var b [6]byte
	for i := range b {
		b[i] = byte(c.World.Rand().Uint32())
	}
	self := cluster.Member{Name: n.Name, Incarnation: hex.EncodeToString(b[:]),
		HTTPAddr: n.Name + ":8080", PeerAddr: n.Name + ":8081"}
	mcfg := cluster.MembershipConfig{
		Seeds: c.seeds(), JoinOnly: n.restarted, Previous: n.prev,
		SeedTimeout: c.cfg.SeedTimeout, FailureTimeout: c.cfg.FailureTimeout,
		DownNoticeFor: 2*c.cfg.DownRemovalMargin + c.cfg.FailureTimeout,
		MaxGone:       cluster.DefaultMaxGone, Downing: c.cfg.Downing, BlindToOneWay: c.cfg.BlindToOneWay,
	}
	inc := &incarnation{n: n, process: n.process, m: cluster.NewMembershipState(mcfg, self),
		heard: map[string]time.Duration{}, pushing: map[string]bool{}, regionCalls: map[uint64]func(regionRes){}, tells: map[string][]tell{}}
	n.inc = inc
	// The configuration is the simulation's own: an error here is a bug.
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	mgr, err := newManager(inc, SingletonName, nil)
	must(err)
	px, err := newProxy(inc, SingletonName)
	must(err)
	inc.mgrs, inc.proxies = []*manager{mgr}, []*proxy{px}
	for _, typ := range c.cfg.EntityTypes {
		s := c.cfg.Sharding
		s.TypeName = typ
		must(s.Validate())
		name := sharding.CoordinatorName(typ)
		mgr, err := newManager(inc, name, func(m *manager) (simInstance, error) { return newCoordinator(m, s) })
		must(err)
		px, err := newProxy(inc, name)
		must(err)
		inc.mgrs, inc.proxies = append(inc.mgrs, mgr), append(inc.proxies, px)
		r := newRegion(inc, s, px)
		opts := entities.Options{SkipReplay: c.cfg.EntitySkipReplay}
		switch typ {
		case protocol.TypeRegister:
			r.factory = entities.NewRegister(opts)
		case protocol.TypeLog:
			r.factory = entities.NewLog(opts)
		case protocol.TypeSender:
			r.factory = senderFactory(r, opts, c.cfg.RedeliverInterval)
		default:
			panic(fmt.Sprintf("sim: entity type %q is not simulated", typ))
		}
		inc.regions = append(inc.regions, r)
	}
	c.tracef("%s starts member %s", n.Name, self.UID())
	inc.step(cluster.InStart{})
}

// Kill ends the node's process at once: its volatile state is lost, what
// is sent to it is dropped; Start starts a new one.
func (c *Cluster) Kill(name string) {
	n := c.Node(name)
	if n == nil || n.inc == nil {
		return
	}
	c.tracef("%s killed", name)
	n.inc.stop()
	n.process++ // what the killed process had scheduled finds it gone
	n.inc = nil
	n.paused, n.backlog, n.reading = false, nil, nil
	c.Net.Close(n.addr)
}

// Start starts a new process on a node whose process is not running.
func (c *Cluster) Start(name string) {
	n := c.Node(name)
	if n == nil || n.inc != nil {
		return
	}
	c.tracef("%s started", name)
	n.startProcess()
}

// Pause stops the node's process (SIGSTOP): it takes no step until Resume.
func (c *Cluster) Pause(name string) {
	if n := c.Node(name); n != nil && n.inc != nil {
		c.tracef("%s paused", name)
		n.paused = true
	}
}

// Resume lets a paused process run again: what reached it meanwhile runs
// at once, in an order drawn from the seed.
func (c *Cluster) Resume(name string) {
	n := c.Node(name)
	if n == nil || !n.paused {
		return
	}
	c.tracef("%s resumed", name)
	n.paused = false
	backlog := n.backlog
	n.backlog = nil
	// What waited runs now, in an order the seed decides: a thawed
	// process's goroutines (the one reading datagrams and pushes, in the
	// order they came; each serving a request that waited in its
	// sockets) all wake at once and race.
	for _, w := range backlog {
		if w.group == kindGossip {
			n.reading = append(n.reading, w.f)
			continue
		}
		c.World.After(0, func() { n.run("", w.f) })
	}
	n.read()
}

// read has the node's reader handle what it holds, one message a step, in
// the order it came: a real reader handles a datagram or a push at a time
// while the thawed request goroutines run beside it, so each message races
// with them (before, all of it ran in one step).
func (n *Node) read() {
	if n.reads || len(n.reading) == 0 {
		return
	}
	n.reads = true
	process := n.process
	n.c.World.After(0, func() {
		n.reads = false
		if n.paused || n.process != process || len(n.reading) == 0 {
			return // paused again: Resume goes on; killed: it is gone
		}
		f := n.reading[0]
		n.reading = n.reading[1:]
		f()
		n.read()
	})
}

// Partition cuts every direction between nodes of different sides (node
// names); nodes on no side keep their links.
func (c *Cluster) Partition(sides ...[]string) {
	c.tracef("partition %v", sides)
	for i, a := range sides {
		for j, b := range sides {
			if i == j {
				continue
			}
			for _, x := range a {
				for _, y := range b {
					c.Net.Cut(x+":7946", y+":7946")
				}
			}
		}
	}
}

// CutOneWay drops everything from → to.
func (c *Cluster) CutOneWay(from, to string) {
	c.tracef("cut %s -> %s", from, to)
	c.Net.Cut(from+":7946", to+":7946")
}

// SetLoss makes every direction lose datagrams with probability p.
func (c *Cluster) SetLoss(p float64) {
	c.tracef("loss %v", p)
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				l := c.Net.Link(a.addr, b.addr)
				l.Loss = p
				c.Net.SetLink(a.addr, b.addr, l)
			}
		}
	}
}

// Heal gives every direction its base link again.
func (c *Cluster) Heal() {
	c.tracef("heal")
	c.Net.HealAll()
}

// CutJournal makes the journal unreachable from node name (or reachable
// again).
func (c *Cluster) CutJournal(name string, cut bool) {
	c.journalCut[name] = cut
	if !cut {
		c.journalBack(name)
	}
}

// StopJournal stops the journal's process (kill:journal) or starts it
// again: while it is stopped no node reaches it; what it stored stays.
func (c *Cluster) StopJournal(stopped bool) {
	c.journalDown = stopped
	if !stopped {
		for _, n := range slices.Sorted(maps.Keys(c.healed)) {
			c.journalBack(n)
		}
	}
}

// journalBack wakes what waits for node name to reach the journal (each
// looks again: another cut may remain).
func (c *Cluster) journalBack(name string) {
	waiting := c.healed[name]
	delete(c.healed, name)
	for _, f := range waiting {
		c.World.After(0, f)
	}
}

// journalReachable reports whether node name reaches the journal.
func (c *Cluster) journalReachable(name string) bool { return !c.journalDown && !c.journalCut[name] }

// Close ends what the simulation still runs outside its events (entity
// calls waiting on a cut journal); call it once the world is done.
func (c *Cluster) Close() {
	for co := range c.calls {
		co.Stop() // the world is done: the order cannot matter
	}
	clear(c.calls)
}

// Down has node at down member uid, as an operator would.
// DownNow downs uid on node at's word now (the node's process runs and
// is not paused: its caller is in it) and returns the membership's
// refusal, if any.
func (c *Cluster) DownNow(at, uid string) error {
	n := c.Node(at)
	if n == nil || n.inc == nil {
		return fmt.Errorf("node %s: its process is not running", at)
	}
	return n.inc.step(cluster.InDown{UID: uid})
}

func (c *Cluster) Down(at, uid string) {
	if n := c.Node(at); n != nil && n.inc != nil {
		n.run("", func() { n.inc.step(cluster.InDown{UID: uid}) })
	}
}

// Leave has node name leave gracefully: it hands its singleton over, is
// removed, and its process ends.
func (c *Cluster) Leave(name string) {
	if n := c.Node(name); n != nil && n.inc != nil {
		n.run("", func() { n.inc.beginLeave() })
	}
}

// Run runs the simulation until virtual time t.
func (c *Cluster) Run(t time.Duration) { c.World.RunUntil(t) }

// Converged reports whether every running node is Up, sees every running
// node's member Up and reachable, and none other: the membership has
// settled.
func (c *Cluster) Converged() bool {
	var want []string
	for _, n := range c.nodes {
		if n.inc != nil {
			want = append(want, n.inc.m.Self().UID())
		}
	}
	for _, n := range c.nodes {
		if n.inc == nil {
			continue
		}
		s := n.inc.m.Snapshot()
		var up []string
		for _, ms := range s.Members {
			if ms.Status != cluster.StatusUp || !ms.Reachable {
				return false
			}
			up = append(up, ms.UID())
		}
		slices.Sort(up)
		w := slices.Clone(want)
		slices.Sort(w)
		if !slices.Equal(up, w) {
			return false
		}
	}
	return true
}

// logf is the trace of a machine's log record.
func (c *Cluster) logRecord(node string, l cluster.Log) {
	if c.cfg.Trace == nil || l.Level < slog.LevelInfo {
		return
	}
	c.tracef("%s %s", node, l.String())
}

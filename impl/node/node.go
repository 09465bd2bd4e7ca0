// Package node assembles the reference node: cluster membership, the
// singleton manager and proxy (the ID generator service), the journal
// client, the injectable clock, the event log and the packet filter, served
// over the node protocol (docs/protocol.md). When the node is downed it
// stops everything at once and, by default, comes back as a new incarnation.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/impl/singleton"
)

// What a node does once it has been downed.
const (
	// OnDownedRestart comes back as a new incarnation after RestartDelay.
	OnDownedRestart = "restart"
	// OnDownedExit ends Run with ErrDowned (the process exits; a supervisor
	// such as Docker's restart policy brings it back).
	OnDownedExit = "exit"
	// OnDownedStay stays down, still answering status and events.
	OnDownedStay = "stay"
)

// Deliberate bugs the reference node can switch on, so the harness's
// checkers can be shown to catch them. Never on by default.
const (
	// BugAutoDown downs unreachable members after a timeout: split brain.
	BugAutoDown = "auto-down"
	// BugSingletonNoFencing lets the ID generator write without a fencing
	// epoch and trust its cached counter: duplicate ids after a split.
	BugSingletonNoFencing = "singleton-no-fencing"
	// BugEntitySkipReplay starts persistent entities without replaying
	// their events: they serve stale (empty) state.
	BugEntitySkipReplay = "entity-skip-replay"
	// BugBlindToOneWay makes the membership ignore what heartbeats carry
	// besides liveness (the sender's observations, down notices): a member
	// whose own packets are lost never learns that the others find it
	// unreachable or downed it, and keeps its singletons after they take
	// over.
	BugBlindToOneWay = "blind-to-one-way"
)

// KnownBugs lists the deliberate bugs, for flags and the capabilities
// endpoint.
func KnownBugs() []string {
	return append([]string{BugAutoDown, BugSingletonNoFencing, BugEntitySkipReplay, BugBlindToOneWay}, sharding.BugNames()...)
}

// IDGeneratorName is the test singleton's name.
const IDGeneratorName = "id-generator"

// ErrDowned is returned by Run with OnDownedExit.
var ErrDowned = errors.New("node: this member was downed")

// Config configures a node.
type Config struct {
	Name  string
	Roles []string
	// HTTPListen is the node protocol's listen address (host:port; port 0
	// picks one). HTTPAdvertise is what other nodes use (default: the
	// listen address as bound).
	HTTPListen    string
	HTTPAdvertise string
	// GossipBind (an IP) and GossipPort (0 picks one) for memberlist;
	// GossipAdvertise overrides the advertised IP.
	GossipBind      string
	GossipPort      int
	GossipAdvertise string
	Seeds           []string
	// Journal is the journal to use; if nil, JournalURL is dialled.
	Journal    journal.Journal
	JournalURL string

	Downing           cluster.DowningConfig
	HeartbeatInterval time.Duration
	FailureTimeout    time.Duration
	RejoinInterval    time.Duration
	SeedTimeout       time.Duration

	SingletonRole      string
	RetryInterval      time.Duration
	MaxHandOverRetries int
	MaxTakeOverRetries int
	DownRemovalMargin  time.Duration
	ProxyBufferSize    int
	// Sharding (see sharding.Settings; zero values take its defaults).
	// ShardingRole: only members with it host shards. ProxyOnly: this
	// member hosts nothing and delegates everything.
	ShardingRole             string
	ProxyOnly                bool
	NumberOfShards           int
	ShardBufferSize          int
	HandOffTimeout           time.Duration
	RebalanceInterval        time.Duration
	RebalanceThreshold       int
	MaxSimultaneousRebalance int
	PassivateIdleAfter       time.Duration
	ShardRetryInterval       time.Duration
	// RedeliverInterval: at-least-once senders retry unconfirmed messages
	// this often (default 1s).
	RedeliverInterval time.Duration

	// PeerPort is the port of the peer listener on GossipBind (0: any);
	// ClusterSecret, if set, is required of every node-to-node request.
	PeerPort      int
	ClusterSecret string
	// Slots bound the connections of the public port, PeerSlots those of
	// the peer port (kit.Slots; zero fields: the kit's defaults). The
	// peer port keeps PeerSlots.Reserved (default peerReservedSlots) for
	// current members' addresses: a stranger's flood leaves members room.
	Slots     kit.Slots
	PeerSlots kit.Slots

	// RequestTimeout bounds a client request inside the node (default 10s).
	RequestTimeout time.Duration
	LeaveTimeout   time.Duration

	OnDowned     string
	RestartDelay time.Duration
	Bugs         []string
	// WithoutCapabilities hides these capabilities (docs/protocol.md):
	// they are not declared and their endpoints answer 404, so the node
	// stands for a partial implementation of the protocol.
	WithoutCapabilities []string

	// Clock is the node's clock (default: real time, adjustable).
	Clock  *clock.Adjustable
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.OnDowned == "" {
		c.OnDowned = OnDownedRestart
	}
	if c.RestartDelay <= 0 {
		c.RestartDelay = time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.LeaveTimeout <= 0 {
		c.LeaveTimeout = 30 * time.Second
	}
	if c.GossipBind == "" {
		c.GossipBind = "127.0.0.1"
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
	if slices.Contains(c.Bugs, BugAutoDown) {
		c.Downing.Strategy = cluster.AutoDown
		c.Downing.AllowUnsafeAutoDown = true
		if c.Downing.AutoDownAfter <= 0 {
			c.Downing.AutoDownAfter = c.Downing.StableAfter
		}
	}
}

func (c *Config) validate() error {
	switch c.OnDowned {
	case OnDownedRestart, OnDownedExit, OnDownedStay:
	default:
		return fmt.Errorf("node: on-downed %q: want %s, %s or %s", c.OnDowned, OnDownedRestart, OnDownedExit, OnDownedStay)
	}
	for _, c := range c.WithoutCapabilities {
		if !slices.Contains(ReferenceCapabilities(), c) {
			return fmt.Errorf("node: without capability %q: not one of %s", c, strings.Join(ReferenceCapabilities(), ", "))
		}
	}
	for _, b := range c.Bugs {
		if !slices.Contains(KnownBugs(), b) {
			return fmt.Errorf("node: unknown deliberate bug %q (known: %s)", b, strings.Join(KnownBugs(), ", "))
		}
	}
	if c.Downing.Strategy == cluster.AutoDown && !slices.Contains(c.Bugs, BugAutoDown) {
		return fmt.Errorf("node: downing strategy auto-down causes split brain; it is a deliberate bug: enable it with --bugs %s", BugAutoDown)
	}
	if c.Journal == nil && c.JournalURL == "" {
		return errors.New("node: a journal address is required")
	}
	if err := c.Downing.Validate(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// Node is one running member process.
type Node struct {
	cfg     Config
	log     *slog.Logger
	events  *kit.EventLog
	filter  *peer.Filter
	journal journal.Journal
	ln      net.Listener
	addr    string
	srv     *http.Server
	proto   *kit.Node
	// The peer listener serves node-to-node requests on the
	// cluster-internal IP (peerAddr, gossiped to the other members),
	// guarded; the public port serves the protocol only.
	peerLn   net.Listener
	peerAddr string
	peerSrv  *http.Server
	// peerStreams serves the streams peerSrv hands over; closed with it.
	peerStreams *peer.StreamServer
	// entityStarts numbers the entity starts of every region of every
	// member incarnation of this process.
	entityStarts sharding.Incarnations

	mu           sync.Mutex
	cur          *incarnation
	incarnations int
	leaving      bool
}

// New validates cfg and binds the HTTP listener, so the address is known
// (and taken) before Run.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.HTTPListen)
	if err != nil {
		return nil, fmt.Errorf("node: listen on %q: %w", cfg.HTTPListen, err)
	}
	n := &Node{
		cfg:    cfg,
		log:    cfg.Logger.With("node", cfg.Name),
		events: kit.NewEventLog(cfg.Clock.Now, 0),
		filter: &peer.Filter{},
		ln:     ln,
		addr:   ln.Addr().String(),
	}
	if cfg.HTTPAdvertise != "" {
		n.addr = cfg.HTTPAdvertise
	}
	n.journal = cfg.Journal
	if n.journal == nil {
		n.journal = journal.NewClient(cfg.JournalURL, journal.ClientOptions{})
	}
	n.proto = n.protocolNode()
	n.srv = kit.NewServer(n.proto.Handler())
	pln, err := net.Listen("tcp", net.JoinHostPort(cfg.GossipBind, strconv.Itoa(cfg.PeerPort)))
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("node: listen for peers on %s port %d: %w", cfg.GossipBind, cfg.PeerPort, err)
	}
	n.peerLn = pln
	host := cfg.GossipAdvertise
	if host == "" {
		host = cfg.GossipBind
	}
	n.peerAddr = net.JoinHostPort(host, strconv.Itoa(pln.Addr().(*net.TCPAddr).Port))
	guard := &peer.Guard{Self: n.memberUID, Member: n.currentMember, Secret: cfg.ClusterSecret}
	// Members send each other requests on streams (peer.StreamPath); the
	// same endpoints answer plain HTTP too. Either way the packet filter
	// comes first (a cut sender's request is never seen), then the guard:
	// at a stream's upgrade (no stranger holds one open) and at every
	// request, on a stream or not (a member may stop being one while its
	// stream is open). The guard names the sender to the handlers, which
	// trust no body's word for it.
	internal := guard.Middleware(http.HandlerFunc(n.handleInternal))
	n.peerStreams = peer.NewStreamServer(n.filter, guard, internal, n.log)
	n.peerSrv = kit.NewServer(n.peerStreams.Handler(n.filter.Middleware(internal)))
	return n, nil
}

// PeerAddr is where other members send node-to-node requests.
func (n *Node) PeerAddr() string { return n.peerAddr }

// memberUID is the current member's uid ("": none yet).
func (n *Node) memberUID() string {
	if inc := n.current(); inc != nil {
		return inc.cluster.Self().UID()
	}
	return ""
}

// currentMember reports whether uid is a current member in this member's
// view, and its gossip IP.
func (n *Node) currentMember(uid string) (string, bool) {
	inc := n.current()
	if inc == nil {
		return "", false
	}
	m, ok := inc.cluster.Find(uid)
	if !ok || m.Status.Final() {
		return "", false
	}
	host, _, err := net.SplitHostPort(m.GossipAddr)
	if err != nil {
		return "", true
	}
	return host, true
}

// peerReservedSlots is how many of the peer port's connections only
// current members' addresses may take: a member holds a stream to each
// other member and a few plain requests, so this is room for a large
// cluster.
const peerReservedSlots = 256

// memberAddr reports whether ip is the cluster address of a current member
// in this member's view (peer connections come from there).
func (n *Node) memberAddr(ip netip.Addr) bool {
	inc := n.current()
	if inc == nil {
		return false
	}
	for _, m := range inc.cluster.Snapshot().Members {
		if ap, err := netip.ParseAddrPort(m.GossipAddr); err == nil && ap.Addr().Unmap() == ip {
			return true
		}
	}
	return false
}

// Addr is the node protocol's address (host:port).
func (n *Node) Addr() string { return n.addr }

// Events is the node's event log.
func (n *Node) Events() *kit.EventLog { return n.events }

// Run serves the node protocol and runs member incarnations until ctx ends,
// the member has left gracefully (nil), or it was downed with OnDownedExit
// (ErrDowned).
func (n *Node) Run(ctx context.Context) error {
	serveErr := make(chan error, 2)
	peerSlots := n.cfg.PeerSlots
	if peerSlots.Reserved == 0 {
		peerSlots.Reserved = peerReservedSlots
	}
	peerSlots.Preferred = n.memberAddr
	go func() { serveErr <- n.cfg.Slots.Serve(n.srv, n.ln) }()
	go func() { serveErr <- peerSlots.Serve(n.peerSrv, n.peerLn) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		n.srv.Shutdown(sctx)
		n.peerSrv.Shutdown(sctx)
		n.peerStreams.Close()
	}()
	defer n.events.Append(protocol.Event{Type: protocol.EventNodeStopped})

	var prev *cluster.Snapshot // the last view of the incarnation downed before
	for first := true; ; first = false {
		inc, err := n.newIncarnation(ctx, prev)
		if err != nil {
			return err
		}
		if first {
			// Logged once the first incarnation exists: every event names
			// the member that logged it (found by shardtest conform).
			n.events.Append(protocol.Event{Type: protocol.EventNodeStarted, Detail: "http " + n.addr})
		}
		outcome, err := inc.run(ctx)
		select {
		case err := <-serveErr:
			return fmt.Errorf("node: http server: %w", err)
		default:
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case outcome == outcomeLeft:
			return nil
		case outcome == outcomeStopped:
			// The member could not run at all (e.g. its gossip port is
			// taken): restarting would fail the same way.
			if err == nil {
				err = errors.New("node: member stopped unexpectedly")
			}
			return err
		}
		// Downed.
		switch n.cfg.OnDowned {
		case OnDownedExit:
			return ErrDowned
		case OnDownedStay:
			<-ctx.Done()
			return nil
		}
		last := inc.cluster.Snapshot()
		prev = &last
		if err := n.cfg.Clock.Sleep(ctx, n.cfg.RestartDelay); err != nil {
			return nil
		}
		n.log.Info("restarting as a new incarnation after being downed")
	}
}

func (n *Node) current() *incarnation {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur
}

// incarnation is one member lifetime of this process: a cluster member
// and everything that runs on it.
type incarnation struct {
	node    *Node
	cluster *cluster.Cluster
	peers   *peer.Client
	manager *singleton.Manager
	proxy   *singleton.Proxy
	types   []*entityType
	tells   *tells
	host    *hostTracker   // the id generator instance running here
	mux     *http.ServeMux // internal node-to-node routes

	// bg is what the incarnation runs on request in the background (a
	// graceful leave, which the admin API only starts), under ctx: run
	// cancels ctx and waits for bg before it returns, so nothing of an
	// incarnation outlives it. ended (under node.mu) refuses more.
	ctx   context.Context
	stop  context.CancelFunc
	bg    sync.WaitGroup
	ended bool
}

// goBackground runs f in the background as part of the incarnation (see
// bg); false if the incarnation is ending. The caller holds node.mu.
func (inc *incarnation) goBackground(f func(ctx context.Context)) bool {
	if inc.ended {
		return false
	}
	inc.bg.Go(func() { f(inc.ctx) })
	return true
}

// stopBackground ends the incarnation's background work and waits for it.
func (inc *incarnation) stopBackground() {
	inc.node.mu.Lock()
	inc.ended = true
	inc.node.mu.Unlock()
	inc.stop()
	inc.bg.Wait()
}

type runOutcome int

const (
	outcomeStopped runOutcome = iota
	outcomeLeft
	outcomeDowned
)

// newIncarnation makes the node's next member, whose background work ends
// with ctx at the latest; prev is the last view of the member downed
// before it (nil for the first).
func (n *Node) newIncarnation(ctx context.Context, prev *cluster.Snapshot) (*incarnation, error) {
	cfg := n.cfg
	n.mu.Lock()
	restarted := n.incarnations > 0
	n.mu.Unlock()
	cl, err := cluster.New(cluster.Config{
		Name:              cfg.Name,
		Roles:             cfg.Roles,
		BindAddr:          cfg.GossipBind,
		BindPort:          cfg.GossipPort,
		AdvertiseAddr:     cfg.GossipAdvertise,
		HTTPAddr:          n.addr,
		PeerAddr:          n.peerAddr,
		Seeds:             cfg.Seeds,
		Journal:           n.journal,
		Downing:           cfg.Downing,
		HeartbeatInterval: cfg.HeartbeatInterval,
		FailureTimeout:    cfg.FailureTimeout,
		RejoinInterval:    cfg.RejoinInterval,
		SeedTimeout:       cfg.SeedTimeout,
		// After being downed, rejoin the cluster that downed this member;
		// never start an island of its own (found by the singleton-events
		// checker: a first seed cut off by a partition came back as a
		// one-node cluster with its own singletons).
		JoinOnly:      restarted,
		Previous:      prev,
		DownNoticeFor: 2*cfg.DownRemovalMargin + cfg.FailureTimeout,
		BlindToOneWay: slices.Contains(cfg.Bugs, BugBlindToOneWay),
		Clock:         cfg.Clock,
		Events:        n.events,
		Logger:        n.log,
		Filter:        n.filter,
	})
	if err != nil {
		return nil, err
	}
	inc := &incarnation{node: n, cluster: cl, mux: http.NewServeMux(), host: &hostTracker{}}
	inc.ctx, inc.stop = context.WithCancel(ctx)
	n.events.SetIncarnation(cl.Self().Incarnation)
	n.mu.Lock()
	n.cur = inc
	n.incarnations++
	n.leaving = false
	n.mu.Unlock()
	return inc, nil
}

// setupSingleton builds the manager and proxy once the gossip address is
// known (the peer client names this member by it).
func (inc *incarnation) setupSingleton() error {
	n := inc.node
	cfg := n.cfg
	self := inc.cluster.Self()
	inc.peers = peer.NewClient(peer.Self{UID: self.UID(), GossipAddr: self.GossipAddr, Secret: cfg.ClusterSecret}, n.filter)
	factory := decorate(singleton.IDGeneratorWith(n.journal, "singleton/"+IDGeneratorName,
		singleton.IDGeneratorOptions{NoFencing: slices.Contains(cfg.Bugs, BugSingletonNoFencing)}), self, inc.host)
	mgr, err := singleton.NewManager(singleton.Config{
		Name:               IDGeneratorName,
		Role:               cfg.SingletonRole,
		RetryInterval:      cfg.RetryInterval,
		MaxHandOverRetries: cfg.MaxHandOverRetries,
		MaxTakeOverRetries: cfg.MaxTakeOverRetries,
		DownRemovalMargin:  cfg.DownRemovalMargin,
	}, singleton.Deps{
		Membership: inc.cluster,
		Peers:      inc.peers,
		Clock:      cfg.Clock,
		Events:     n.events,
		Logger:     n.log,
		Factory:    factory,
	})
	if err != nil {
		return err
	}
	proxy, err := singleton.NewProxy(singleton.ProxyConfig{
		Name:       IDGeneratorName,
		Role:       cfg.SingletonRole,
		BufferSize: cfg.ProxyBufferSize,
	}, singleton.ProxyDeps{
		Membership: inc.cluster,
		Peers:      inc.peers,
		Clock:      cfg.Clock,
		Events:     n.events,
		Logger:     n.log,
		Local:      mgr,
	})
	if err != nil {
		return err
	}
	mgr.Routes(inc.mux)
	n.mu.Lock()
	inc.manager, inc.proxy = mgr, proxy
	n.mu.Unlock()
	return nil
}

// run runs the incarnation until ctx ends, it has left, or it was downed.
// When downed, the singleton is stopped before run returns.
func (inc *incarnation) run(ctx context.Context) (runOutcome, error) {
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer inc.stopBackground()
	clusterDone := make(chan error, 1)
	go func() { clusterDone <- inc.cluster.Run(ictx) }()

	// The manager needs the gossip address, known once the cluster has
	// bound its transport; the cluster is not joined (nor is anything run
	// here) before then.
	select {
	case <-inc.cluster.Bound():
	case err := <-clusterDone:
		return outcomeStopped, err
	}
	if err := inc.setupSingleton(); err != nil {
		cancel()
		<-clusterDone
		return outcomeStopped, err
	}
	if err := inc.setupSharding(); err != nil {
		cancel()
		<-clusterDone
		return outcomeStopped, err
	}
	tl := newTells(ictx, inc.node.cfg.RequestTimeout, inc.node.log)
	inc.node.mu.Lock()
	inc.tells = tl
	inc.node.mu.Unlock()
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- inc.manager.Run(ictx) }()
	shardingDone := inc.runSharding(ictx)

	outcome := outcomeStopped
	var runErr error
	select {
	case <-ctx.Done():
	case <-inc.cluster.Downed():
		outcome = outcomeDowned
	case <-inc.cluster.Left():
		outcome = outcomeLeft
	case runErr = <-clusterDone:
		clusterDone <- runErr
		select {
		case <-inc.cluster.Downed():
			outcome = outcomeDowned
		case <-inc.cluster.Left():
			outcome = outcomeLeft
		default:
		}
	}
	// Stop the singletons and every entity first (at once if downed), then
	// the cluster. A leave still under way ends first: it would hand off
	// to, and wait for, what is stopping.
	cancel()
	inc.stopBackground()
	tl.wait()
	<-mgrDone
	<-shardingDone
	<-clusterDone
	inc.peers.Close()
	return outcome, runErr
}

// leave hands over and leaves gracefully. It runs in the background (the
// incarnation's, until ctx ends) after the admin API accepted the request.
// Shards are handed off first, while this member is still Up (so the
// coordinator, possibly here, is stable); then the member becomes Leaving
// and its singletons, coordinators included, hand over.
func (inc *incarnation) leave(ctx context.Context) {
	n := inc.node
	n.events.Append(protocol.Event{Type: protocol.EventLeaveStarted})
	lctx, cancel := context.WithTimeout(ctx, n.cfg.LeaveTimeout)
	defer cancel()
	n.mu.Lock()
	types := inc.types
	mgrs := []*singleton.Manager{inc.manager}
	for _, t := range types {
		mgrs = append(mgrs, t.coord)
	}
	n.mu.Unlock()
	for _, t := range types {
		if err := t.region.Leave(lctx); err != nil {
			n.log.Warn("shards not all handed off before leaving", "type", t.name, "err", err)
		}
	}
	if err := inc.cluster.BeginLeave(); err != nil {
		n.log.Warn("leave refused", "err", err)
		return
	}
	for _, mgr := range mgrs {
		if mgr == nil {
			continue
		}
		select {
		case <-mgr.HandedOver():
		case <-lctx.Done():
			n.log.Warn("hand-over did not finish before the leave timeout; leaving anyway", "singleton", mgr.Name())
		case <-inc.cluster.Downed():
			return
		}
	}
	if err := inc.cluster.FinishLeave(lctx); err != nil {
		n.log.Warn("finish leave", "err", err)
	}
}

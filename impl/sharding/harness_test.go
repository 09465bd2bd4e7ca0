package sharding

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/cluster/clustertest"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/persistence"
	"github.com/shardtest/shardtest/impl/singleton"
)

// ---- polling and fake membership (impl/cluster/clustertest) ----

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	clustertest.Eventually(t, timeout, cond, format, args...)
}

type fakeMembership = clustertest.Membership

func newFakeMembership() *fakeMembership { return clustertest.NewMembership() }

// ---- test entity ----

type handled struct {
	Inc    string
	Node   string
	Sender string
	Seq    int
}

// entityLog records what every test entity handled, cluster-wide.
type entityLog struct {
	mu      sync.Mutex
	byID    map[string][]handled
	stopped map[string]bool // incarnations stopped
	// startCtx is the context each entity's last factory call got.
	startCtx map[string]context.Context
	// gates hold op "block" messages, by their seq, until closed.
	gates map[int]chan struct{}
}

func newEntityLog() *entityLog {
	return &entityLog{byID: map[string][]handled{}, stopped: map[string]bool{}, startCtx: map[string]context.Context{}, gates: map[int]chan struct{}{}}
}

// gate is the gate of seq's "block" message.
func (l *entityLog) gate(seq int) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gates[seq]
	if g == nil {
		g = make(chan struct{})
		l.gates[seq] = g
	}
	return g
}

func (l *entityLog) of(id string) []handled {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.byID[id])
}

type payload struct {
	Seq int `json:"seq"`
}

type testEntity struct {
	ec        EntityContext
	log       *entityLog
	stopDelay time.Duration
	// gate, if set, holds Stop until it is closed (or ctx ends).
	gate <-chan struct{}
	n    int
}

func (e *testEntity) Handle(ctx context.Context, msg Message) (json.RawMessage, error) {
	var p payload
	if len(msg.Payload) > 0 {
		if err := json.Unmarshal(msg.Payload, &p); err != nil {
			return nil, err
		}
	}
	e.n++
	e.log.mu.Lock()
	if e.log.stopped[e.ec.Incarnation] {
		e.log.mu.Unlock()
		return nil, fmt.Errorf("incarnation %s handled a message after Stop", e.ec.Incarnation)
	}
	e.log.byID[msg.EntityID] = append(e.log.byID[msg.EntityID], handled{Inc: e.ec.Incarnation, Node: e.ec.Node, Sender: msg.Sender, Seq: p.Seq})
	e.log.mu.Unlock()
	switch msg.Op {
	case "passivate":
		e.ec.Passivate()
	case "fail":
		return nil, fmt.Errorf("asked to fail")
	case "stale":
		return nil, fmt.Errorf("asked to be stale: %w", ErrEntityFailed)
	case "sleep":
		if err := clock.Real().Sleep(ctx, 2*time.Second); err != nil {
			return nil, err
		}
	case "block":
		select {
		case <-e.log.gate(p.Seq):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return json.Marshal(map[string]any{"n": e.n, "seq": p.Seq})
}

func (e *testEntity) Stop(ctx context.Context) error {
	if e.stopDelay > 0 {
		_ = clock.Real().Sleep(ctx, e.stopDelay)
	}
	if e.gate != nil {
		select {
		case <-e.gate:
		case <-ctx.Done():
		}
	}
	e.log.mu.Lock()
	e.log.stopped[e.ec.Incarnation] = true
	e.log.mu.Unlock()
	return nil
}

// ---- test cluster ----

type snode struct {
	name   string
	member cluster.Member
	mem    *fakeMembership
	ev     *kit.EventLog
	mux    *http.ServeMux
	srv    *httptest.Server
	filter *peer.Filter
	peers  *peer.Client
	mgr    *singleton.Manager
	proxy  *singleton.Proxy
	region *Region
	// stale makes Deps.Fresh report false (a member just thawed).
	stale   atomic.Bool
	cancel  context.CancelFunc
	runDone chan struct{}
}

func (n *snode) uid() string { return n.member.UID() }

type scluster struct {
	t        *testing.T
	clock    clock.Clock
	journal  journal.Journal
	settings Settings
	entities *entityLog
	nodes    []*snode
	byNm     map[string]*snode
	// proxyOnly nodes get no entity factory.
	proxyOnly map[string]bool
	stopDelay time.Duration
	// stopGate, if set, holds every entity's Stop until it is closed.
	stopGate chan struct{}
}

// testSettings are fast settings; rebalancing is off unless a test
// shortens RebalanceInterval.
func testSettings() Settings {
	return Settings{
		TypeName:          "counter",
		NumberOfShards:    12,
		BufferSize:        1000,
		HandOffTimeout:    3 * time.Second,
		RebalanceInterval: time.Hour,
		RetryInterval:     20 * time.Millisecond,
		DownRemovalMargin: 200 * time.Millisecond,
	}
}

func singletonConfig(s Settings) singleton.Config {
	return singleton.Config{
		Name:               CoordinatorName(s.TypeName),
		Role:               s.Role,
		RetryInterval:      20 * time.Millisecond,
		MaxHandOverRetries: 15,
		MaxTakeOverRetries: 10,
		DownRemovalMargin:  100 * time.Millisecond,
		StopTimeout:        3 * time.Second,
	}
}

// newShardCluster builds nodes n1..nN (n1 oldest), sharing one journal
// (the real bbolt store), each behind its own HTTP server with a
// coordinator manager, a coordinator proxy and a region. Nothing runs and
// views are empty until the test sets them (setAll) and starts nodes.
func newShardCluster(t *testing.T, n int, s Settings, proxyOnly ...string) *scluster {
	t.Helper()
	store, err := persistence.Open(filepath.Join(t.TempDir(), "j.db"), persistence.StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	c := &scluster{t: t, clock: clock.Real(), journal: store, settings: s, entities: newEntityLog(),
		byNm: map[string]*snode{}, proxyOnly: map[string]bool{}}
	for _, p := range proxyOnly {
		c.proxyOnly[p] = true
	}
	for i := 1; i <= n; i++ {
		c.addNode(fmt.Sprintf("n%d", i), int64(i))
	}
	return c
}

func (c *scluster) addNode(name string, upNumber int64) *snode {
	t := c.t
	nd := &snode{name: name, mem: newFakeMembership(), ev: kit.NewEventLog(c.clock.Now, 0), mux: http.NewServeMux(), filter: &peer.Filter{}}
	// No guard here: the sender names itself (peer.NameSender).
	h := peer.NameSender(nd.mux)
	streams := peer.NewStreamServer(nd.filter, nil, h, nil)
	nd.srv = httptest.NewServer(streams.Handler(nd.filter.Middleware(h)))
	t.Cleanup(nd.srv.Close)
	t.Cleanup(streams.Close) // first: the server waits for no stream
	nd.member = cluster.Member{
		Name: name, Incarnation: "i1", UpNumber: upNumber,
		GossipAddr: "gossip-" + name, HTTPAddr: strings.TrimPrefix(nd.srv.URL, "http://"), PeerAddr: strings.TrimPrefix(nd.srv.URL, "http://"),
	}
	nd.ev.SetIncarnation("i1")
	nd.peers = peer.NewClient(peer.Self{UID: nd.member.UID(), GossipAddr: nd.member.GossipAddr}, nd.filter)
	t.Cleanup(nd.peers.Close)
	// The region reads Self at construction.
	nd.mem.Set(cluster.Snapshot{Self: cluster.MemberState{Member: nd.member, Status: cluster.StatusJoining, Reachable: true}})
	logger := testLogger(t, name)
	d := Deps{Membership: nd.mem, Peers: nd.peers, Clock: c.clock, Events: nd.ev, Logger: logger, Journal: c.journal,
		Fresh: func() bool { return !nd.stale.Load() }}
	mgr, err := singleton.NewManager(singletonConfig(c.settings), singleton.Deps{
		Membership: nd.mem, Peers: nd.peers, Clock: c.clock, Events: nd.ev, Logger: logger,
		Factory: CoordinatorFactory(c.settings, d, nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := singleton.NewProxy(singleton.ProxyConfig{Name: CoordinatorName(c.settings.TypeName), Role: c.settings.Role},
		singleton.ProxyDeps{Membership: nd.mem, Peers: nd.peers, Clock: c.clock, Events: nd.ev, Logger: logger, Local: mgr})
	if err != nil {
		t.Fatal(err)
	}
	if !c.proxyOnly[name] {
		// stopDelay and stopGate are read at entity start: set them
		// before starting nodes.
		d.Factory = func(ctx context.Context, ec EntityContext) (Entity, error) {
			c.entities.mu.Lock()
			c.entities.startCtx[ec.EntityID] = ctx
			c.entities.mu.Unlock()
			return &testEntity{ec: ec, log: c.entities, stopDelay: c.stopDelay, gate: c.stopGate}, nil
		}
	}
	region, err := NewRegion(c.settings, d, proxy)
	if err != nil {
		t.Fatal(err)
	}
	mgr.Routes(nd.mux)
	region.Routes(nd.mux)
	nd.mgr, nd.proxy, nd.region = mgr, proxy, region
	c.nodes = append(c.nodes, nd)
	c.byNm[name] = nd
	return nd
}

func (c *scluster) node(name string) *snode { return c.byNm[name] }

func (c *scluster) start(names ...string) {
	for _, n := range names {
		c.startNode(c.byNm[n])
	}
}

func (c *scluster) startNode(nd *snode) {
	ctx, cancel := context.WithCancel(context.Background())
	nd.cancel = cancel
	nd.runDone = make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = nd.mgr.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		_ = nd.region.Run(ctx)
	}()
	go func() {
		wg.Wait()
		close(nd.runDone)
	}()
	c.t.Cleanup(func() { c.stopNode(nd) })
}

// stopNode stops the node's manager and region (as a downed node does).
func (c *scluster) stopNode(nd *snode) {
	if nd.cancel == nil {
		return
	}
	nd.cancel()
	select {
	case <-nd.runDone:
	case <-time.After(10 * time.Second):
		c.t.Errorf("%s: did not stop", nd.name)
	}
	nd.cancel = nil
}

// view maps node names to statuses; missing nodes are unknown.
type view map[string]cluster.Status

func allUp(names ...string) view {
	v := view{}
	for _, n := range names {
		v[n] = cluster.StatusUp
	}
	return v
}

func (v view) with(name string, s cluster.Status) view {
	out := view{}
	for k, x := range v {
		out[k] = x
	}
	out[name] = s
	return out
}

// snapshotFor builds node of's snapshot of v; unreachable members are
// marked so.
func (c *scluster) snapshotFor(of string, v view, unreachable ...string) cluster.Snapshot {
	var s cluster.Snapshot
	self := c.byNm[of]
	s.Self = cluster.MemberState{Member: self.member, Status: cluster.StatusJoining, Reachable: true}
	if st, ok := v[of]; ok {
		s.Self.Status = st
	}
	for _, nd := range c.nodes { // oldest first
		st, ok := v[nd.name]
		if !ok {
			continue
		}
		ms := cluster.MemberState{Member: nd.member, Status: st, Reachable: !slices.Contains(unreachable, nd.name)}
		if st.Final() {
			s.Gone = append(s.Gone, ms)
		} else {
			s.Members = append(s.Members, ms)
		}
	}
	return s
}

func (c *scluster) setView(of string, v view, unreachable ...string) {
	c.byNm[of].mem.Set(c.snapshotFor(of, v, unreachable...))
}

func (c *scluster) setAll(v view, unreachable ...string) {
	for _, nd := range c.nodes {
		c.setView(nd.name, v, unreachable...)
	}
}

// deliver sends one message through node's region.
func (c *scluster) deliver(node, entityID, sender string, seq int) (Reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.byNm[node].region.Deliver(ctx, Message{EntityID: entityID, Op: "count", Sender: sender, Payload: mustJSON(c.t, payload{Seq: seq})})
}

// coordState asks the coordinator (through node's proxy) for its state.
func (c *scluster) coordState(node string) (CoordinatorState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.byNm[node].proxy.Call(ctx, singleton.Request{Op: OpState})
	if err != nil {
		return CoordinatorState{}, err
	}
	var st CoordinatorState
	err = json.Unmarshal(res, &st)
	return st, err
}

// homes maps every allocated shard to its region, from the coordinator.
func (st CoordinatorState) homes() map[string]string {
	out := map[string]string{}
	for r, shs := range st.Regions {
		for _, sh := range shs {
			out[sh] = r
		}
	}
	return out
}

// runningCluster is newShardCluster(t, 2, s) with both nodes up in every
// view, started, and registered with the coordinator (at n1).
func runningCluster(t *testing.T, s Settings) *scluster {
	t.Helper()
	c := newShardCluster(t, 2, s)
	c.setAll(allUp("n1", "n2"))
	c.start("n1", "n2")
	c.awaitRegistered("n1", "n2")
	return c
}

// entityAt finds an entity (id prefix, a number) whose shard lives at the
// region of node at, sending its first message (sender "s", seq 1)
// through node via; it returns the id and that reply.
func (c *scluster) entityAt(via, at, prefix string) (string, Reply) {
	c.t.Helper()
	for i := 0; ; i++ {
		id := fmt.Sprintf("%s%d", prefix, i)
		rep, err := c.deliver(via, id, "s", 1)
		if err != nil {
			c.t.Fatal(err)
		}
		if rep.Node == c.node(at).uid() {
			return id, rep
		}
	}
}

// awaitTerminated waits until the coordinator, asked through via, no
// longer lists gone's region (its termination was written).
func (c *scluster) awaitTerminated(via string, gone *snode) {
	c.t.Helper()
	eventually(c.t, 10*time.Second, func() bool {
		st, err := c.coordState(via)
		_, still := st.Regions[gone.uid()]
		return err == nil && !still
	}, "%s terminated after its graceful shutdown", gone.name)
}

func (c *scluster) awaitRegistered(names ...string) {
	c.t.Helper()
	for _, n := range names {
		eventually(c.t, 10*time.Second, func() bool { return c.byNm[n].region.Status().Registered }, "%s registered", n)
	}
}

func eventsOf(l *kit.EventLog, typ string) []protocol.Event {
	all, _ := l.Since(0, 0)
	var out []protocol.Event
	for _, e := range all {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// testLogger logs to t only with -v.
func testLogger(t *testing.T, node string) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", node)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // logging after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

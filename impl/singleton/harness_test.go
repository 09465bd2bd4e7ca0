package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/cluster/clustertest"
	"github.com/shardtest/shardtest/impl/peer"
)

// ---- polling and fake membership (impl/cluster/clustertest) ----

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	clustertest.Eventually(t, timeout, cond, format, args...)
}

type fakeMembership = clustertest.Membership

func newFakeMembership() *fakeMembership { return clustertest.NewMembership() }

// ---- fake journal ----

type fakeJournal struct {
	mu     sync.Mutex
	events map[string][]journal.Event
	epochs map[string]uint64
	global uint64
	// unavailable: every call fails with ErrUnavailable; with
	// applyAnyway, appends are written all the same (a lost answer).
	unavailable bool
	applyAnyway bool
}

func newFakeJournal() *fakeJournal {
	return &fakeJournal{events: map[string][]journal.Event{}, epochs: map[string]uint64{}}
}

func (j *fakeJournal) setUnavailable(on, applyAnyway bool) {
	j.mu.Lock()
	j.unavailable, j.applyAnyway = on, applyAnyway
	j.mu.Unlock()
}

func (j *fakeJournal) Append(ctx context.Context, pid string, expectedSeq int64, epoch uint64, data [][]byte) (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", journal.ErrUnavailable, err)
	}
	if j.unavailable && !j.applyAnyway {
		return 0, fmt.Errorf("%w: switched off", journal.ErrUnavailable)
	}
	if pid == "" || len(data) == 0 {
		return 0, journal.ErrInvalid
	}
	if epoch != journal.NoEpoch && epoch < j.epochs[pid] {
		return 0, journal.ErrFenced
	}
	evs := j.events[pid]
	if expectedSeq != journal.AnySeq && expectedSeq != int64(len(evs)) {
		return 0, fmt.Errorf("%w: expected %d, have %d", journal.ErrSeqConflict, expectedSeq, len(evs))
	}
	for _, d := range data {
		j.global++
		evs = append(evs, journal.Event{PersistenceID: pid, Seq: int64(len(evs)) + 1, Global: j.global, Epoch: epoch, Data: d})
	}
	j.events[pid] = evs
	if j.unavailable {
		return 0, fmt.Errorf("%w: answer lost", journal.ErrUnavailable)
	}
	return int64(len(evs)), nil
}

func (j *fakeJournal) Replay(ctx context.Context, pid string, from int64, max int) ([]journal.Event, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.unavailable {
		return nil, journal.ErrUnavailable
	}
	var out []journal.Event
	for _, e := range j.events[pid] {
		if e.Seq >= from && (max <= 0 || len(out) < max) {
			out = append(out, e)
		}
	}
	return out, nil
}

func (j *fakeJournal) Fence(ctx context.Context, pid string) (uint64, int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.unavailable {
		return 0, 0, journal.ErrUnavailable
	}
	j.epochs[pid]++
	return j.epochs[pid], int64(len(j.events[pid])), nil
}

func (j *fakeJournal) Highest(ctx context.Context, pid string) (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.unavailable {
		return 0, journal.ErrUnavailable
	}
	return int64(len(j.events[pid])), nil
}

var _ journal.Journal = (*fakeJournal)(nil)

// ---- test instance ----

// recorder sees every test instance start and stop, in one global order.
type recorder struct {
	mu       sync.Mutex
	seq      int
	alive    map[string]bool
	overlaps []string
	log      []recEntry
	insts    map[string]*testInst // the latest instance of each node
	gate     chan struct{}        // op "block" waits for it to close
}

type recEntry struct {
	seq  int
	node string
	kind string // "start" | "stop"
	at   time.Time
}

func newRecorder() *recorder {
	return &recorder{alive: map[string]bool{}, insts: map[string]*testInst{}, gate: make(chan struct{})}
}

// handled returns the ops node's latest instance has handled.
func (r *recorder) handled(node string) []string {
	r.mu.Lock()
	ti := r.insts[node]
	r.mu.Unlock()
	if ti == nil {
		return nil
	}
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return append([]string(nil), ti.handled...)
}

func (r *recorder) note(node, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	if kind == "start" {
		if len(r.alive) > 0 {
			r.overlaps = append(r.overlaps, fmt.Sprintf("%s started while %v alive", node, r.alive))
		}
		r.alive[node] = true
	} else {
		delete(r.alive, node)
	}
	r.log = append(r.log, recEntry{seq: r.seq, node: node, kind: kind, at: time.Now()})
}

func (r *recorder) entries() []recEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recEntry(nil), r.log...)
}

func (r *recorder) overlapErrors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.overlaps...)
}

// count returns how many times node did kind.
func (r *recorder) count(node, kind string) int {
	n := 0
	for _, e := range r.entries() {
		if e.node == node && e.kind == kind {
			n++
		}
	}
	return n
}

// newInst records the start of a new instance of node.
func (r *recorder) newInst(node string, stopDelay time.Duration, stopBlock chan struct{}) *testInst {
	ti := &testInst{rec: r, node: node, stopDelay: stopDelay, stopBlock: stopBlock, gate: r.gate}
	r.note(node, "start")
	r.mu.Lock()
	r.insts[node] = ti
	r.mu.Unlock()
	return ti
}

type testInst struct {
	gate      <-chan struct{}
	rec       *recorder
	node      string
	stopDelay time.Duration
	stopBlock chan struct{} // if set, Stop waits for it (or ctx)
	mu        sync.Mutex
	handled   []string
}

// factory returns a Factory of test instances that report to rec.
func (r *recorder) factory(node string, stopDelay time.Duration) Factory {
	return func(ctx context.Context) (Instance, error) {
		return r.newInst(node, stopDelay, nil), nil
	}
}

func (ti *testInst) Handle(ctx context.Context, req Request) (json.RawMessage, error) {
	ti.mu.Lock()
	ti.handled = append(ti.handled, req.Op)
	n := len(ti.handled)
	ti.mu.Unlock()
	switch req.Op {
	case "echo":
		return json.Marshal(map[string]any{"node": ti.node, "payload": req.Payload, "n": n})
	case "sleep":
		var ms int
		_ = json.Unmarshal(req.Payload, &ms)
		if err := clock.Real().Sleep(ctx, time.Duration(ms)*time.Millisecond); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		return json.Marshal(map[string]any{"node": ti.node, "slept": ms, "n": n})
	case "block":
		select {
		case <-ti.gate:
			return json.Marshal(map[string]any{"node": ti.node, "n": n})
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrUnknownOutcome, ctx.Err())
		}
	case "fail":
		return nil, fmt.Errorf("%w: asked to fail", ErrInstanceFailed)
	case "fenced":
		return nil, fmt.Errorf("append: %w", journal.ErrFenced)
	case "panic":
		panic("asked to panic")
	case "bad-json":
		return json.RawMessage("{not json"), nil
	}
	return nil, fmt.Errorf("%w: unknown op %q", ErrBadRequest, req.Op)
}

func (ti *testInst) Stop(ctx context.Context) error {
	if ti.stopBlock != nil {
		select {
		case <-ti.stopBlock:
		case <-ctx.Done():
		}
	}
	if ti.stopDelay > 0 {
		_ = clock.Real().Sleep(context.Background(), ti.stopDelay)
	}
	ti.rec.note(ti.node, "stop")
	return nil
}

// ---- test cluster ----

type tnode struct {
	name    string
	member  cluster.Member
	mem     *fakeMembership
	ev      *kit.EventLog
	mgr     *Manager
	mux     *http.ServeMux
	srv     *httptest.Server
	filter  *peer.Filter
	peers   *peer.Client
	cancel  context.CancelFunc
	runDone chan error
}

func (n *tnode) uid() string { return n.member.UID() }

type tcluster struct {
	t     *testing.T
	clock clock.Clock
	nodes []*tnode
	byNm  map[string]*tnode
}

// testConfig returns a fast manager config.
func testConfig() Config {
	return Config{
		Name:               "test-singleton",
		RetryInterval:      20 * time.Millisecond,
		MaxHandOverRetries: 15,
		MaxTakeOverRetries: 10,
		DownRemovalMargin:  150 * time.Millisecond,
		StopTimeout:        3 * time.Second,
	}
}

// newCluster builds nodes n1..nN (n1 oldest) with managers made by cfg and
// factory(node), each behind its own HTTP server. Managers are not running
// and views are empty until the test sets them.
func newCluster(t *testing.T, n int, cfg Config, factory func(node string) Factory) *tcluster {
	t.Helper()
	c := &tcluster{t: t, clock: clock.Real(), byNm: map[string]*tnode{}}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("n%d", i)
		nd := &tnode{name: name, mem: newFakeMembership(), ev: kit.NewEventLog(c.clock.Now, 0), mux: http.NewServeMux(), filter: &peer.Filter{}}
		// The filter cuts only what a node sends here (as before
		// streams: its server has no filter), so a test can cut one
		// way.
		// No guard here: the sender names itself (peer.NameSender).
		h := peer.NameSender(nd.mux)
		streams := peer.NewStreamServer(nil, nil, h, nil)
		nd.srv = httptest.NewServer(streams.Handler(h))
		t.Cleanup(nd.srv.Close)
		t.Cleanup(streams.Close) // first: the server waits for no stream
		nd.member = cluster.Member{
			Name: name, Incarnation: "i1", UpNumber: int64(i),
			GossipAddr: "gossip-" + name, HTTPAddr: strings.TrimPrefix(nd.srv.URL, "http://"), PeerAddr: strings.TrimPrefix(nd.srv.URL, "http://"),
			Roles: []string{"worker"},
		}
		nd.ev.SetIncarnation("i1")
		nd.peers = peer.NewClient(peer.Self{UID: nd.member.UID(), GossipAddr: nd.member.GossipAddr}, nd.filter)
		t.Cleanup(nd.peers.Close)
		mgr, err := NewManager(cfg, Deps{
			Membership: nd.mem, Peers: nd.peers, Clock: c.clock, Events: nd.ev,
			Logger: testLogger(t, name), Factory: factory(name),
		})
		if err != nil {
			t.Fatalf("NewManager: %v", err)
		}
		nd.mgr = mgr
		mgr.Routes(nd.mux)
		c.nodes = append(c.nodes, nd)
		c.byNm[name] = nd
	}
	return c
}

func (c *tcluster) node(name string) *tnode { return c.byNm[name] }

// start runs every manager; they stop at test cleanup.
func (c *tcluster) start() {
	for _, nd := range c.nodes {
		c.startNode(nd)
	}
}

func (c *tcluster) startNode(nd *tnode) {
	ctx, cancel := context.WithCancel(context.Background())
	nd.cancel = cancel
	nd.runDone = make(chan error, 1)
	go func() { nd.runDone <- nd.mgr.Run(ctx) }()
	c.t.Cleanup(func() { c.stopNode(nd) })
}

func (c *tcluster) stopNode(nd *tnode) {
	if nd.cancel == nil {
		return
	}
	nd.cancel()
	select {
	case err := <-nd.runDone:
		if err != nil {
			c.t.Errorf("%s: Run: %v", nd.name, err)
		}
	case <-time.After(10 * time.Second):
		c.t.Errorf("%s: Run did not return", nd.name)
	}
	nd.cancel = nil
}

// awaitSteady waits until every manager has seen the current view: one
// runs the singleton, the others are younger.
func (c *tcluster) awaitSteady() {
	c.t.Helper()
	for _, nd := range c.nodes {
		eventually(c.t, 10*time.Second, func() bool {
			st := nd.mgr.Status()
			return (st.State == StateOldest && st.Running) || st.State == StateYounger
		}, "%s steady", nd.name)
	}
}

// view is a cluster view by node name; nodes missing are unknown.
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

func (v view) without(name string) view {
	out := view{}
	for k, x := range v {
		if k != name {
			out[k] = x
		}
	}
	return out
}

// snapshotFor builds node of's snapshot of v.
func (c *tcluster) snapshotFor(of string, v view) cluster.Snapshot {
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
		ms := cluster.MemberState{Member: nd.member, Status: st, Reachable: true}
		if st.Final() {
			s.Gone = append(s.Gone, ms)
		} else {
			s.Members = append(s.Members, ms)
		}
	}
	return s
}

func (c *tcluster) setView(of string, v view) { c.byNm[of].mem.Set(c.snapshotFor(of, v)) }

func (c *tcluster) setAll(v view) {
	for _, nd := range c.nodes {
		c.setView(nd.name, v)
	}
}

// events returns nd's events of type typ.
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

func hasEvent(l *kit.EventLog, typ, detailPrefix string) bool {
	for _, e := range eventsOf(l, typ) {
		if strings.HasPrefix(e.Detail, detailPrefix) {
			return true
		}
	}
	return false
}

func running(nd *tnode) bool { return nd.mgr.Status().Running }

// runningNodes lists the nodes whose manager runs an instance.
func (c *tcluster) runningNodes() []string {
	var out []string
	for _, nd := range c.nodes {
		if running(nd) {
			out = append(out, nd.name)
		}
	}
	return out
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// testLogger logs to t only when -v is given, to keep failures readable.
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

var errTest = errors.New("test error")

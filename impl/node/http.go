package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// The reference node serves shardtest/1 (docs/protocol.md) through the kit
// (package protocol/kit), as any Go implementation may: this file is its
// part of the protocol, the wiring of the kit's Node to the cluster, the
// singletons and the regions.

// ReferenceCapabilities are the capabilities of the reference node: all
// of shardtest/1.
func ReferenceCapabilities() []string { return protocol.AllCapabilities() }

// Implementation is the reference node's name in GET /v1/capabilities.
const Implementation = "shardtest-reference"

// protocolNode is the reference node's kit.Node.
func (n *Node) protocolNode() *kit.Node {
	return &kit.Node{
		Implementation:  Implementation,
		Revision:        protocol.Revision,
		Name:            n.cfg.Name,
		Incarnation:     n.incarnationID,
		View:            n.view,
		Age:             true,
		SelfStatus:      func() string { return string(n.selfState()) },
		NextID:          n.nextID,
		Singletons:      []string{IDGeneratorName},
		SingletonStatus: n.singletonStatus,
		Entity:          n.entity,
		Tell:            n.tell,
		EntityTypes:     EntityTypes(),
		ShardingStatus:  n.shardingStatus,
		Coordinator:     true,
		Events:          n.events,
		Clock:           clockControl{n},
		Filter:          filterControl{n},
		Leave:           func(context.Context) error { return n.Leave() },
		Down:            n.down,
		Journal:         true,
		Bugs:            KnownBugs(),
		Without:         n.cfg.WithoutCapabilities,
		Detail:          n.statusDetail,
		RequestTimeout:  n.cfg.RequestTimeout,
		Log:             n.log,
	}
}

// Status is the node's status reply (GET /v1/status).
func (n *Node) Status() protocol.Status { return n.proto.Status() }

func (n *Node) incarnationID() string {
	if inc := n.current(); inc != nil {
		return inc.cluster.Self().Incarnation
	}
	return ""
}

func (n *Node) selfState() cluster.Status {
	inc := n.current()
	if inc == nil {
		return cluster.StatusJoining
	}
	return inc.cluster.SelfStatus()
}

func memberInfo(m cluster.MemberState) protocol.Member {
	return protocol.Member{
		UID: m.UID(), Name: m.Name, Incarnation: m.Incarnation, UpNumber: m.UpNumber,
		Status: string(m.Status), Reachable: m.Reachable, GossipAddr: m.GossipAddr, HTTPAddr: m.HTTPAddr, Roles: m.Roles,
	}
}

// view is the membership view of the current incarnation.
func (n *Node) view() kit.View {
	inc := n.current()
	if inc == nil {
		return kit.View{Self: protocol.Member{Name: n.cfg.Name, Status: protocol.StatusJoining}}
	}
	return ViewOf(inc.cluster.Snapshot(), n.cfg.SingletonRole)
}

// ViewOf is a member's view as the node protocol shows it (also for a
// simulated node); role is the singleton's.
func ViewOf(snap cluster.Snapshot, role string) kit.View {
	v := kit.View{Self: memberInfo(snap.Self)}
	if o, ok := snap.Oldest(role); ok {
		v.Oldest = o.UID()
	}
	for _, m := range snap.Members {
		v.Members = append(v.Members, memberInfo(m))
	}
	for _, m := range snap.Gone {
		v.Gone = append(v.Gone, memberInfo(m))
	}
	return v
}

// Detail is the reference node's own part of its status.
type Detail struct {
	Downing DowningInfo `json:"downing"`
	// Bugs are the deliberate bugs switched on.
	Bugs []string `json:"bugs"`
	// Incarnations counts member incarnations of this process.
	Incarnations int `json:"incarnations"`
	// Tells counts fire-and-forget messages queued, failed and dropped.
	Tells TellStatus `json:"tells"`
	// PeerAddr is the peer port's address (gossiped to the members, and
	// picked at random unless --peer-port names it): shown so that
	// shardtest conform --probe can reach the node-to-node routes as a
	// stranger or a forging member would.
	PeerAddr string `json:"peer_addr"`
	// Memory is the process's Go memory (shardtest bench entities reads
	// it: what entities cost, without a profiler).
	Memory MemoryInfo `json:"memory"`
}

// MemoryInfo is the Go runtime's view of the process's memory.
type MemoryInfo struct {
	// HeapLive is the heap the last garbage collection found reachable
	// (0 before the first); GCCycles counts the collections so far, so a
	// reader can wait for one after a change; Stacks is the goroutine
	// stacks' memory; Goroutines how many there are.
	HeapLive   uint64 `json:"heap_live_bytes"`
	GCCycles   uint64 `json:"gc_cycles"`
	Stacks     uint64 `json:"stack_bytes"`
	Goroutines uint64 `json:"goroutines"`
}

// readMemory reads MemoryInfo from runtime/metrics (no stop of the world).
func readMemory() MemoryInfo {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/memory/classes/heap/stacks:bytes"}, {Name: "/sched/goroutines:goroutines"}}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	return MemoryInfo{HeapLive: v(0), GCCycles: v(1), Stacks: v(2), Goroutines: v(3)}
}

// DowningInfo is the split-brain resolver's configuration.
type DowningInfo struct {
	Strategy      string `json:"strategy"`
	StableAfterMS int64  `json:"stable_after_ms"`
	QuorumSize    int    `json:"quorum_size,omitempty"`
}

func (n *Node) statusDetail() any {
	d := Detail{
		Downing:  DowningInfo{Strategy: n.cfg.Downing.Strategy, StableAfterMS: n.cfg.Downing.StableAfter.Milliseconds(), QuorumSize: n.cfg.Downing.QuorumSize},
		Bugs:     append([]string{}, n.cfg.Bugs...),
		PeerAddr: n.peerAddr,
		Memory:   readMemory(),
	}
	n.mu.Lock()
	d.Incarnations = n.incarnations
	var tl *tells
	if n.cur != nil {
		tl = n.cur.tells
	}
	n.mu.Unlock()
	if tl != nil {
		d.Tells = tl.status()
	}
	return d
}

// Incarnations counts the member incarnations this process has run.
func (n *Node) Incarnations() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.incarnations
}

// SingletonDetail is a singleton's manager and proxy, in its status.
type SingletonDetail struct {
	Manager singleton.ManagerStatus `json:"manager"`
	Proxy   singleton.ProxyStatus   `json:"proxy"`
}

func (n *Node) singletonStatus() []protocol.SingletonStatus {
	inc := n.current()
	if inc == nil {
		return nil
	}
	n.mu.Lock()
	mgr, proxy, host := inc.manager, inc.proxy, inc.host
	n.mu.Unlock()
	if mgr == nil {
		return nil
	}
	ms := mgr.Status()
	d := SingletonDetail{Manager: ms}
	if proxy != nil {
		d.Proxy = proxy.Status()
	}
	st := protocol.SingletonStatus{Name: IDGeneratorName, Running: ms.Running, Detail: d}
	if h := host.current(); ms.Running && h != nil {
		st.Instance = h.String()
	}
	return []protocol.SingletonStatus{st}
}

func (n *Node) nextID(ctx context.Context) (protocol.NextID, error) {
	inc := n.current()
	var proxy *singleton.Proxy
	if inc != nil {
		n.mu.Lock()
		proxy = inc.proxy
		n.mu.Unlock()
	}
	if proxy == nil {
		return protocol.NextID{}, kit.Errorf(protocol.CodeNotReady, "the singleton proxy is not running yet")
	}
	return NextIDReply(proxy.Call(ctx, singleton.Request{Op: "next-id"}))
}

// NextIDReply is the node's answer to next-id from what the singleton
// proxy returned: the id and instance, or the protocol error (also for a
// simulated node).
func NextIDReply(res json.RawMessage, err error) (protocol.NextID, error) {
	if err != nil {
		switch {
		case errors.Is(err, singleton.ErrDropped):
			return protocol.NextID{}, kit.Errorf(protocol.CodeDropped, "%w", err)
		case singleton.IsDefinite(err):
			return protocol.NextID{}, kit.Errorf(protocol.CodeUnavailable, "%w", err)
		}
		return protocol.NextID{}, kit.Errorf(protocol.CodeUnknownOutcome, "%w", err)
	}
	var reply protocol.NextID
	if err := json.Unmarshal(res, &reply); err != nil || reply.ID <= 0 {
		return protocol.NextID{}, kit.Custom(http.StatusBadGateway, "bad-singleton-reply", protocol.Unknown, fmt.Sprintf("singleton replied %s", res))
	}
	return reply, nil
}

func (n *Node) entity(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
	t := n.currentType(req.Type)
	if t == nil {
		return protocol.EntityReply{}, kit.Errorf(protocol.CodeNotReady, "sharding is not running yet")
	}
	rep, err := t.region.Deliver(ctx, sharding.Message{EntityID: req.ID, Op: req.Op, Payload: req.Payload, Sender: req.Sender})
	if err != nil {
		return protocol.EntityReply{}, DeliveryError(err)
	}
	return protocol.EntityReply{Shard: rep.Shard, Node: rep.Node, EntityIncarnation: rep.EntityIncarnation, Result: rep.Payload}, nil
}

func (n *Node) tell(_ context.Context, req protocol.EntityRequest) error {
	t := n.currentType(req.Type)
	inc := n.current()
	var tl *tells
	if inc != nil {
		n.mu.Lock()
		tl = inc.tells
		n.mu.Unlock()
	}
	if t == nil || tl == nil {
		return kit.Errorf(protocol.CodeNotReady, "sharding is not running yet")
	}
	if err := tl.enqueue(t.region, sharding.Message{EntityID: req.ID, Op: req.Op, Payload: req.Payload, Sender: req.Sender}); err != nil {
		return kit.Errorf(protocol.CodeDropped, "%w", err)
	}
	return nil
}

// currentType is the current incarnation's entity type, or nil.
func (n *Node) currentType(name string) *entityType {
	inc := n.current()
	if inc == nil {
		return nil
	}
	return inc.entityType(name)
}

// DeliveryError maps a delivery error to the protocol: definite failures
// are "fail", everything else "unknown". An entity's rejection is answered
// with its code, a shardtest/1 code (the table gives its status), or one of
// the entity's own as an unavailable (503) definite failure.
func DeliveryError(err error) error {
	var rej *sharding.Rejection
	switch {
	case errors.As(err, &rej):
		if _, ok := protocol.Code(rej.Code); ok {
			return kit.Errorf(rej.Code, "%w", err)
		}
		return kit.Custom(http.StatusServiceUnavailable, rej.Code, protocol.Fail, err.Error())
	case errors.Is(err, sharding.ErrBufferFull):
		return kit.Errorf(protocol.CodeDropped, "%w", err)
	case sharding.IsDefinite(err):
		return kit.Errorf(protocol.CodeUnavailable, "%w", err)
	}
	return kit.Errorf(protocol.CodeUnknownOutcome, "%w", err)
}

// ShardingDetail is the coordinator's allocation table, on the member
// running a type's coordinator.
type ShardingDetail struct {
	Allocations *sharding.CoordinatorState `json:"allocations,omitempty"`
}

// RegionDetail is what the reference region shows beyond the protocol.
type RegionDetail struct {
	Self       string `json:"self"`
	ProxyOnly  bool   `json:"proxy_only"`
	Registered bool   `json:"registered"`
	// KnownHomes counts shards whose remote home is cached.
	KnownHomes int `json:"known_homes"`
}

// shardingStatus reports every entity type's region and, where the
// coordinator runs here, its allocation table.
func (n *Node) shardingStatus() []protocol.ShardingStatus {
	inc := n.current()
	if inc == nil {
		return nil
	}
	n.mu.Lock()
	types := inc.types
	n.mu.Unlock()
	var out []protocol.ShardingStatus
	for _, t := range types {
		rs := t.region.Status()
		region := protocol.RegionStatus{Shards: rs.Shards, Buffered: rs.Buffered, Dropped: rs.Dropped, Coordinator: rs.Coordinator,
			Detail: RegionDetail{Self: rs.Self, ProxyOnly: rs.ProxyOnly, Registered: rs.Registered, KnownHomes: rs.KnownHomes}}
		si := protocol.ShardingStatus{Type: t.name, Region: region}
		if t.coord.Status().Running {
			si.CoordinatorRunning = true
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			raw, err := t.coord.Handle(ctx, singleton.Request{Op: "state"})
			cancel()
			var cs sharding.CoordinatorState
			if err == nil && json.Unmarshal(raw, &cs) == nil {
				si.Detail = ShardingDetail{Allocations: &cs}
			}
		}
		out = append(out, si)
	}
	return out
}

// clockControl is the node's clock as the kit skews it.
type clockControl struct{ n *Node }

func (c clockControl) Get() protocol.ClockState { return ClockStateOf(c.n.cfg.Clock) }

// ClockStateOf is a node clock's state as the protocol shows it.
func ClockStateOf(c *clock.Adjustable) protocol.ClockState {
	s := c.Current()
	return protocol.ClockState{OffsetMS: float64(s.Offset) / float64(time.Millisecond), Drift: s.Drift, Now: protocol.Time(c.Now())}
}

// SkewOf is the skew a clock request asks for.
func SkewOf(req protocol.ClockRequest) clock.Skew {
	return clock.Skew{Offset: time.Duration(req.OffsetMS * float64(time.Millisecond)), Drift: req.Drift}
}

func (c clockControl) Set(req protocol.ClockRequest) error { return c.n.SetClock(req) }

// SetClock replaces the clock's skew.
func (n *Node) SetClock(req protocol.ClockRequest) error {
	s := SkewOf(req)
	if err := n.cfg.Clock.Set(s); err != nil {
		return err
	}
	n.events.Append(protocol.Event{Type: protocol.EventClockChanged, Detail: fmt.Sprintf("offset %v drift %v", s.Offset, s.Drift)})
	return nil
}

// filterControl is the node's in-process packet filter as the kit sets it.
type filterControl struct{ n *Node }

func (f filterControl) Get() protocol.Filter {
	r := f.n.filter.Rules()
	return protocol.Filter{DropIn: r.DropIn, DropOut: r.DropOut}
}

func (f filterControl) Set(r protocol.Filter) error {
	f.n.SetFilter(peer.Rules{DropIn: r.DropIn, DropOut: r.DropOut})
	return nil
}

// SetFilter replaces the in-process packet filter's rules.
func (n *Node) SetFilter(r peer.Rules) {
	n.filter.Set(r)
	r = n.filter.Rules()
	n.events.Append(protocol.Event{Type: protocol.EventFilterChanged,
		Detail: "drop_in [" + strings.Join(r.DropIn, ",") + "] drop_out [" + strings.Join(r.DropOut, ",") + "]"})
}

// down downs a member on an operator's word: member is a uid, or a node
// name for its member that is not yet final.
func (n *Node) down(_ context.Context, member string) (string, error) {
	inc := n.current()
	if inc == nil {
		return "", kit.Errorf(protocol.CodeNotReady, "no member running")
	}
	uid, err := MemberToDown(inc.cluster.Snapshot(), member)
	if err != nil {
		return "", err
	}
	return uid, DownError(inc.cluster.Down(uid))
}

// MemberToDown is the member an operator's down names: a member uid as
// given, or the node name's member that is not Down or Removed.
func MemberToDown(snap cluster.Snapshot, member string) (string, error) {
	if strings.Contains(member, "@") {
		return member, nil
	}
	for _, m := range snap.Members {
		if m.Name == member && !m.Status.Final() {
			return m.UID(), nil
		}
	}
	return "", kit.Errorf(protocol.CodeUnknownMember, "no member of node %q is up", member)
}

// DownError is how the protocol answers the membership's refusal of a
// down (nil: downed).
func DownError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cluster.ErrUnknownMember):
		return kit.Errorf(protocol.CodeUnknownMember, "%w", err)
	}
	return kit.Errorf(protocol.CodeNotReady, "%w", err)
}

// Leave starts a graceful leave in the background: hand over, then leave.
// Run returns once the member has left.
func (n *Node) Leave() error {
	inc := n.current()
	if inc == nil {
		return kit.Errorf(protocol.CodeCannotLeave, "not joined yet")
	}
	switch st := inc.cluster.Snapshot().Self.Status; st {
	case cluster.StatusUp:
	case cluster.StatusLeaving:
		return nil // already on its way: leave is idempotent
	default:
		return kit.Errorf(protocol.CodeCannotLeave, "cannot leave while %s", st)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.leaving {
		return nil
	}
	if !inc.goBackground(inc.leave) {
		return kit.Errorf(protocol.CodeCannotLeave, "the member is stopping")
	}
	n.leaving = true
	return nil
}

// handleInternal serves the node-to-node routes (/internal/...) of the
// current incarnation.
func (n *Node) handleInternal(w http.ResponseWriter, r *http.Request) {
	inc := n.current()
	if !strings.HasPrefix(r.URL.Path, "/internal/") {
		n.internalError(w, protocol.CodeNotFound, "no endpoint "+r.URL.Path)
		return
	}
	if inc == nil {
		n.internalError(w, protocol.CodeNotReady, "no member running")
		return
	}
	if r.Method != http.MethodPost {
		n.internalError(w, protocol.CodeMethodNotAllowed, r.Method+" not allowed on "+r.URL.Path+" (POST)")
		return
	}
	// One lookup, not two (ServeHTTP would look again): the handlers
	// read no path values.
	h, pattern := inc.mux.Handler(r)
	if pattern == "" {
		n.internalError(w, protocol.CodeNotFound, "no endpoint "+r.URL.Path)
		return
	}
	h.ServeHTTP(w, r)
}

// internalError answers a node-to-node request no route takes, with the
// status and outcome of code on the node-to-node transport
// (protocol.ScopePeer), naming this node as its public replies do.
func (n *Node) internalError(w http.ResponseWriter, code, msg string) {
	peer.WriteErrorBody(w, 0, protocol.ErrorBody{Error: msg, Code: code, ServedBy: n.proto.ServedBy()})
}

// hostTracker knows the singleton instance running on this member, for
// the status (singletons[].instance).
type hostTracker struct {
	cur atomic.Pointer[protocol.SingletonInstance]
}

func (t *hostTracker) current() *protocol.SingletonInstance {
	if t == nil {
		return nil
	}
	return t.cur.Load()
}

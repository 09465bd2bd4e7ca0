package kit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/shardtest/shardtest/protocol"
)

// Node is an implementation's side of shardtest/1: a struct of functions,
// each the part of the protocol it serves. Membership (View) is required;
// every other part is optional, and the capabilities the node declares are
// exactly the parts that are set, so a node never declares what it does not
// serve. Handler serves it all: routing, strict request decoding, the
// served_by header and body field on every reply, the error body with the
// right outcome, readiness checks and request deadlines. Set the fields
// before the first call of Handler; they must not change after it.
type Node struct {
	// Implementation names the implementation (GET /v1/capabilities).
	Implementation string
	// Revision is the revision of shardtest/1 the implementation was
	// written for (protocol.Revisions; 0: not said). Write the number
	// itself, not protocol.Revision: after an upgrade of this module,
	// conform then labels the rules that are new to you.
	Revision int
	// Name is the node name (Config.Name).
	Name string
	// Incarnation returns the current incarnation: new at every process
	// start (and at every in-process restart after being downed).
	Incarnation func() string

	// View is the node's membership view now (capability membership,
	// required).
	View func() View
	// Age: View's members carry their up_number and the node knows the
	// oldest (capability age).
	Age bool
	// SelfStatus, if set, is this member's status (protocol.Status*),
	// cheaper than View for the readiness check of every client request.
	SelfStatus func() string

	// NextID serves POST /v1/singleton/next-id (capability singleton) for
	// the singletons named in Singletons; SingletonStatus says which run
	// here.
	NextID          func(ctx context.Context) (protocol.NextID, error)
	Singletons      []string
	SingletonStatus func() []protocol.SingletonStatus

	// Entity serves an ask on POST /v1/entity (capability sharding) for
	// EntityTypes; Tell a tell (capability tell): nil once the message is
	// accepted for delivery at most once, in the sender's order.
	// ShardingStatus says what each type's region hosts here.
	Entity         func(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error)
	Tell           func(ctx context.Context, req protocol.EntityRequest) error
	EntityTypes    []string
	ShardingStatus func() []protocol.ShardingStatus
	// Coordinator: ShardingStatus reports coordinator_running where a
	// type's shard coordinator runs (capability coordinator).
	Coordinator bool

	// Events is the node's event log (capability events).
	Events *EventLog
	// Clock skews the node's own clock (capability clock); Filter drops
	// its cluster-internal traffic (capability filter).
	Clock  Clock
	Filter PacketFilter
	// Leave starts a graceful leave and returns once it is under way
	// (capability leave); Down downs a member on an operator's word and
	// returns its uid (capability down).
	Leave func(ctx context.Context) error
	Down  func(ctx context.Context, member string) (string, error)
	// Journal: the node keeps state in the harness's journal
	// (SHARDTEST_JOURNAL; capability journal), so the harness may cut it
	// off from the journal or kill the journal.
	Journal bool

	// Bugs are the deliberate bugs SHARDTEST_BUGS can switch on.
	Bugs []string
	// Without hides capabilities (the reference node's
	// --without-capabilities): not declared, their endpoints 404.
	Without []string
	// Detail is the status's implementation detail (shown, never read by
	// the harness).
	Detail func() any
	// RequestTimeout bounds NextID, Entity and Tell (default
	// DefaultRequestTimeout): their ctx ends then, and a handler that
	// returns ctx's error answers unknown-outcome, as the protocol demands
	// (every request is answered, before the harness's op timeout).
	RequestTimeout time.Duration
	// Other serves every path outside /v1/ (the implementation's own
	// endpoints); the kit still sets the served-by headers and recovers
	// panics. Nil: 404.
	Other http.Handler
	Log   *slog.Logger

	capsOnce sync.Once
	caps     []string
}

// View is a node's membership view.
type View struct {
	// Self is this member (Status: protocol.Status*).
	Self protocol.Member
	// Members are the members not yet final, this one included, in any
	// order: with Age, the kit sorts them oldest first.
	Members []protocol.Member
	// Gone are final members this node still remembers.
	Gone []protocol.Member
	// Oldest is where the singleton belongs in this node's view (with
	// Age); empty: the oldest up member by up_number.
	Oldest string
}

// Clock is a node clock the harness can skew (capability clock).
type Clock interface {
	Get() protocol.ClockState
	// Set replaces the skew (the kit has checked the ranges).
	Set(protocol.ClockRequest) error
}

// PacketFilter is a node's in-process packet filter (capability filter).
type PacketFilter interface {
	Get() protocol.Filter
	// Set replaces the rules (the kit has checked the addresses).
	Set(protocol.Filter) error
}

// Capabilities are what n declares: the parts that are set, less Without.
func (n *Node) Capabilities() []string {
	n.capsOnce.Do(func() { n.caps = n.capabilities() })
	return slices.Clone(n.caps)
}

func (n *Node) capabilities() []string {
	has := map[string]bool{
		protocol.CapMembership:  n.View != nil,
		protocol.CapAge:         n.View != nil && n.Age,
		protocol.CapSingleton:   n.NextID != nil,
		protocol.CapSharding:    n.Entity != nil,
		protocol.CapTell:        n.Tell != nil,
		protocol.CapCoordinator: n.ShardingStatus != nil && n.Coordinator,
		protocol.CapEvents:      n.Events != nil,
		protocol.CapClock:       n.Clock != nil,
		protocol.CapFilter:      n.Filter != nil,
		protocol.CapLeave:       n.Leave != nil,
		protocol.CapDown:        n.Down != nil,
		protocol.CapJournal:     n.Journal,
	}
	var out []string
	for _, c := range protocol.AllCapabilities() {
		if has[c] && !slices.Contains(n.Without, c) {
			out = append(out, c)
		}
	}
	return out
}

func (n *Node) has(c string) bool {
	n.capsOnce.Do(func() { n.caps = n.capabilities() })
	return slices.Contains(n.caps, c)
}

func (n *Node) log() *slog.Logger {
	if n.Log == nil {
		return slog.Default()
	}
	return n.Log
}

// ServedBy names the member serving now.
func (n *Node) ServedBy() protocol.ServedBy {
	sb := protocol.ServedBy{Node: n.Name}
	if n.Incarnation != nil {
		sb.Incarnation = n.Incarnation()
	}
	return sb
}

// route is one endpoint of shardtest/1.
type route struct {
	capability string // "" for those every node serves
	methods    []string
	h          func(w http.ResponseWriter, r *http.Request) error
}

// routes are protocol.Endpoints with their handlers.
func (n *Node) routes() map[string]route {
	handlers := map[string]func(w http.ResponseWriter, r *http.Request) error{
		"/v1/health":            n.serveHealth,
		"/v1/status":            n.serveStatus,
		"/v1/capabilities":      n.serveCapabilities,
		"/v1/events":            n.serveEvents,
		"/v1/singleton/next-id": n.serveNextID,
		"/v1/entity":            n.serveEntity,
		"/v1/admin/clock":       n.serveClock,
		"/v1/admin/filter":      n.serveFilter,
		"/v1/admin/leave":       n.serveLeave,
		"/v1/admin/down":        n.serveDown,
	}
	out := map[string]route{}
	for _, e := range protocol.Endpoints() {
		out[e.Path] = route{e.Capability, e.Methods, handlers[e.Path]}
	}
	return out
}

// Handler serves shardtest/1 (and Other): a fixed route table, a JSON
// error body for everything else, and a recover, so nothing a client sends
// takes the node down.
func (n *Node) Handler() http.Handler {
	routes := n.routes()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sb := n.ServedBy()
		w.Header().Set(protocol.NodeHeader, sb.Node)
		w.Header().Set(protocol.IncarnationHeader, sb.Incarnation)
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				n.log().Error("request handler panicked", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				n.writeError(w, Errorf(protocol.CodeInternal, "internal error"))
			}
		}()
		path := r.URL.Path
		if !strings.HasPrefix(path, "/v1/") && n.Other != nil {
			n.Other.ServeHTTP(w, r)
			return
		}
		rt, ok := routes[path]
		if !ok {
			n.writeError(w, Errorf(protocol.CodeNotFound, "no endpoint %s", path))
			return
		}
		if rt.capability != "" && !n.has(rt.capability) {
			n.writeError(w, Errorf(protocol.CodeNotFound, "no endpoint %s (capability %s not offered)", path, rt.capability))
			return
		}
		if !slices.Contains(rt.methods, r.Method) {
			w.Header().Set("Allow", strings.Join(rt.methods, ", "))
			n.writeError(w, Errorf(protocol.CodeMethodNotAllowed, "%s not allowed on %s (%s)", r.Method, path, strings.Join(rt.methods, " or ")))
			return
		}
		if err := rt.h(w, r); err != nil {
			n.writeError(w, err)
		}
	})
}

// WriteJSON writes v with status.
func (n *Node) WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only a bug gets here (every reply type encodes).
		n.log().Error("encode reply", "err", err)
		var eb protocol.ErrorBody
		status, eb = protocol.ErrorReply(protocol.ScopeNode, 0, protocol.ErrorBody{Error: "encode reply", Code: protocol.CodeInternal, ServedBy: n.ServedBy()})
		b, _ = json.Marshal(eb) // an ErrorBody always marshals
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError answers err as the protocol's error body.
func (n *Node) writeError(w http.ResponseWriter, err error) {
	status, body := reply(err, n.ServedBy())
	if status >= http.StatusInternalServerError && body.Code == protocol.CodeInternal {
		n.log().Warn("internal error", "err", err)
	}
	n.WriteJSON(w, status, body)
}

// refuseUnlessReady is the error for a member that cannot serve clients.
func (n *Node) refuseUnlessReady() error {
	var st string
	if n.SelfStatus != nil {
		st = n.SelfStatus()
	} else {
		st = n.View().Self.Status
	}
	switch {
	case st == protocol.StatusDown:
		return Errorf(protocol.CodeDowned, "this member was downed")
	case st == protocol.StatusRemoved:
		return Errorf(protocol.CodeLeft, "this member has left the cluster")
	case !protocol.ReadyStatus(st):
		return Errorf(protocol.CodeNotReady, "this member has not joined the cluster yet (%s)", cmp.Or(st, "no status"))
	}
	return nil
}

// DefaultRequestTimeout is Node.RequestTimeout's default: 1 s below the
// harness's default op timeout (protocol.DefaultOpTimeout), so that a
// request a node cannot finish is answered (unknown-outcome, or a definite
// failure it learned of) while the harness still waits for it, and the
// node's forwards and retries stop with it, instead of holding a worker
// and the node's resources past the point where nobody reads the reply.
// The second left is for the reply's way back. A node does not know a
// run's op timeout; one that should finish slower operations in runs with
// a longer one (a scenario's) sets RequestTimeout itself.
const DefaultRequestTimeout = protocol.DefaultOpTimeout - time.Second

func (n *Node) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), cmp.Or(n.RequestTimeout, DefaultRequestTimeout))
}

func (n *Node) serveHealth(w http.ResponseWriter, r *http.Request) error {
	st := protocol.StatusJoining
	if n.View != nil {
		st = cmp.Or(n.View().Self.Status, protocol.StatusJoining)
	}
	n.WriteJSON(w, http.StatusOK, protocol.Health{ServedBy: n.ServedBy(), OK: true, Ready: protocol.ReadyStatus(st), Status: st})
	return nil
}

func (n *Node) serveCapabilities(w http.ResponseWriter, r *http.Request) error {
	c := protocol.Capabilities{
		ServedBy: n.ServedBy(), Protocol: protocol.Version, Revision: n.Revision, Implementation: n.Implementation,
		Capabilities: n.Capabilities(), Singletons: []string{}, EntityTypes: []string{}, Bugs: []string{},
	}
	if n.has(protocol.CapSingleton) {
		c.Singletons = append(c.Singletons, n.Singletons...)
	}
	if n.has(protocol.CapSharding) {
		c.EntityTypes = append(c.EntityTypes, n.EntityTypes...)
	}
	c.Bugs = append(c.Bugs, n.Bugs...)
	n.WriteJSON(w, http.StatusOK, c)
	return nil
}

// Status assembles the node's status from its parts.
func (n *Node) Status() protocol.Status {
	v := n.View()
	st := protocol.Status{
		ServedBy: n.ServedBy(), Protocol: protocol.Version, Self: v.Self,
		Members: slices.Clone(v.Members), Gone: slices.Clone(v.Gone), Unreachable: []string{},
		Singletons: []protocol.SingletonStatus{}, Sharding: []protocol.ShardingStatus{},
	}
	st.Ready = protocol.ReadyStatus(v.Self.Status)
	if st.Members == nil {
		st.Members = []protocol.Member{}
	}
	if st.Gone == nil {
		st.Gone = []protocol.Member{}
	}
	if n.has(protocol.CapAge) {
		slices.SortStableFunc(st.Members, func(a, b protocol.Member) int {
			return cmp.Or(cmp.Compare(a.UpNumber, b.UpNumber), strings.Compare(a.UID, b.UID))
		})
		if st.Ready {
			st.Oldest = v.Oldest
			if st.Oldest == "" {
				for _, m := range st.Members {
					if m.Status == protocol.StatusUp {
						st.Oldest = m.UID
						break
					}
				}
			}
		}
	} else {
		// Without age, no member is older than another.
		for i := range st.Members {
			st.Members[i].UpNumber = 0
		}
		st.Self.UpNumber = 0
	}
	for _, m := range st.Members {
		if !m.Reachable {
			st.Unreachable = append(st.Unreachable, m.UID)
		}
	}
	if n.has(protocol.CapSingleton) && n.SingletonStatus != nil {
		st.Singletons = append(st.Singletons, n.SingletonStatus()...)
	}
	if n.has(protocol.CapSharding) && n.ShardingStatus != nil {
		st.Sharding = append(st.Sharding, n.ShardingStatus()...)
		if !n.has(protocol.CapCoordinator) {
			for i := range st.Sharding {
				st.Sharding[i].CoordinatorRunning = false
			}
		}
	}
	if n.has(protocol.CapEvents) {
		st.LastEventSeq = n.Events.Last()
	}
	if n.has(protocol.CapClock) {
		c := n.Clock.Get()
		st.Clock = &c
	}
	if n.has(protocol.CapFilter) {
		f := n.Filter.Get()
		st.Filter = &f
	}
	if n.Detail != nil {
		st.Detail = n.Detail()
	}
	return st
}

func (n *Node) serveStatus(w http.ResponseWriter, r *http.Request) error {
	n.WriteJSON(w, http.StatusOK, n.Status())
	return nil
}

func (n *Node) serveEvents(w http.ResponseWriter, r *http.Request) error {
	q, err := parseEventsQuery(r.URL.RawQuery)
	if err != nil {
		return Errorf(protocol.CodeBadRequest, "%v", err)
	}
	evs, last := n.Events.Since(q.after, q.limit)
	if len(evs) == 0 && q.wait > 0 {
		// Long poll: wait for the next event. The wait is the harness's
		// and uses real time, not the node's skewable clock.
		t := time.NewTimer(q.wait)
		select {
		case <-n.Events.Changed():
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		evs, last = n.Events.Since(q.after, q.limit)
	}
	if evs == nil {
		evs = []protocol.Event{}
	}
	n.WriteJSON(w, http.StatusOK, protocol.EventsReply{ServedBy: n.ServedBy(), Events: evs, Last: last})
	return nil
}

func (n *Node) serveNextID(w http.ResponseWriter, r *http.Request) error {
	var req struct{}
	if err := Decode(r, &req); err != nil {
		return err
	}
	if err := n.refuseUnlessReady(); err != nil {
		return err
	}
	ctx, cancel := n.requestContext(r)
	defer cancel()
	res, err := n.NextID(ctx)
	if err != nil {
		return err
	}
	if res.ID <= 0 {
		return Errorf(protocol.CodeInternal, "the singleton answered id %d (ids are positive)", res.ID)
	}
	res.ServedBy = n.ServedBy()
	n.WriteJSON(w, http.StatusOK, res)
	return nil
}

// ValidateEntityRequest checks what the protocol says of an entity
// request (docs/protocol.md, Entities), and nothing else: the type is one
// of EntityTypes, the id 1 to 256 bytes of UTF-8, the op given, the sender
// at most 256 bytes of UTF-8, the mode ask or tell (tell only with Tell
// set), and, for the protocol's own entity types (register, log, sender),
// the op and its payload (CheckPayload). Its error is a bad-request *Error
// (outcome fail); it reads no state and has no effect, so it may run
// anywhere, as often as wanted. The kit runs it on every POST /v1/entity
// before the readiness check and before Entity or Tell: what those get is
// valid. A type of the implementation's own is checked up to its op; its
// payload is the implementation's to check (a malformed one is
// bad-request too).
func (n *Node) ValidateEntityRequest(req protocol.EntityRequest) error {
	switch {
	case !slices.Contains(n.EntityTypes, req.Type):
		return Errorf(protocol.CodeBadRequest, "unknown entity type %q (%s)", req.Type, strings.Join(n.EntityTypes, ", "))
	case req.ID == "" || len(req.ID) > protocol.MaxEntityIDBytes || !utf8.ValidString(req.ID):
		return Errorf(protocol.CodeBadRequest, "entity id must be 1 to %d bytes of UTF-8", protocol.MaxEntityIDBytes)
	case req.Op == "":
		return Errorf(protocol.CodeBadRequest, "op is required")
	case len(req.Sender) > protocol.MaxSenderBytes || !utf8.ValidString(req.Sender):
		return Errorf(protocol.CodeBadRequest, "sender must be at most %d bytes of UTF-8", protocol.MaxSenderBytes)
	case req.Mode != "" && req.Mode != protocol.ModeAsk && req.Mode != protocol.ModeTell:
		return Errorf(protocol.CodeBadRequest, "mode %q: want ask or tell", req.Mode)
	case req.Mode == protocol.ModeTell && !n.has(protocol.CapTell):
		return Errorf(protocol.CodeBadRequest, "mode tell is not offered (capability tell): use ask")
	}
	return CheckPayload(req.Type, req.Op, req.Payload)
}

func (n *Node) serveEntity(w http.ResponseWriter, r *http.Request) error {
	var req protocol.EntityRequest
	if err := Decode(r, &req); err != nil {
		return err
	}
	if err := n.ValidateEntityRequest(req); err != nil {
		return err
	}
	if err := n.refuseUnlessReady(); err != nil {
		return err
	}
	ctx, cancel := n.requestContext(r)
	defer cancel()
	if req.Mode == protocol.ModeTell {
		if err := n.Tell(ctx, req); err != nil {
			return err
		}
		n.WriteJSON(w, http.StatusAccepted, protocol.TellReply{ServedBy: n.ServedBy(), Accepted: true})
		return nil
	}
	res, err := n.Entity(ctx, req)
	if err != nil {
		return err
	}
	res.ServedBy, res.Type, res.ID = n.ServedBy(), req.Type, req.ID
	if len(res.Result) == 0 {
		res.Result = json.RawMessage("null")
	}
	n.WriteJSON(w, http.StatusOK, res)
	return nil
}

// maxClockOffset bounds a clock skew's offset.
const maxClockOffset = 24 * time.Hour

func (n *Node) serveClock(w http.ResponseWriter, r *http.Request) error {
	if r.Method == http.MethodPost {
		var req protocol.ClockRequest
		if err := Decode(r, &req); err != nil {
			return err
		}
		lim := float64(maxClockOffset / time.Millisecond)
		switch {
		case math.IsNaN(req.OffsetMS) || req.OffsetMS > lim || req.OffsetMS < -lim:
			return Errorf(protocol.CodeBadRequest, "offset_ms %v out of range ±%v", req.OffsetMS, lim)
		case math.IsNaN(req.Drift) || req.Drift < -0.5 || req.Drift > 0.5:
			return Errorf(protocol.CodeBadRequest, "drift %v out of range -0.5 to 0.5", req.Drift)
		}
		if err := n.Clock.Set(req); err != nil {
			return asBadRequest(err)
		}
	}
	n.WriteJSON(w, http.StatusOK, protocol.ClockReply{ServedBy: n.ServedBy(), ClockState: n.Clock.Get()})
	return nil
}

// maxFilterRules bounds a packet filter.
const maxFilterRules = 1000

func (n *Node) serveFilter(w http.ResponseWriter, r *http.Request) error {
	if r.Method == http.MethodPost {
		var req protocol.Filter
		if err := Decode(r, &req); err != nil {
			return err
		}
		if len(req.DropIn)+len(req.DropOut) > maxFilterRules {
			return Errorf(protocol.CodeBadRequest, "too many filter rules (at most %d)", maxFilterRules)
		}
		for _, list := range [][]string{req.DropIn, req.DropOut} {
			for _, a := range list {
				if !validHostPort(a) {
					return Errorf(protocol.CodeBadRequest, "filter address %q: want host:port of a peer's gossip address", a)
				}
			}
		}
		if req.DropIn == nil {
			req.DropIn = []string{}
		}
		if req.DropOut == nil {
			req.DropOut = []string{}
		}
		if err := n.Filter.Set(req); err != nil {
			return asBadRequest(err)
		}
	}
	n.WriteJSON(w, http.StatusOK, protocol.FilterReply{ServedBy: n.ServedBy(), Filter: n.Filter.Get()})
	return nil
}

func validHostPort(a string) bool {
	h, p, err := net.SplitHostPort(a)
	if err != nil || h == "" {
		return false
	}
	var port int
	if _, err := fmt.Sscanf(p, "%d", &port); err != nil || port < 1 || port > 65535 || fmt.Sprint(port) != p {
		return false
	}
	return true
}

// asBadRequest turns a plain error of an admin setter into bad-request:
// admin requests change nothing when refused.
func asBadRequest(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return Errorf(protocol.CodeBadRequest, "%v", err)
}

func (n *Node) serveLeave(w http.ResponseWriter, r *http.Request) error {
	var req struct{}
	if err := Decode(r, &req); err != nil {
		return err
	}
	if err := n.Leave(r.Context()); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return err
		}
		return Errorf(protocol.CodeCannotLeave, "%v", err)
	}
	n.WriteJSON(w, http.StatusAccepted, protocol.LeaveReply{ServedBy: n.ServedBy(), Status: protocol.StatusLeaving})
	return nil
}

func (n *Node) serveDown(w http.ResponseWriter, r *http.Request) error {
	var req protocol.DownRequest
	if err := Decode(r, &req); err != nil {
		return err
	}
	if req.Member == "" {
		return Errorf(protocol.CodeBadRequest, `"member" (a uid name@incarnation, or a node name) is required`)
	}
	uid, err := n.Down(r.Context(), req.Member)
	if err != nil {
		return err
	}
	n.WriteJSON(w, http.StatusAccepted, protocol.DownReply{ServedBy: n.ServedBy(), Member: uid, Status: protocol.StatusDown})
	return nil
}

// Serve serves h on addr until ctx ends, then shuts down gracefully
// (5 s at most). It returns once the listener is closed.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ServeListener(ctx, l, h)
}

// ServeListener is Serve on a listener already open, with the kit's
// limits (ReadTimeout, and the default Slots).
func ServeListener(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := NewServer(h)
	done := make(chan error, 1)
	go func() { done <- Slots{}.Serve(srv, l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-done
	return nil
}

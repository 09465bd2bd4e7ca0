package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/events"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/singleton"
)

// Reply headers naming the member that served a request.
const (
	NodeHeader        = "X-Shardtest-Node"
	IncarnationHeader = "X-Shardtest-Incarnation"
)

// maxBody bounds a request body: every valid request is tiny.
const maxBody = 64 << 10

type route struct {
	method string
	h      func(w http.ResponseWriter, r *http.Request)
}

// endpointCapability is the capability a client endpoint belongs to
// ("" for the core ones every implementation serves).
func endpointCapability(path string) string {
	switch path {
	case "/v1/events":
		return "events"
	case "/v1/singleton/next-id":
		return "singleton"
	case "/v1/admin/leave":
		return "leave"
	case "/v1/admin/down":
		return "down"
	case "/v1/entity":
		return "sharding"
	case "/v1/admin/clock":
		return "clock"
	case "/v1/admin/filter":
		return "filter"
	}
	return ""
}

// capabilities are the capabilities the node declares.
func (n *Node) capabilities() []string {
	return slices.DeleteFunc(ReferenceCapabilities(), func(c string) bool { return slices.Contains(n.cfg.WithoutCapabilities, c) })
}

// handler is the node's HTTP entry point: a fixed route table, JSON errors
// for everything else, and a recover so no request can take the node down.
func (n *Node) handler() http.Handler {
	routes := map[string]route{
		"/v1/health":            {http.MethodGet, n.handleHealth},
		"/v1/status":            {http.MethodGet, n.handleStatus},
		"/v1/capabilities":      {http.MethodGet, n.handleCapabilities},
		"/v1/events":            {http.MethodGet, n.handleEvents},
		"/v1/singleton/next-id": {http.MethodPost, n.handleNextID},
		"/v1/admin/leave":       {http.MethodPost, n.handleLeave},
		"/v1/admin/down":        {http.MethodPost, n.handleDown},
		"/v1/entity":            {http.MethodPost, n.handleEntity},
	}
	both := map[string]func(w http.ResponseWriter, r *http.Request){
		"/v1/admin/clock":  n.handleClock,
		"/v1/admin/filter": n.handleFilter,
	}
	internal := n.filter.Middleware(http.HandlerFunc(n.handleInternal))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sb := n.servedBy()
		w.Header().Set(NodeHeader, sb.Node)
		w.Header().Set(IncarnationHeader, sb.Incarnation)
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				n.log.Error("request handler panicked", "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				n.writeError(w, http.StatusInternalServerError, "internal", peer.OutcomeUnknown, "internal error")
			}
		}()
		path := r.URL.Path
		if strings.HasPrefix(path, "/internal/") {
			internal.ServeHTTP(w, r)
			return
		}
		if c := endpointCapability(path); c != "" && slices.Contains(n.cfg.WithoutCapabilities, c) {
			n.writeError(w, http.StatusNotFound, "not-found", peer.OutcomeFail, "no endpoint "+path+" (capability "+c+" not offered: --without-capabilities)")
			return
		}
		if h, ok := both[path]; ok {
			if r.Method != http.MethodGet && r.Method != http.MethodPost {
				n.writeError(w, http.StatusMethodNotAllowed, "method-not-allowed", peer.OutcomeFail, r.Method+" not allowed on "+path+" (GET or POST)")
				return
			}
			h(w, r)
			return
		}
		rt, ok := routes[path]
		if !ok {
			n.writeError(w, http.StatusNotFound, "not-found", peer.OutcomeFail, "no endpoint "+path)
			return
		}
		if r.Method != rt.method {
			n.writeError(w, http.StatusMethodNotAllowed, "method-not-allowed", peer.OutcomeFail, r.Method+" not allowed on "+path+" ("+rt.method+")")
			return
		}
		rt.h(w, r)
	})
}

func (n *Node) servedBy() ServedBy {
	sb := ServedBy{Node: n.cfg.Name}
	if inc := n.current(); inc != nil {
		sb.Incarnation = inc.cluster.Self().Incarnation
	}
	return sb
}

func (n *Node) writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	if err := enc.Encode(v); err != nil {
		n.log.Debug("write reply", "err", err)
	}
}

func (n *Node) writeError(w http.ResponseWriter, status int, code, outcome, msg string) {
	n.writeJSON(w, status, ErrorReply{Error: msg, Code: code, Outcome: outcome, ServedBy: n.servedBy()})
}

// decodeBody decodes a JSON request body into v. An empty body leaves v as
// it is; unknown fields, trailing data and oversized bodies are errors.
func decodeBody(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	return decodeJSON(data, v)
}

func decodeJSON(data []byte, v any) error {
	if len(data) > maxBody {
		return fmt.Errorf("body larger than %d bytes", maxBody)
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("malformed JSON: %w", err)
	}
	if dec.More() {
		return errors.New("malformed JSON: trailing data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("malformed JSON: trailing data after the object")
	}
	return nil
}

func (n *Node) handleHealth(w http.ResponseWriter, r *http.Request) {
	st := n.selfState()
	n.writeJSON(w, http.StatusOK, map[string]any{"ok": true, "ready": ready(st), "status": st, "served_by": n.servedBy()})
}

func ready(s cluster.Status) bool { return s == cluster.StatusUp || s == cluster.StatusLeaving }

func (n *Node) selfState() cluster.Status {
	inc := n.current()
	if inc == nil {
		return cluster.StatusJoining
	}
	return inc.cluster.Snapshot().Self.Status
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	n.writeJSON(w, http.StatusOK, n.Status())
}

// Status is the node's status reply.
func (n *Node) Status() StatusReply {
	inc := n.current()
	st := StatusReply{
		ServedBy:    n.servedBy(),
		Protocol:    ProtocolVersion,
		Members:     []MemberInfo{},
		Gone:        []MemberInfo{},
		Unreachable: []string{},
		Singletons:  []SingletonInfo{},
		Sharding:    []ShardingInfo{},
		Clock:       n.clockReply(),
		Filter:      n.filter.Rules(),
		Downing: DowningInfo{
			Strategy:      n.cfg.Downing.Strategy,
			StableAfterMS: n.cfg.Downing.StableAfter.Milliseconds(),
			QuorumSize:    n.cfg.Downing.QuorumSize,
		},
		Bugs: append([]string{}, n.cfg.Bugs...),
	}
	st.LastEventSeq = n.events.Last()
	n.mu.Lock()
	st.Incarnations = n.incarnations
	var mgr *singleton.Manager
	var proxy *singleton.Proxy
	if inc != nil {
		mgr, proxy = inc.manager, inc.proxy
	}
	n.mu.Unlock()
	if inc == nil {
		return st
	}
	snap := inc.cluster.Snapshot()
	st.Self = memberInfo(snap.Self)
	st.Ready = ready(snap.Self.Status)
	if o, ok := snap.Oldest(n.cfg.SingletonRole); ok && st.Ready {
		st.Oldest = o.UID()
	}
	for _, m := range snap.Members {
		st.Members = append(st.Members, memberInfo(m))
		if !m.Reachable {
			st.Unreachable = append(st.Unreachable, m.UID())
		}
	}
	for _, m := range snap.Gone {
		st.Gone = append(st.Gone, memberInfo(m))
	}
	if mgr != nil {
		ms := mgr.Status()
		si := SingletonInfo{Name: IDGeneratorName, Running: ms.Running, Manager: ms}
		if proxy != nil {
			si.Proxy = proxy.Status()
		}
		st.Singletons = append(st.Singletons, si)
	}
	st.Sharding = n.shardingStatus(inc)
	n.mu.Lock()
	tl := inc.tells
	n.mu.Unlock()
	if tl != nil {
		st.Tells = tl.status()
	}
	return st
}

func (n *Node) handleCapabilities(w http.ResponseWriter, r *http.Request) {
	n.writeJSON(w, http.StatusOK, CapabilitiesReply{
		ServedBy:       n.servedBy(),
		Protocol:       ProtocolVersion,
		Implementation: "shardtest-reference",
		Capabilities:   n.capabilities(),
		Singletons:     []string{IDGeneratorName},
		EntityTypes:    EntityTypes(),
		Bugs:           KnownBugs(),
	})
}

// eventsQuery is the parsed query of GET /v1/events.
type eventsQuery struct {
	after uint64
	limit int
	wait  time.Duration
}

const maxEventsLimit = 10_000

func parseEventsQuery(q map[string][]string) (eventsQuery, error) {
	eq := eventsQuery{limit: 1000}
	for k, vs := range q {
		if len(vs) != 1 {
			return eq, fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "after":
			a, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return eq, fmt.Errorf("after=%q: want a non-negative integer", v)
			}
			eq.after = a
		case "limit":
			l, err := strconv.Atoi(v)
			if err != nil || l < 1 || l > maxEventsLimit {
				return eq, fmt.Errorf("limit=%q: want an integer from 1 to %d", v, maxEventsLimit)
			}
			eq.limit = l
		case "wait_ms":
			ms, err := strconv.Atoi(v)
			if err != nil || ms < 0 || ms > 30_000 {
				return eq, fmt.Errorf("wait_ms=%q: want an integer from 0 to 30000", v)
			}
			eq.wait = time.Duration(ms) * time.Millisecond
		default:
			return eq, fmt.Errorf("unknown query parameter %q (after, limit, wait_ms)", k)
		}
	}
	return eq, nil
}

func (n *Node) handleEvents(w http.ResponseWriter, r *http.Request) {
	q, err := parseEventsQuery(r.URL.Query())
	if err != nil {
		n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
		return
	}
	evs, last := n.events.Since(q.after, q.limit)
	if len(evs) == 0 && q.wait > 0 {
		// Long poll: wait for the next event. The wait is the harness's
		// request and uses real time, not the node's skewable clock.
		t := time.NewTimer(q.wait)
		select {
		case <-n.events.Changed():
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		evs, last = n.events.Since(q.after, q.limit)
	}
	if evs == nil {
		evs = []events.Event{}
	}
	n.writeJSON(w, http.StatusOK, EventsReply{ServedBy: n.servedBy(), Events: evs, Last: last})
}

func (n *Node) handleNextID(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if err := decodeBody(r, &req); err != nil {
		n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
		return
	}
	inc := n.current()
	var proxy *singleton.Proxy
	if inc != nil {
		n.mu.Lock()
		proxy = inc.proxy
		n.mu.Unlock()
	}
	if !n.refuseUnlessReady(w) {
		return
	}
	if proxy == nil {
		n.writeError(w, http.StatusServiceUnavailable, "not-ready", peer.OutcomeFail, "the singleton proxy is not running yet")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), n.cfg.RequestTimeout)
	defer cancel()
	res, err := proxy.Call(ctx, singleton.Request{Op: "next-id"})
	if err != nil {
		switch {
		case errors.Is(err, singleton.ErrDropped):
			n.writeError(w, http.StatusServiceUnavailable, "dropped", peer.OutcomeFail, err.Error())
		case singleton.IsDefinite(err):
			n.writeError(w, http.StatusServiceUnavailable, "unavailable", peer.OutcomeFail, err.Error())
		default:
			n.writeError(w, http.StatusGatewayTimeout, "unknown-outcome", peer.OutcomeUnknown, err.Error())
		}
		return
	}
	var reply NextIDReply
	if err := json.Unmarshal(res, &reply); err != nil || reply.ID <= 0 {
		n.writeError(w, http.StatusBadGateway, "bad-singleton-reply", peer.OutcomeUnknown, fmt.Sprintf("singleton replied %s", res))
		return
	}
	reply.ServedBy = n.servedBy()
	n.writeJSON(w, http.StatusOK, reply)
}

func (n *Node) clockReply() ClockReply {
	s := n.cfg.Clock.Current()
	return ClockReply{
		ServedBy: n.servedBy(),
		OffsetMS: float64(s.Offset) / float64(time.Millisecond),
		Drift:    s.Drift,
		Now:      n.cfg.Clock.Now().Format(time.RFC3339Nano),
	}
}

func (n *Node) handleClock(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var req ClockRequest
		if err := decodeBody(r, &req); err != nil {
			n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
			return
		}
		if err := n.SetClock(req); err != nil {
			n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
			return
		}
	}
	n.writeJSON(w, http.StatusOK, n.clockReply())
}

// SetClock replaces the clock's skew.
func (n *Node) SetClock(req ClockRequest) error {
	lim := float64(clock.MaxOffset / time.Millisecond)
	if req.OffsetMS != req.OffsetMS || req.OffsetMS > lim || req.OffsetMS < -lim {
		return fmt.Errorf("offset_ms %v out of range ±%v", req.OffsetMS, lim)
	}
	s := clock.Skew{Offset: time.Duration(req.OffsetMS * float64(time.Millisecond)), Drift: req.Drift}
	if err := n.cfg.Clock.Set(s); err != nil {
		return err
	}
	n.events.Append(eventsClockChanged(s))
	return nil
}

func (n *Node) handleFilter(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var req peer.Rules
		if err := decodeBody(r, &req); err != nil {
			n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
			return
		}
		if err := validateRules(req); err != nil {
			n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
			return
		}
		n.SetFilter(req)
	}
	n.writeJSON(w, http.StatusOK, FilterReply{ServedBy: n.servedBy(), Rules: n.filter.Rules()})
}

func validateRules(r peer.Rules) error {
	if len(r.DropIn)+len(r.DropOut) > 1000 {
		return errors.New("too many filter rules (at most 1000)")
	}
	for _, list := range [][]string{r.DropIn, r.DropOut} {
		for _, a := range list {
			if _, _, err := splitHostPort(a); err != nil {
				return fmt.Errorf("filter address %q: want host:port of a peer's gossip address", a)
			}
		}
	}
	return nil
}

// SetFilter replaces the in-process packet filter's rules.
func (n *Node) SetFilter(r peer.Rules) {
	n.filter.Set(r)
	n.events.Append(eventsFilterChanged(n.filter.Rules()))
}

func (n *Node) handleLeave(w http.ResponseWriter, r *http.Request) {
	var req struct{}
	if err := decodeBody(r, &req); err != nil {
		n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
		return
	}
	if err := n.Leave(); err != nil {
		n.writeError(w, http.StatusConflict, "cannot-leave", peer.OutcomeFail, err.Error())
		return
	}
	n.writeJSON(w, http.StatusAccepted, LeaveReply{ServedBy: n.servedBy(), Status: string(cluster.StatusLeaving)})
}

func (n *Node) handleDown(w http.ResponseWriter, r *http.Request) {
	var req DownRequest
	if err := decodeBody(r, &req); err != nil {
		n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
		return
	}
	if req.Member == "" {
		n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, `"member" (a uid name@incarnation, or a node name) is required`)
		return
	}
	inc := n.current()
	if inc == nil {
		n.writeError(w, http.StatusServiceUnavailable, "not-ready", peer.OutcomeFail, "no member running")
		return
	}
	uid := req.Member
	if !strings.Contains(uid, "@") {
		// A node name: its member that is not yet downed or removed.
		uid = ""
		for _, m := range inc.cluster.Snapshot().Members {
			if m.Name == req.Member && !m.Status.Final() {
				uid = m.UID()
			}
		}
		if uid == "" {
			n.writeError(w, http.StatusNotFound, "unknown-member", peer.OutcomeFail, fmt.Sprintf("no member of node %q is up", req.Member))
			return
		}
	}
	switch err := inc.cluster.Down(uid); {
	case errors.Is(err, cluster.ErrUnknownMember):
		n.writeError(w, http.StatusNotFound, "unknown-member", peer.OutcomeFail, err.Error())
		return
	case err != nil:
		n.writeError(w, http.StatusServiceUnavailable, "not-ready", peer.OutcomeFail, err.Error())
		return
	}
	n.writeJSON(w, http.StatusAccepted, DownReply{ServedBy: n.servedBy(), Member: uid, Status: string(cluster.StatusDown)})
}

// Leave starts a graceful leave in the background: hand over, then leave.
// Run returns once the member has left.
func (n *Node) Leave() error {
	inc := n.current()
	if inc == nil {
		return errors.New("not joined yet")
	}
	switch st := inc.cluster.Snapshot().Self.Status; st {
	case cluster.StatusUp:
	case cluster.StatusLeaving:
		return nil // already on its way: leave is idempotent
	default:
		return fmt.Errorf("cannot leave while %s", st)
	}
	n.mu.Lock()
	if n.leaving {
		n.mu.Unlock()
		return nil
	}
	n.leaving = true
	n.mu.Unlock()
	go inc.leave(context.Background())
	return nil
}

func (n *Node) handleInternal(w http.ResponseWriter, r *http.Request) {
	inc := n.current()
	if inc == nil {
		n.writeError(w, http.StatusServiceUnavailable, "not-ready", peer.OutcomeFail, "no member running")
		return
	}
	if r.Method != http.MethodPost {
		n.writeError(w, http.StatusMethodNotAllowed, "method-not-allowed", peer.OutcomeFail, r.Method+" not allowed on "+r.URL.Path+" (POST)")
		return
	}
	if _, pattern := inc.mux.Handler(r); pattern == "" {
		n.writeError(w, http.StatusNotFound, "not-found", peer.OutcomeFail, "no endpoint "+r.URL.Path)
		return
	}
	inc.mux.ServeHTTP(w, r)
}

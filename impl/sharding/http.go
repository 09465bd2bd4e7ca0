package sharding

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

// routePrefix is where the node-to-node sharding endpoints live:
// POST routePrefix + {type} + "/" + {deliver | host-shard | begin-hand-off |
// hand-off}.
const routePrefix = "/internal/v1/sharding/"

// Region protocol operations (path suffixes).
const (
	opDeliver      = "deliver"
	opHostShard    = "host-shard"
	opBeginHandOff = "begin-hand-off"
	opHandOff      = "hand-off"
)

// maxBody bounds a request body.
const maxBody = 1 << 20

// ShardRequest is the body of host-shard, begin-hand-off and hand-off.
type ShardRequest struct {
	Shard string `json:"shard"`
}

// ShardAnswer is their answer. State is "hosted", "buffering" or
// "shard-stopped".
type ShardAnswer struct {
	Shard string `json:"shard"`
	State string `json:"state"`
}

// Answers of the region protocol.
const (
	StateHosted       = "hosted"
	StateBuffering    = "buffering"
	StateShardStopped = "shard-stopped"
)

func (r *Region) path(op string) string { return regionPath(r.s.TypeName, op) }

// regionPath is the endpoint op of typeName's regions.
func regionPath(typeName, op string) string {
	return routePrefix + url.PathEscape(typeName) + "/" + op
}

// router serves routePrefix for every region registered on one mux, so
// that several entity types share the prefix and every error (unknown
// type, wrong method) is answered in JSON.
type router struct {
	mu      sync.RWMutex
	regions map[string]*Region
}

// Routes registers the region's endpoints on mux:
//
//	POST /internal/v1/sharding/{type}/deliver        Message      → Reply
//	POST /internal/v1/sharding/{type}/host-shard     ShardRequest → ShardAnswer{state: hosted}
//	POST /internal/v1/sharding/{type}/begin-hand-off ShardRequest → ShardAnswer{state: buffering}
//	POST /internal/v1/sharding/{type}/hand-off       ShardRequest → ShardAnswer{state: shard-stopped}
//
// Errors are protocol.ErrorBody JSON (codes of protocol.ScopePeer); bad
// input is a 4xx with outcome "fail".
// Regions of several types may register on one mux; call Routes while
// setting the mux up, not concurrently.
func (r *Region) Routes(mux *http.ServeMux) {
	probe := &http.Request{Method: http.MethodPost, Host: "localhost", URL: &url.URL{Path: r.path(opDeliver)}}
	if h, pattern := mux.Handler(probe); pattern == routePrefix {
		if rt, ok := h.(*router); ok {
			rt.mu.Lock()
			rt.regions[r.s.TypeName] = r
			rt.mu.Unlock()
			return
		}
	}
	rt := &router{regions: map[string]*Region{r.s.TypeName: r}}
	mux.Handle(routePrefix, rt)
}

func (rt *router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rest := strings.TrimPrefix(req.URL.Path, routePrefix)
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		peer.WriteError(w, protocol.CodeNotFound, "no such endpoint: "+req.URL.Path)
		return
	}
	typ, op := rest[:i], rest[i+1:]
	rt.mu.RLock()
	r := rt.regions[typ]
	rt.mu.RUnlock()
	if r == nil {
		peer.WriteError(w, protocol.CodeNotFound, "no region for entity type "+typ+" on this node")
		return
	}
	switch op {
	case opDeliver, opHostShard, opBeginHandOff, opHandOff:
	default:
		peer.WriteError(w, protocol.CodeNotFound, "no such endpoint: "+req.URL.Path)
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		peer.WriteError(w, protocol.CodeMethodNotAllowed, "use POST")
		return
	}
	if to := req.Header.Get(peer.ToHeader); to != "" && to != r.self {
		// Meant for an earlier incarnation of this member, at the same
		// address: that region is gone, as if stopped. Acting on it would
		// host or hand off a shard the coordinator places elsewhere.
		peer.WriteError(w, protocol.CodeRegionStopped, "region "+to+" is gone; this is "+r.self)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			// The table's other status for bad-request.
			peer.WriteErrorBody(w, http.StatusRequestEntityTooLarge, protocol.ErrorBody{Code: protocol.CodeBadRequest, Error: "request body too large"})
			return
		}
		peer.WriteError(w, protocol.CodeBadJSON, "read body: "+err.Error())
		return
	}
	if op == opDeliver {
		r.serveDeliver(w, req.Context(), body)
		return
	}
	var sr ShardRequest
	if err := peer.Unmarshal(body, &sr); err != nil {
		peer.WriteError(w, protocol.CodeBadJSON, "malformed JSON: "+err.Error())
		return
	}
	if sr.Shard == "" || len(sr.Shard) > 256 {
		peer.WriteError(w, protocol.CodeBadRequest, `"shard" must be a non-empty id of at most 256 bytes`)
		return
	}
	// The coordinator's requests are the coordinator's alone: the region
	// checks the sender the guard admitted against its view.
	from, ok := peer.SenderOf(req.Context())
	if !ok {
		peer.WriteError(w, protocol.CodePeerRefused, "no member was admitted as the sender of this request")
		return
	}
	state := StateHosted
	switch op {
	case opHostShard:
		err = r.hostShard(sr.Shard, from)
	case opBeginHandOff:
		state, err = StateBuffering, r.beginHandOff(sr.Shard, from)
	case opHandOff:
		state, err = StateShardStopped, r.handOff(sr.Shard, from)
	}
	if err == nil {
		peer.WriteJSON(w, http.StatusOK, ShardAnswer{Shard: sr.Shard, State: state})
		return
	}
	code := protocol.CodeRegionStopped
	for _, c := range []struct {
		err  error
		code string
	}{
		{errNotCoordinator, protocol.CodeNotCoordinator},
		{errShardOutOfRange, protocol.CodeBadRequest},
		{errProxyOnly, protocol.CodeProxyOnly},
		{errHandingOff, protocol.CodeHandingOff},
	} {
		if errors.Is(err, c.err) {
			code = c.code
			break
		}
	}
	peer.WriteError(w, code, err.Error())
}

func (r *Region) serveDeliver(w http.ResponseWriter, ctx context.Context, body []byte) {
	var msg Message
	if err := peer.Unmarshal(body, &msg); err != nil {
		peer.WriteError(w, protocol.CodeBadJSON, "malformed JSON: "+err.Error())
		return
	}
	if msg.EntityID == "" {
		peer.WriteError(w, protocol.CodeBadRequest, `"entity_id" is required`)
		return
	}
	if r.extract(msg.EntityID) == "" {
		peer.WriteError(w, protocol.CodeBadRequest, "entity id maps to an empty shard id")
		return
	}
	rep, err := r.localDeliver(ctx, msg)
	if err == nil {
		peer.WriteJSON(w, http.StatusOK, rep)
		return
	}
	peer.WriteErrorBody(w, 0, DeliverErrorBody(err))
}

// DeliverErrorBody is how a region answers a forwarded message that failed
// (the deliver endpoint's error body, codes of protocol.ScopePeer); the
// sender reads it back with ClassifyForward. A simulation's network
// carries the same body.
func DeliverErrorBody(err error) protocol.ErrorBody {
	var ee *EntityError
	var rej *Rejection
	code := protocol.CodeTimeout
	switch {
	case errors.As(err, &rej):
		return protocol.ErrorBody{Error: err.Error(), Code: protocol.CodeEntityRejected, Reason: rej.Code}
	case errors.Is(err, ErrShardNotHere):
		code = protocol.CodeShardNotHere
	case errors.As(err, &ee):
		code = protocol.CodeEntityError
	case errors.Is(err, ErrRegionStopped):
		code = protocol.CodeRegionStopped
	case errors.Is(err, ErrEntityUnavailable):
		code = protocol.CodeEntityUnavailable
	case errors.Is(err, ErrNotDelivered):
		code = protocol.CodeNotDelivered
	}
	return protocol.ErrorBody{Error: err.Error(), Code: code}
}

package singleton

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

// routePrefix is where the node-to-node singleton endpoints live:
// POST routePrefix + {name} + "/" + {hand-over-to-me | take-over-from-me |
// hand-over-done | request}.
const routePrefix = "/internal/v1/singleton/"

// maxBody bounds a request body.
const maxBody = 1 << 20

// router serves routePrefix for every manager registered on one mux, so
// that several singletons share the prefix and every error (unknown name,
// wrong method) is answered in JSON.
type router struct {
	mu       sync.RWMutex
	managers map[string]*Manager
}

func (rt *router) add(m *Manager) {
	rt.mu.Lock()
	rt.managers[m.cfg.Name] = m
	rt.mu.Unlock()
}

func (rt *router) get(name string) *Manager {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	return rt.managers[name]
}

// Routes registers the manager's endpoints on mux:
//
//	POST /internal/v1/singleton/{name}/hand-over-to-me   {"from": uid} → {"state": "in-progress"|"done"}
//	POST /internal/v1/singleton/{name}/take-over-from-me {"from": uid} → {"state": "ack"|"ignored"}
//	POST /internal/v1/singleton/{name}/hand-over-done    {"from": uid} → {"state": "ack"}
//	POST /internal/v1/singleton/{name}/request           Request       → the instance's reply
//
// Errors are protocol.ErrorBody JSON (codes of protocol.ScopePeer). Managers of several singletons may
// register on one mux; call Routes while setting the mux up, not
// concurrently.
func (m *Manager) Routes(mux *http.ServeMux) {
	probe := &http.Request{Method: http.MethodPost, Host: "localhost", URL: &url.URL{Path: m.base + opRequest}}
	if h, pattern := mux.Handler(probe); pattern == routePrefix {
		if rt, ok := h.(*router); ok {
			rt.add(m)
			return
		}
	}
	rt := &router{managers: map[string]*Manager{}}
	rt.add(m)
	mux.Handle(routePrefix, rt)
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, routePrefix)
	name, op, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		peer.WriteError(w, protocol.CodeNotFound, "no such endpoint: "+r.URL.Path)
		return
	}
	m := rt.get(name)
	if m == nil {
		peer.WriteError(w, protocol.CodeUnknownSingleton, fmt.Sprintf("no singleton named %q on this node", name))
		return
	}
	switch op {
	case opHandOverToMe, opTakeOverFromMe, opHandOverDone, opRequest:
	default:
		peer.WriteError(w, protocol.CodeNotFound, "no such endpoint: "+r.URL.Path)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		peer.WriteError(w, protocol.CodeMethodNotAllowed, "use POST")
		return
	}
	m.serve(op, w, r)
}

func (m *Manager) serve(op string, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
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
	if op == opRequest {
		m.serveRequest(w, r, body)
		return
	}
	var fb fromBody
	if err := peer.Unmarshal(body, &fb); err != nil {
		peer.WriteError(w, protocol.CodeBadJSON, "malformed JSON: "+err.Error())
		return
	}
	if fb.From == "" {
		peer.WriteError(w, protocol.CodeBadRequest, `"from" (the sender's member uid) is required`)
		return
	}
	// The protocol acts on "from" (it hands the singleton over to it): it
	// must be the member the guard admitted the request from. A body's
	// word alone let any member name a stranger, and a hand-over to a
	// member that never answers stopped the singleton cluster-wide.
	switch sender, ok := peer.SenderOf(r.Context()); {
	case !ok:
		peer.WriteError(w, protocol.CodePeerRefused, "no member was admitted as the sender of this request")
		return
	case sender != fb.From:
		peer.WriteError(w, protocol.CodePeerRefused, fmt.Sprintf(`"from" names %s, but the request comes from %s`, fb.From, sender))
		return
	}
	rep, ok := m.ask(r, op, fb.From)
	if !ok {
		peer.WriteError(w, protocol.CodeNoManager, "singleton manager is not running")
		return
	}
	if rep.Refused != "" {
		peer.WriteError(w, protocol.CodeNotNextOldest, rep.Refused)
		return
	}
	peer.WriteJSON(w, http.StatusOK, stateBody{State: rep.Answer})
}

func (m *Manager) serveRequest(w http.ResponseWriter, r *http.Request, body []byte) {
	var req Request
	if err := peer.Unmarshal(body, &req); err != nil {
		peer.WriteError(w, protocol.CodeBadJSON, "malformed JSON: "+err.Error())
		return
	}
	res, err := m.Handle(r.Context(), req)
	if err != nil {
		peer.WriteError(w, errorCode(err), err.Error())
		return
	}
	if len(res) == 0 {
		res = json.RawMessage("null")
	}
	if !json.Valid(res) {
		peer.WriteError(w, protocol.CodeInstanceError, "instance replied with invalid JSON")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(res)
}

// ask hands a protocol message to the owner goroutine and waits for its
// answer; false if the manager is not running (or the caller went away).
func (m *Manager) ask(r *http.Request, op, from string) (Reply, bool) {
	if !m.active.Load() {
		return Reply{}, false
	}
	msg := inMsg{op: op, from: from, reply: make(chan Reply, 1)}
	select {
	case m.inbox <- msg:
	case <-r.Context().Done():
		return Reply{}, false
	case <-m.exited:
		return Reply{}, false
	}
	select {
	case rep := <-msg.reply:
		return rep, true
	case <-r.Context().Done():
		return Reply{}, false
	case <-m.exited:
		return Reply{}, false
	}
}

package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/entities"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/sharding"
)

const maxEntityIDBytes = 256

func validateEntityRequest(req EntityRequest) error {
	if !slices.Contains(EntityTypes(), req.Type) {
		return fmt.Errorf("unknown entity type %q (%s)", req.Type, strings.Join(EntityTypes(), ", "))
	}
	if req.ID == "" || len(req.ID) > maxEntityIDBytes || !utf8.ValidString(req.ID) {
		return fmt.Errorf("entity id must be 1 to %d bytes of UTF-8", maxEntityIDBytes)
	}
	if req.Op == "" {
		return errors.New("op is required")
	}
	if len(req.Sender) > 256 {
		return errors.New("sender longer than 256 bytes")
	}
	if req.Mode != "" && req.Mode != "ask" && req.Mode != "tell" {
		return fmt.Errorf("mode %q: want ask or tell", req.Mode)
	}
	return nil
}

func (n *Node) handleEntity(w http.ResponseWriter, r *http.Request) {
	var req EntityRequest
	if err := decodeBody(r, &req); err != nil {
		n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
		return
	}
	if err := validateEntityRequest(req); err != nil {
		n.writeError(w, http.StatusBadRequest, "bad-request", peer.OutcomeFail, err.Error())
		return
	}
	if !n.refuseUnlessReady(w) {
		return
	}
	t := n.current().entityType(req.Type)
	if t == nil {
		n.writeError(w, http.StatusServiceUnavailable, "not-ready", peer.OutcomeFail, "sharding is not running yet")
		return
	}
	msg := sharding.Message{EntityID: req.ID, Op: req.Op, Payload: req.Payload, Sender: req.Sender}
	if req.Mode == "tell" {
		inc := n.current()
		n.mu.Lock()
		tl := inc.tells
		n.mu.Unlock()
		if tl == nil {
			n.writeError(w, http.StatusServiceUnavailable, "not-ready", peer.OutcomeFail, "sharding is not running yet")
			return
		}
		if err := tl.enqueue(t.region, msg); err != nil {
			n.writeError(w, http.StatusServiceUnavailable, "dropped", peer.OutcomeFail, err.Error())
			return
		}
		n.writeJSON(w, http.StatusAccepted, TellReply{ServedBy: n.servedBy(), Accepted: true})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), n.cfg.RequestTimeout)
	defer cancel()
	rep, err := t.region.Deliver(ctx, msg)
	if err != nil {
		status, code, outcome := classifyEntityError(err)
		n.writeError(w, status, code, outcome, err.Error())
		return
	}
	n.writeJSON(w, http.StatusOK, EntityReply{
		ServedBy: n.servedBy(), Type: req.Type, ID: req.ID, Shard: rep.Shard, Node: rep.Node,
		EntityIncarnation: rep.EntityIncarnation, Result: rep.Payload,
	})
}

// classifyEntityError maps a delivery error to the protocol: definite
// failures are "fail", everything else "unknown".
func classifyEntityError(err error) (status int, code, outcome string) {
	var rej *sharding.Rejection
	switch {
	case errors.As(err, &rej) && rej.Code == entities.CodeBadRequest:
		return http.StatusBadRequest, "bad-request", peer.OutcomeFail
	case errors.As(err, &rej):
		return http.StatusServiceUnavailable, rej.Code, peer.OutcomeFail
	case errors.Is(err, sharding.ErrBufferFull):
		return http.StatusServiceUnavailable, "dropped", peer.OutcomeFail
	case sharding.IsDefinite(err):
		return http.StatusServiceUnavailable, "unavailable", peer.OutcomeFail
	}
	return http.StatusGatewayTimeout, "unknown-outcome", peer.OutcomeUnknown
}

// refuseUnlessReady answers for a member that cannot serve client requests
// and reports whether it may go on.
func (n *Node) refuseUnlessReady(w http.ResponseWriter) bool {
	switch st := n.selfState(); {
	case st == cluster.StatusDown:
		n.writeError(w, http.StatusServiceUnavailable, "downed", peer.OutcomeFail, "this member was downed")
	case st == cluster.StatusRemoved:
		n.writeError(w, http.StatusServiceUnavailable, "left", peer.OutcomeFail, "this member has left the cluster")
	case !ready(st) || n.current() == nil:
		n.writeError(w, http.StatusServiceUnavailable, "not-ready", peer.OutcomeFail, "this member has not joined the cluster yet")
	default:
		return true
	}
	return false
}

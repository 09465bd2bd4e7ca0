package main

import (
	"context"
	"crypto/rand"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// node is the peer's part of shardtest/1, filled into the kit: membership,
// sharding (the register type, routed by protoactor's cluster request API
// to the grain wherever disthash places it), events, and journal (the
// grains keep their events there). Nothing else is
// declared: protoactor has no member age, no coordinator or singleton, and
// the peer implements no leave, down, clock or filter.
func (p *peer) node() *kit.Node {
	return &kit.Node{
		Implementation: Implementation,
		Revision:       4, // shardtest/1 revision 4 (docs/protocol.md)
		Name:           p.set.Name,
		Incarnation:    func() string { return p.system.ID },
		View:           p.members.view,
		SelfStatus:     p.members.status,
		Entity:         p.entity,
		EntityTypes:    []string{protocol.TypeRegister},
		ShardingStatus: p.acts.status,
		Events:         p.events,
		Journal:        true,
		Detail:         p.detail,
		Log:            p.log,
	}
}

// requestResult is what a cluster request came back with.
type requestResult struct {
	resp any
	err  error
}

// entity sends one register request to its grain with cluster.Request and
// maps the grain's answer to the protocol. Only what certainly had no
// effect is a definite failure: a malformed request (refused before it is
// sent) or a grain's own definite answer (entity-stale, journal-unavailable,
// bad-request). Anything else of the framework's (a timeout, retries used
// up, an odd reply) is an unknown outcome: cluster.Request retries, so the
// grain may have acted.
func (p *peer) entity(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
	// The kit has read the op and payload (ValidateEntityRequest): a
	// malformed request is refused before anything is sent.
	var none protocol.EntityReply
	msg, err := encode(grainRequest{Request: rand.Text(), Op: req.Op, Payload: req.Payload})
	if err != nil {
		return none, kit.Errorf(protocol.CodeInternal, "%w", err)
	}
	// cluster.Request takes no context: it ends by its own timeout
	// (cluster.Config.RequestTimeoutTime, 5 s by default, per attempt). The
	// goroutine is the peer's (shutdown waits for it); the handler stops
	// waiting when ctx ends.
	done := make(chan requestResult, 1)
	p.requests.Add(1)
	go func() {
		defer p.requests.Done()
		resp, err := p.cluster.Request(req.ID, protocol.TypeRegister, msg)
		done <- requestResult{resp, err}
	}()
	var r requestResult
	select {
	case <-ctx.Done():
		return none, kit.Errorf(protocol.CodeUnknownOutcome, "no answer from register %s in time: %w", req.ID, ctx.Err())
	case r = <-done:
	}
	if r.err != nil {
		return none, kit.Errorf(protocol.CodeUnknownOutcome, "cluster request to register %s: %w", req.ID, r.err)
	}
	var rep grainReply
	if err := decode(r.resp, &rep); err != nil {
		return none, kit.Errorf(protocol.CodeUnknownOutcome, "cluster request to register %s: %w", req.ID, err)
	}
	if rep.Code != "" {
		return none, grainError(rep)
	}
	return protocol.EntityReply{Shard: "", Node: rep.Node, EntityIncarnation: rep.Incarnation, Result: rep.Result}, nil
}

// grainError is a grain's error answer for the kit: a code of shardtest/1
// keeps its outcome; any other is an unknown outcome.
func grainError(rep grainReply) error {
	if _, ok := protocol.Code(rep.Code); !ok {
		return kit.Errorf(protocol.CodeUnknownOutcome, "grain %s answered %s: %s", rep.Incarnation, rep.Code, rep.Error)
	}
	return kit.Errorf(rep.Code, "%s (grain %s)", rep.Error, rep.Incarnation)
}

// statusDetail is the peer's own part of its status.
type statusDetail struct {
	SystemID         string         `json:"system_id"`
	Address          string         `json:"address"`
	AutoManagedHosts []string       `json:"automanaged_hosts"`
	Activations      int            `json:"activations"`
	Topology         topologyDetail `json:"topology"`
}

func (p *peer) detail() any {
	return statusDetail{SystemID: p.system.ID, Address: p.members.self.GossipAddr, AutoManagedHosts: p.set.AutoManagedHosts,
		Activations: p.acts.count(), Topology: p.members.detail()}
}

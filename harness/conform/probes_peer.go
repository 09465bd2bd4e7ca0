package conform

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"

	"github.com/shardtest/shardtest/impl/node"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

// The reference node's peer-port probes: its node-to-node routes as a
// stranger (no secret) and as a stale or buggy member (the secret, a real
// member's name and address) would send them. Another implementation has
// other routes, if any, so these apply to the reference node only.

// peerNode is a reference node's member as its peer port knows it.
type peerNode struct {
	name, uid, gossip, addr string
	up                      int64
}

// ghostUID is a member no cluster has.
const ghostUID = "ghost@000000000000"

// findPeers reads, on reference nodes, every node's member and peer port
// (the status's detail names it), and the member node 0 names oldest.
// It leaves p.peers empty for another implementation.
func (p *prober) findPeers(ctx context.Context) {
	if p.caps.Implementation != node.Implementation {
		return
	}
	sts, err := p.statuses(ctx)
	if err != nil {
		return
	}
	var peers []peerNode
	for _, st := range sts {
		var d node.Detail
		b, _ := json.Marshal(st.Detail)
		if json.Unmarshal(b, &d) != nil || d.PeerAddr == "" {
			return
		}
		peers = append(peers, peerNode{name: st.Self.Name, uid: st.Self.UID, gossip: st.Self.GossipAddr, addr: d.PeerAddr, up: st.Self.UpNumber})
	}
	p.peers, p.oldest = peers, sts[0].Oldest
}

// byUID is the node whose member is uid.
func (p *prober) byUID(uid string) (peerNode, bool) {
	i := slices.IndexFunc(p.peers, func(n peerNode) bool { return n.uid == uid })
	if i < 0 {
		return peerNode{}, false
	}
	return p.peers[i], true
}

// as is the headers of a node-to-node request from member from to member
// to, with the secret ("": none sent).
func as(from, to peerNode, secret string) http.Header {
	h := http.Header{peer.MemberHeader: {from.uid}, peer.FromHeader: {from.gossip}, peer.ToHeader: {to.uid}}
	if secret != "" {
		h.Set(peer.SecretHeader, secret)
	}
	return h
}

// secret is the cluster's secret.
func (p *prober) secret() string { return p.opts.Peer.Secret }

// wrongSecrets are a request's headers h with no, an empty and a wrong
// secret, by name.
func wrongSecrets(h http.Header) map[string]http.Header {
	none, empty, wrong := h.Clone(), h.Clone(), h.Clone()
	none.Del(peer.SecretHeader)
	empty[peer.SecretHeader] = []string{""}
	wrong.Set(peer.SecretHeader, fmt.Sprintf("guess-%d", rand.Int64()))
	return map[string]http.Header{"no secret": none, "an empty secret": empty, "a wrong secret": wrong}
}

func probePeerNeedsSecret(ctx context.Context, p *prober) (string, error) {
	sp := "/internal/v1/singleton/" + protocol.IDGenerator + "/"
	sh := "/internal/v1/sharding/" + protocol.TypeRegister + "/"
	routes := []string{sp + "hand-over-to-me", sp + "take-over-from-me", sp + "hand-over-done", sp + "request",
		sh + "deliver", sh + "host-shard", sh + "begin-hand-off", sh + "hand-off",
		"/internal/v1/no-such-route", "/v1/status"}
	var errs []string
	n := 0
	for i, to := range p.peers {
		from := p.peers[(i+1)%len(p.peers)]
		for name, h := range wrongSecrets(as(from, to, "")) {
			for _, r := range routes {
				n++
				// An empty object: were the guard to admit it, the
				// handler would refuse it as bad (400), never act on it.
				if err := rawRefused(ctx, to.addr, http.MethodPost, r, h, "{}", http.StatusForbidden, protocol.CodePeerRefused); err != nil {
					errs = append(errs, name+": "+err.Error())
				}
			}
		}
	}
	return allRefused(fmt.Sprintf("%d requests (%d routes, 3 kinds of wrong secret, %d nodes): each 403 peer-refused", n, len(routes), len(p.peers)), errs)
}

func probeStreamUpgrade(ctx context.Context, p *prober) (string, error) {
	var errs []string
	n := 0
	for i, to := range p.peers {
		from := p.peers[(i+1)%len(p.peers)]
		tries := wrongSecrets(as(from, to, ""))
		delete(tries, "an empty secret")
		if p.secret() != "" {
			tries["a made-up member with the secret"] = as(peerNode{uid: ghostUID, gossip: from.gossip}, to, p.secret())
		}
		for name, h := range tries {
			n++
			h.Set("Connection", "Upgrade")
			h.Set("Upgrade", peer.StreamProtocol)
			if err := rawRefused(ctx, to.addr, http.MethodGet, peer.StreamPath, h, "", http.StatusForbidden, protocol.CodePeerRefused); err != nil {
				errs = append(errs, name+": "+err.Error())
			}
		}
	}
	return allRefused(fmt.Sprintf("%d upgrades on %d nodes: each 403 peer-refused, none upgraded", n, len(p.peers)), errs)
}

// forged is one forged member request and the refusal it must get.
type forged struct {
	what       string
	to         peerNode
	h          http.Header
	path, body string
	status     int
	code       string
}

// sendForged sends each request and checks its refusal.
func sendForged(ctx context.Context, reqs []forged) (string, error) {
	var said, errs []string
	for _, f := range reqs {
		if err := rawRefused(ctx, f.to.addr, http.MethodPost, f.path, f.h, f.body, f.status, f.code); err != nil {
			errs = append(errs, f.what+": "+err.Error())
			continue
		}
		said = append(said, fmt.Sprintf("%s: %d %s", f.what, f.status, f.code))
	}
	return strings.Join(said, "; "), joined(errs)
}

func probeForgedHandOver(ctx context.Context, p *prober) (string, error) {
	oldest, ok := p.byUID(p.oldest)
	if !ok {
		return "", fmt.Errorf("%s names %q oldest, none of the nodes", p.nodes[0].Name, p.oldest)
	}
	// The others, next oldest first.
	others := slices.DeleteFunc(slices.Clone(p.peers), func(n peerNode) bool { return n.uid == oldest.uid })
	slices.SortFunc(others, func(a, b peerNode) int { return cmp.Compare(a.up, b.up) })
	next := others[0]
	path := "/internal/v1/singleton/" + protocol.IDGenerator + "/hand-over-to-me"
	from := func(uid string) string { return fmt.Sprintf(`{"from":%q}`, uid) }
	reqs := []forged{{fmt.Sprintf("as %s (next oldest), from a ghost", next.name), oldest, as(next, oldest, p.secret()), path, from(ghostUID),
		http.StatusForbidden, protocol.CodePeerRefused}}
	if len(others) > 1 {
		third := others[1]
		reqs = append(reqs,
			forged{fmt.Sprintf("as %s, from %s", third.name, next.name), oldest, as(third, oldest, p.secret()), path, from(next.uid),
				http.StatusForbidden, protocol.CodePeerRefused},
			forged{fmt.Sprintf("as %s, from itself (not next in line)", third.name), oldest, as(third, oldest, p.secret()), path, from(third.uid),
				http.StatusConflict, protocol.CodeNotNextOldest})
	}
	ev, err := sendForged(ctx, reqs)
	if ev != "" {
		ev = fmt.Sprintf("to %s (oldest) %s", oldest.name, ev)
	}
	return ev, err
}

func probeForgedHostShard(ctx context.Context, p *prober) (string, error) {
	if !p.caps.HasEntityType(protocol.TypeRegister) {
		return "", skip("entity type register is not declared")
	}
	sts, err := p.statuses(ctx)
	if err != nil {
		return "", err
	}
	var coord peerNode
	for _, st := range sts {
		for _, t := range st.Sharding {
			if t.Type == protocol.TypeRegister && t.CoordinatorRunning {
				coord, _ = p.byUID(st.Self.UID)
			}
		}
	}
	if coord.uid == "" {
		return "", fmt.Errorf("no node says the %s coordinator runs there", protocol.TypeRegister)
	}
	// An entity whose home is not the coordinator's member: a forged
	// host-shard there would make a second home.
	base := fmt.Sprintf("probe-shard-%d-", rand.Int64())
	var id string
	var first protocol.EntityReply
	for i := range 64 {
		rep, err := p.entity(ctx, 0, protocol.TypeRegister, base+fmt.Sprint(i), protocol.OpWrite, protocol.RegisterWrite{Value: 1})
		if err != nil {
			return "", fmt.Errorf("write %s: %w", base+fmt.Sprint(i), err)
		}
		if rep.Node != coord.uid {
			id, first = base+fmt.Sprint(i), rep
			break
		}
	}
	if id == "" {
		return "", skip("64 entities all live on the coordinator's member")
	}
	home, ok := p.byUID(first.Node)
	if !ok {
		return "", fmt.Errorf("%s lives on %s, none of the nodes", id, first.Node)
	}
	sp := "/internal/v1/sharding/" + protocol.TypeRegister + "/"
	ev, err := sendForged(ctx, []forged{
		{fmt.Sprintf("host-shard %s to %s (coordinator) from %s (its home)", first.Shard, coord.name, home.name), coord, as(home, coord, p.secret()),
			sp + "host-shard", fmt.Sprintf(`{"shard":%q}`, first.Shard), http.StatusConflict, protocol.CodeNotCoordinator},
		{fmt.Sprintf("host-shard 1000000 to %s from %s (coordinator)", home.name, coord.name), home, as(coord, home, p.secret()),
			sp + "host-shard", `{"shard":"1000000"}`, http.StatusBadRequest, protocol.CodeBadRequest},
		{fmt.Sprintf("deliver %s to %s from %s", id, coord.name, home.name), coord, as(home, coord, p.secret()),
			sp + "deliver", fmt.Sprintf(`{"entity_id":%q,"op":"read"}`, id), http.StatusServiceUnavailable, protocol.CodeShardNotHere},
	})
	var errs []string
	if err != nil {
		errs = append(errs, err.Error())
	}
	for i := range p.nodes {
		rep, err := p.entity(ctx, i, protocol.TypeRegister, id, protocol.OpRead, nil)
		var res protocol.RegisterResult
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("read %s through %s: %v", id, p.nodes[i].Name, err))
		case json.Unmarshal(rep.Result, &res) != nil || res.Value == nil || *res.Value != 1:
			errs = append(errs, fmt.Sprintf("read %s through %s: %s, want value 1", id, p.nodes[i].Name, rep.Result))
		case rep.Node != first.Node || rep.EntityIncarnation != first.EntityIncarnation:
			errs = append(errs, fmt.Sprintf("read %s through %s: served by %s as %s, but written at %s as %s: a second incarnation",
				id, p.nodes[i].Name, rep.Node, rep.EntityIncarnation, first.Node, first.EntityIncarnation))
		}
	}
	if len(errs) > 0 {
		return ev, joined(errs)
	}
	return fmt.Sprintf("%s; %s read back with its one incarnation through every node", ev, id), nil
}

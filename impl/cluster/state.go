package cluster

import (
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
)

// record is what the cluster gossips about one member. Its fields merge as
// a join-semilattice, so any two nodes that have exchanged state agree:
// the status only moves forward (up → leaving → removed, or → down), and a
// member's observation of others is replaced only by a newer version from
// that same member.
type record struct {
	Member Member `json:"m"`
	Status Status `json:"s"`
	// ObsVersion orders the member's own reachability observations.
	ObsVersion uint64 `json:"ov,omitempty"`
	// Unreachable is the member's own observation: the UIDs its failure
	// detector finds unreachable.
	Unreachable []string `json:"u,omitempty"`
	// DownReason says why a down member was downed (first writer wins).
	DownReason string `json:"dr,omitempty"`
}

// statusRank orders statuses for merging. Down is the strongest: a member
// downed by anyone is down everywhere, even if it also left.
func statusRank(s Status) int {
	switch s {
	case StatusUp:
		return 1
	case StatusLeaving:
		return 2
	case StatusRemoved:
		return 3
	case StatusDown:
		return 4
	}
	return 0
}

// gossip is the whole replicated state: a record per member UID.
type gossip map[string]*record

// merge folds r into g and reports whether g changed.
func (g gossip) merge(r *record) bool {
	if r == nil || r.Member.Name == "" || r.Member.Incarnation == "" || statusRank(r.Status) == 0 {
		return false
	}
	uid := r.Member.UID()
	cur, ok := g[uid]
	if !ok {
		c := *r
		c.Unreachable = slices.Clone(r.Unreachable)
		g[uid] = &c
		return true
	}
	changed := false
	if statusRank(r.Status) > statusRank(cur.Status) {
		cur.Status = r.Status
		changed = true
	}
	if cur.Status == StatusDown && cur.DownReason == "" && r.DownReason != "" {
		cur.DownReason = r.DownReason
		changed = true
	}
	if r.ObsVersion > cur.ObsVersion {
		cur.ObsVersion = r.ObsVersion
		cur.Unreachable = slices.Clone(r.Unreachable)
		changed = true
	}
	return changed
}

// records returns the records sorted by UID, for encoding.
func (g gossip) records() []*record {
	out := make([]*record, 0, len(g))
	for _, r := range g {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Member.UID() < out[j].Member.UID() })
	return out
}

// digest summarizes g so two nodes can tell cheaply whether they differ.
func (g gossip) digest() uint64 {
	h := fnv.New64a()
	for _, r := range g.records() {
		h.Write([]byte(r.Member.UID()))
		h.Write([]byte{0, byte(statusRank(r.Status))})
		h.Write([]byte(strconv.FormatUint(r.ObsVersion, 10)))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// pruneGone keeps at most max final records; the oldest (lowest up-number)
// go first, since they are the least likely to still be gossiped about.
func (g gossip) pruneGone(max int) {
	var gone []*record
	for _, r := range g {
		if r.Status.Final() {
			gone = append(gone, r)
		}
	}
	if len(gone) <= max {
		return
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].Member.IsOlderThan(gone[j].Member) })
	for _, r := range gone[:len(gone)-max] {
		delete(g, r.Member.UID())
	}
}

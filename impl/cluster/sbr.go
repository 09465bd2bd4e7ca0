package cluster

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Downing strategies.
const (
	// KeepMajority: the side with the majority of the members survives; on
	// an exact tie, the side with the oldest member.
	KeepMajority = "keep-majority"
	// StaticQuorum: a side with at least QuorumSize members survives.
	StaticQuorum = "static-quorum"
	// KeepOldest: the side with the oldest member survives (unless the
	// oldest is alone and DownIfAlone is set).
	KeepOldest = "keep-oldest"
	// AutoDown downs whatever has been unreachable for AutoDownAfter. It
	// causes split brain under partitions and exists only as a deliberate
	// bug, to prove that checkers catch split brain.
	AutoDown = "auto-down"
)

// DowningConfig configures the split-brain resolver.
type DowningConfig struct {
	Strategy string
	// StableAfter: reachability must not have changed for this long before
	// the resolver acts.
	StableAfter time.Duration
	// DownAllWhenUnstable: if reachability keeps changing for StableAfter
	// plus this long, every member (this one included) is downed. 0 turns
	// it off.
	DownAllWhenUnstable time.Duration
	// QuorumSize for StaticQuorum.
	QuorumSize int
	// DownIfAlone for KeepOldest.
	DownIfAlone bool
	// AutoDownAfter for AutoDown.
	AutoDownAfter time.Duration
	// AllowUnsafeAutoDown must be set to use AutoDown.
	AllowUnsafeAutoDown bool
}

// Validate checks the configuration, refusing auto-down unless explicitly
// allowed.
func (c DowningConfig) Validate() error {
	switch c.Strategy {
	case KeepMajority, KeepOldest:
	case StaticQuorum:
		if c.QuorumSize < 1 {
			return fmt.Errorf("downing: static-quorum needs a quorum size of at least 1, got %d", c.QuorumSize)
		}
	case AutoDown:
		if !c.AllowUnsafeAutoDown {
			return fmt.Errorf("downing: auto-down causes split brain under partitions; it is a deliberate bug and must be enabled explicitly")
		}
		if c.AutoDownAfter <= 0 {
			return fmt.Errorf("downing: auto-down needs a positive auto-down-after, got %v", c.AutoDownAfter)
		}
		return nil
	default:
		return fmt.Errorf("downing: unknown strategy %q (want %s, %s, %s or %s)", c.Strategy, KeepMajority, StaticQuorum, KeepOldest, AutoDown)
	}
	if c.StableAfter <= 0 {
		return fmt.Errorf("downing: stable-after must be positive, got %v", c.StableAfter)
	}
	if c.DownAllWhenUnstable < 0 {
		return fmt.Errorf("downing: down-all-when-unstable must not be negative, got %v", c.DownAllWhenUnstable)
	}
	return nil
}

// view is the resolver's input: what one node knows at one moment.
type view struct {
	self string
	// members are the non-final members, self included.
	members []MemberState
	// observations are the unreachability observations gossiped by each
	// member (observer UID → subject UIDs), this node's own included.
	observations map[string][]string
}

// decision is the resolver's output.
type decision struct {
	// down are the UIDs to mark down; may include self.
	down   []string
	reason string
}

func (d decision) empty() bool { return len(d.down) == 0 }

// problem returns what the resolver must decide about: the members this
// node finds unreachable, and the indirectly connected members — those in
// a conflicting observation (an observer this node reaches that does not
// reach a subject this node reaches; both are downed, as in Akka's resolver).
// The result is sorted, so it doubles as a signature for stability.
func (v view) problem() (unreachable, indirect []string) {
	reach := map[string]bool{}
	for _, m := range v.members {
		if m.Reachable || m.UID() == v.self {
			reach[m.UID()] = true
		} else {
			unreachable = append(unreachable, m.UID())
		}
	}
	ic := map[string]bool{}
	for observer, subjects := range v.observations {
		if !reach[observer] {
			continue // a stale view from across the partition
		}
		for _, s := range subjects {
			if reach[s] {
				ic[observer] = true
				ic[s] = true
			}
		}
	}
	for u := range ic {
		indirect = append(indirect, u)
	}
	sort.Strings(unreachable)
	sort.Strings(indirect)
	return unreachable, indirect
}

// leader is the oldest member this node reaches (itself included): the one
// member of its side that takes the resolver's decisions.
func (v view) leader() string {
	var reach []MemberState
	for _, m := range v.members {
		if m.Reachable || m.UID() == v.self {
			reach = append(reach, m)
		}
	}
	return oldestOf(reach)
}

// decide applies a strategy (not auto-down, which is time-driven) to a view
// whose problem has been stable long enough.
func decide(cfg DowningConfig, v view) decision {
	unreachable, indirect := v.problem()
	if len(unreachable) == 0 && len(indirect) == 0 {
		return decision{}
	}
	if slices.Contains(indirect, v.self) {
		return v.decideUnheard(cfg)
	}
	// The strategy judges the clean partition: indirectly connected members
	// count on this side (this node reaches them); if this side survives,
	// they are downed on top of the unreachable ones, as in Akka.
	lost := map[string]bool{}
	for _, u := range unreachable {
		lost[u] = true
	}
	var mine, other []MemberState
	for _, m := range v.members {
		if lost[m.UID()] {
			other = append(other, m)
		} else {
			mine = append(mine, m)
		}
	}
	oldest := oldestOf(v.members)
	surviveMine := false
	var why string
	switch cfg.Strategy {
	case KeepMajority:
		switch {
		case 2*len(mine) > len(v.members):
			surviveMine, why = true, fmt.Sprintf("majority %d of %d", len(mine), len(v.members))
		case 2*len(mine) < len(v.members):
			why = fmt.Sprintf("minority %d of %d", len(mine), len(v.members))
		default:
			surviveMine = !lost[oldest]
			why = fmt.Sprintf("tie %d of %d, oldest %s on the %s side", len(mine), len(v.members), oldest, side(surviveMine))
		}
	case StaticQuorum:
		surviveMine = len(mine) >= cfg.QuorumSize
		why = fmt.Sprintf("%d reachable, quorum %d", len(mine), cfg.QuorumSize)
		if len(v.members) > 2*cfg.QuorumSize-1 {
			// Both sides could reach the quorum: nobody may go on.
			surviveMine = false
			why = fmt.Sprintf("%d members exceed 2*quorum-1 = %d", len(v.members), 2*cfg.QuorumSize-1)
		}
	case KeepOldest:
		oldestHere := !lost[oldest]
		surviveMine = oldestHere
		why = fmt.Sprintf("oldest %s on the %s side", oldest, side(oldestHere))
		if cfg.DownIfAlone && len(v.members) > 2 {
			if oldestHere && len(mine) == 1 {
				surviveMine, why = false, "oldest is alone here and down-if-alone is set"
			} else if !oldestHere && len(other) == 1 {
				surviveMine, why = true, "oldest is alone there and down-if-alone is set"
			}
		}
	}
	d := decision{down: slices.Clone(indirect)}
	if surviveMine {
		d.down = append(d.down, unreachable...)
		d.reason = cfg.Strategy + ": this side survives (" + why + ")"
	} else {
		for _, m := range mine {
			d.down = append(d.down, m.UID())
		}
		d.reason = cfg.Strategy + ": this side is downed (" + why + ")"
	}
	if len(indirect) > 0 {
		d.reason += "; indirectly connected: " + strings.Join(indirect, ",")
	}
	sort.Strings(d.down)
	d.down = slices.Compact(d.down)
	return d
}

// decideUnheard decides for a member that members it hears report
// unreachable: its own packets are lost on the way to them (a one-way
// partition), so what it decides about them would never reach them, and
// they will decide about it on their own. It takes their decision: for
// each such observer, the strategy is applied to the observer's view (the
// members the observer reports unreachable are its other side), and if
// that downs this member, this member downs itself — alone, at once, so
// that it has stopped before their removal margin ends. If the observers'
// side would down itself instead (it is the smaller side), this member
// waits: once they are down, its problem is gone. It never downs the
// members that cannot hear it: the decision would not reach them, and if it
// leaked it would down a healthy side.
func (v view) decideUnheard(cfg DowningConfig) decision {
	reach := map[string]bool{}
	for _, m := range v.members {
		reach[m.UID()] = m.Reachable || m.UID() == v.self
	}
	var observers []string
	for o, subjects := range v.observations {
		if o != v.self && reach[o] && slices.Contains(subjects, v.self) {
			observers = append(observers, o)
		}
	}
	sort.Strings(observers)
	for _, o := range observers {
		lost := map[string]bool{}
		for _, u := range v.observations[o] {
			lost[u] = true
		}
		theirs := view{self: o}
		for _, m := range v.members {
			theirs.members = append(theirs.members, MemberState{Member: m.Member, Status: m.Status, Reachable: !lost[m.UID()]})
		}
		if d := decide(cfg, theirs); slices.Contains(d.down, v.self) {
			return decision{down: []string{v.self}, reason: fmt.Sprintf("unheard: %s, which this member reaches, finds it unreachable, and its side decides so (%s)", o, d.reason)}
		}
	}
	return decision{}
}

// resolver is the split-brain resolver's clock-driven part: what problem it
// saw last, since when that has been stable, and since when reachability
// has kept changing. It is pure: the caller gives it the time and the view
// at each tick, and applies the decision.
type resolver struct {
	problemSig    string
	stableSince   time.Duration
	unstableSince time.Duration
	unstable      bool // unstableSince is set
}

// reset forgets the problem: a decision was applied.
func (r *resolver) reset() { r.problemSig, r.unstable = "", false }

// step judges view v at now (an Elapsed reading) under cfg (any strategy
// but auto-down): the decision this member takes now, if any.
func (r *resolver) step(cfg DowningConfig, now time.Duration, v view) decision {
	unreachable, indirect := v.problem()
	sig := strings.Join(unreachable, ",") + "|" + strings.Join(indirect, ",")
	if len(unreachable) == 0 && len(indirect) == 0 {
		r.reset()
		return decision{}
	}
	if sig != r.problemSig {
		r.problemSig, r.stableSince = sig, now
		if !r.unstable {
			r.unstableSince, r.unstable = now, true
		}
	}
	if cfg.DownAllWhenUnstable > 0 && now-r.unstableSince >= cfg.StableAfter+cfg.DownAllWhenUnstable && v.leader() == v.self {
		all := decision{reason: fmt.Sprintf("%s: reachability unstable for %v: downing every member", cfg.Strategy, (now - r.unstableSince).Round(time.Millisecond))}
		for _, m := range v.members {
			all.down = append(all.down, m.UID())
		}
		sort.Strings(all.down)
		return all
	}
	if now-r.stableSince < cfg.StableAfter {
		return decision{}
	}
	// Only the leader of this side decides, as in Akka: with one decider
	// per side, members that see the problem differently (an indirectly
	// connected member judging its peer merely unreachable) cannot race to
	// contradicting decisions. The leader is the oldest member this node
	// reaches; every member of a side agrees on it once their views agree.
	dec := decide(cfg, v)
	switch {
	case dec.empty():
	case v.leader() == v.self:
		return dec
	case slices.Contains(dec.down, v.self):
		// A decision that downs this member is safe to take alone: it
		// cannot contradict anyone's, and waiting for the leader's would
		// make this member's stop depend on the leader's decision reaching
		// it — which a one-way partition or packet loss may never let
		// happen, while the other side goes on after its removal margin.
		return decision{down: []string{v.self}, reason: dec.reason + " (this member's own part, taken without waiting for its side's leader)"}
	}
	return decision{}
}

func side(mine bool) string {
	if mine {
		return "this"
	}
	return "other"
}

func oldestOf(ms []MemberState) string {
	var o *MemberState
	for i := range ms {
		if o == nil || ms[i].IsOlderThan(o.Member) {
			o = &ms[i]
		}
	}
	if o == nil {
		return ""
	}
	return o.UID()
}

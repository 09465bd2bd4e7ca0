// Package coverage says what a run exercised: the behaviours its history,
// node events and status samples show, as a set of short strings. A valid
// verdict proves only what happened; coverage says what that was, so a
// quiet pass (nothing moved, the fault hit a node that held nothing) can be
// told from a thorough one, and an exploration campaign (harness/explore)
// can steer towards schedules that show something new.
//
// Behaviours are abstract: node identities are replaced by roles (the
// oldest member or a younger one, a coordinator's host or not) and by the
// side of the fault active at the time (docs/coverage.md has the whole
// definition). Kinds:
//
//   - fault: a fault that took effect (its full name);
//   - op: an operation's outcome (ok, fail, info with the error code) by
//     the fault active while it was in flight and the side of the node the
//     client contacted;
//   - reply: what replies show moved (an entity served by another member
//     or as a new incarnation, another singleton instance, a request
//     forwarded), by fault;
//   - event: a node event type by the role of the member that logged it
//     and the fault active then, with its side;
//   - pair, triple: happens-before sequences in the sense of Mallory
//     (greybox fuzzing of distributed systems, CCS 2023): event types (and
//     fault injects and heals) that certainly followed one another within
//     Window, on the same member or another, by the fault active at the
//     last one; triples of decisions only (isDecision).
//
// An implementation without the events capability gets the coverage its
// history alone gives (fault, op, reply, and the pairs of fault steps).
// Computing it is pure: the same recorded run gives the same set.
package coverage

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/protocol"
)

// Kinds of behaviours: a behaviour's string starts with its kind.
const (
	KindFault  = "fault"
	KindOp     = "op"
	KindReply  = "reply"
	KindEvent  = "event"
	KindPair   = "pair"
	KindTriple = "triple"
)

// Kinds lists the kinds in the order summaries show them.
func Kinds() []string {
	return []string{KindFault, KindOp, KindReply, KindEvent, KindPair, KindTriple}
}

// Window bounds a happens-before step: the later event began at most this
// long after the earlier one was over. Long enough for a failure detector's
// verdict to lead to a downing decision, short enough that what a quiet
// minute logs is not paired with everything.
const Window = 5 * time.Second

// None is the fault context of what happened while no fault held.
const None = "none"

// File is the name of a run's coverage file, beside its results.json.
const File = "coverage.json"

// Coverage is the behaviours of one run (coverage.json).
type Coverage struct {
	// Behaviours: each once, sorted.
	Behaviours []string `json:"behaviours"`
	// What it was computed from: completions of operations, node events
	// and status samples read (no events: the implementation lacks the
	// capability, or a run of an older harness).
	Completions int `json:"completions"`
	Events      int `json:"events"`
	Samples     int `json:"samples"`
	// NeverHappened are the event types the implementation's declared
	// capabilities promise (protocol.EventTypes) that no node logged;
	// Capabilities those it declared (none: not known).
	NeverHappened []string `json:"never_happened,omitempty"`
	Capabilities  []string `json:"capabilities,omitempty"`
}

// ByKind counts the behaviours of each kind.
func (c Coverage) ByKind() map[string]int {
	out := map[string]int{}
	for _, b := range c.Behaviours {
		out[Kind(b)]++
	}
	return out
}

// Kind is a behaviour's kind.
func Kind(behaviour string) string {
	k, _, _ := strings.Cut(behaviour, " ")
	return k
}

// Describe is the counts for people: "412 behaviours (3 fault, 40 op, 5
// reply, 90 event, 200 pair, 74 triple)".
func (c Coverage) Describe() string { return describe(len(c.Behaviours), c.ByKind()) }

func describe(n int, by map[string]int) string {
	var parts []string
	for _, k := range Kinds() {
		if by[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", by[k], k))
		}
	}
	s := fmt.Sprintf("%d behaviours", n)
	if n == 1 {
		s = "1 behaviour"
	}
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	return s
}

// Builder computes a run's coverage: Observe sees every history entry in
// order (one pass, beside the checkers'), Finish adds the node events and
// status samples.
type Builder struct {
	caps []string
	set  map[string]bool
	// faults are the fault windows so far, in inject order.
	faults []*window
	open   map[string]*window // by fault name, while it holds
	// invoked is each process's operation in flight: its invocation.
	invoked map[int]history.Op
	// last is each entity's (or singleton's) last reply that named
	// where it was served.
	last        map[string]history.Reply
	completions int
}

// window is a fault from its inject to its heal.
type window struct {
	fault    string
	from, to int64 // to: 0 while it holds
	side     func(node string) string
	inject   history.NemesisEntry
}

func (w *window) family() string { f, _, _ := strings.Cut(w.fault, ":"); return f }

// overlaps reports whether the fault held at some moment in [lo, hi].
func (w *window) overlaps(lo, hi int64) bool {
	return w.from <= hi && (w.to == 0 || w.to >= lo)
}

// NewBuilder returns a builder for a run of an implementation that
// declares caps (nil: not known).
func NewBuilder(caps []string) *Builder {
	return &Builder{caps: caps, set: map[string]bool{}, open: map[string]*window{},
		invoked: map[int]history.Op{}, last: map[string]history.Reply{}}
}

func (b *Builder) add(parts ...string) { b.set[strings.Join(parts, " ")] = true }

// Observe takes the next history entry.
func (b *Builder) Observe(op *history.Op) {
	switch {
	case op.Kind == history.Nemesis:
		b.nemesis(op)
	case op.Kind == history.Invoke:
		b.invoked[op.Process] = *op
	case op.Completion():
		b.completion(op)
	}
}

func (b *Builder) nemesis(op *history.Op) {
	e, ok := history.ReadNemesis([]history.Op{*op}, 0)
	if !ok {
		return
	}
	switch {
	case e.Action == history.ActionInject && !e.Failed:
		var v struct {
			Targets json.RawMessage `json:"targets"`
		}
		_ = json.Unmarshal(op.Value, &v) // unreadable targets: every side unknown
		w := &window{fault: e.Fault, from: e.Began, side: nemesis.Sides(e.Fault, v.Targets), inject: e}
		if prev := b.open[e.Fault]; prev != nil && prev.to == 0 {
			prev.to = e.Began
		}
		b.open[e.Fault] = w
		b.faults = append(b.faults, w)
		b.add(KindFault, e.Fault)
	case e.Action == history.ActionHeal:
		if w := b.open[e.Fault]; w != nil && w.to == 0 {
			w.to = e.At
		}
	}
}

// contexts are the fault contexts of something on node in [lo, hi]: each
// fault that held then as "family/side", or None.
func (b *Builder) contexts(node string, lo, hi int64) []string {
	var out []string
	for _, w := range b.faults {
		if w.overlaps(lo, hi) {
			c := w.family() + "/" + w.side(node)
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	if len(out) == 0 {
		return []string{None}
	}
	return out
}

// families are the families of the faults that held at some moment in
// [lo, hi], or None.
func (b *Builder) families(lo, hi int64) []string {
	var out []string
	for _, w := range b.faults {
		if w.overlaps(lo, hi) && !slices.Contains(out, w.family()) {
			out = append(out, w.family())
		}
	}
	if len(out) == 0 {
		return []string{None}
	}
	return out
}

func (b *Builder) completion(op *history.Op) {
	b.completions++
	inv, ok := b.invoked[op.Process]
	from := op.Time
	if ok {
		from = inv.Time
		delete(b.invoked, op.Process)
	}
	node := op.Node
	if node == "" {
		node = inv.Node
	}
	outcome := op.Kind
	if op.Kind != history.OK {
		outcome += " " + errorCode(op)
	}
	ctxs := b.contexts(node, from, op.Time)
	for _, c := range ctxs {
		b.add(KindOp, op.F, outcome, "|", c)
	}
	if op.Kind != history.OK || op.Reply == nil {
		return
	}
	r := op.Reply
	var moved []string
	switch {
	case r.EntityIncarnation != "" && op.Entity != "":
		if prev, ok := b.last[op.Entity]; ok {
			switch {
			case prev.HostNode != "" && r.HostNode != "" && memberName(prev.HostNode) != memberName(r.HostNode):
				moved = append(moved, "entity-moved")
			case prev.EntityIncarnation != r.EntityIncarnation:
				moved = append(moved, "entity-restarted")
			}
		}
		b.last[op.Entity] = *r
		if r.HostNode != "" && r.Node != "" && memberName(r.HostNode) != r.Node {
			moved = append(moved, "entity-forwarded")
		}
	case r.Singleton != "":
		key := "singleton/" + op.F
		if prev, ok := b.last[key]; ok && prev.Singleton != r.Singleton {
			moved = append(moved, "singleton-moved")
		}
		b.last[key] = *r
		if inst := memberName(r.Singleton); r.Node != "" && inst != r.Node {
			moved = append(moved, "singleton-forwarded")
		}
	}
	for _, m := range moved {
		for _, f := range b.families(from, op.Time) {
			b.add(KindReply, m, "|", f)
		}
	}
}

// errorCode is the protocol error code a failed or unknown completion
// carries ("code: message"), "no-reply" when the node never answered, or
// "other".
func errorCode(op *history.Op) string {
	if !op.Answered() {
		return "no-reply"
	}
	code, _, ok := strings.Cut(op.Error, ":")
	if !ok || code == "" || strings.ContainsFunc(code, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}) {
		return "other"
	}
	return code
}

// memberName is the node name of a member uid (name@incarnation) or of a
// singleton instance (name@incarnation#n).
func memberName(uid string) string {
	name, _, _ := strings.Cut(uid, "@")
	return name
}

// Finish adds what the node events and status samples show (either may be
// nil: not recorded) and returns the run's coverage.
func (b *Builder) Finish(events *history.Events, samples *history.Samples) Coverage {
	c := Coverage{Completions: b.completions, Capabilities: b.caps}
	var evs []history.NodeEvent
	if events != nil {
		evs = events.Events
	}
	var ss []history.StatusSample
	if samples != nil {
		ss = samples.Samples
	}
	c.Events, c.Samples = len(evs), len(ss)
	abstract := b.roles(evs, ss)
	seen := map[string]bool{}
	for _, a := range abstract {
		if a.member == "" {
			continue
		}
		seen[a.typ] = true
		for _, fc := range b.contexts(a.node, a.lo, a.hi) {
			b.add(KindEvent, a.typ, "@"+a.role, "|", fc)
		}
	}
	b.sequences(append(abstract, b.faultSteps()...))
	for _, t := range protocol.EventTypes(b.caps) {
		if !seen[t] {
			c.NeverHappened = append(c.NeverHappened, t)
		}
	}
	c.Behaviours = make([]string, 0, len(b.set))
	for k := range b.set {
		c.Behaviours = append(c.Behaviours, k)
	}
	sort.Strings(c.Behaviours)
	return c
}

// step is an abstract event: a node event with its member's role, or a
// fault's inject or heal (member "").
type step struct {
	typ          string
	role         string
	node, member string
	lo, hi       int64
	seq          uint64
	// decision: a membership, singleton or coordinator decision, or a
	// fault step: it takes part in triples (isDecision).
	decision bool
}

// faultSteps are the fault injects and heals as steps.
func (b *Builder) faultSteps() []step {
	var out []step
	for _, w := range b.faults {
		out = append(out, step{typ: "inject:" + w.family(), lo: w.inject.Began, hi: w.inject.At, decision: true})
		if w.to != 0 {
			out = append(out, step{typ: "heal:" + w.family(), lo: w.to, hi: w.to, decision: true})
		}
	}
	return out
}

// Roles of a member when it logged an event.
const (
	RoleOldest  = "oldest"
	RoleYounger = "younger"
	// RoleMember: the run does not show the member's age (no capability
	// age, or nothing said who the oldest was yet).
	RoleMember = "member"
	// RoleCoordinator is added ("oldest+coordinator") while the member
	// hosts a shard coordinator.
	RoleCoordinator = "coordinator"
)

// roles turns node events into steps with the role of the member that
// logged each: who it saw as the oldest (its oldest-changed events and its
// status samples' oldest, whichever is later) and whether it hosted a
// coordinator (coordinator-started until coordinator-stopped, or its
// samples' coordinators).
func (b *Builder) roles(evs []history.NodeEvent, ss []history.StatusSample) []step {
	byMember := map[string][]int{}
	for i := range evs {
		e := &evs[i]
		if e.Incarnation == "" || e.Type == "" {
			continue
		}
		m := e.Node + "@" + e.Incarnation
		byMember[m] = append(byMember[m], i)
	}
	samplesOf := map[string][]history.StatusSample{}
	for _, s := range ss {
		samplesOf[s.Member] = append(samplesOf[s.Member], s)
	}
	for _, list := range samplesOf {
		sort.SliceStable(list, func(i, j int) bool { return list[i].Hi < list[j].Hi })
	}
	members := make([]string, 0, len(byMember))
	for m := range byMember {
		members = append(members, m)
	}
	sort.Strings(members)
	var out []step
	for _, m := range members {
		idx := byMember[m]
		sort.SliceStable(idx, func(i, j int) bool { return evs[idx[i]].Seq < evs[idx[j]].Seq })
		samples := samplesOf[m]
		oldest := ""
		coordinators := map[string]bool{}
		next := 0
		for _, i := range idx {
			e := &evs[i]
			// Samples taken before this event apply first.
			for next < len(samples) && samples[next].Hi <= e.Lo {
				s := samples[next]
				if s.Oldest != "" {
					oldest = s.Oldest
				}
				clear(coordinators)
				for _, t := range s.Coordinators {
					coordinators[t] = true
				}
				next++
			}
			switch e.Type {
			case protocol.EventOldestChanged:
				if e.Member != "" {
					oldest = e.Member
				}
			case protocol.EventCoordinatorStarted:
				coordinators[cmpOr(e.EntityType, "?")] = true
			case protocol.EventCoordinatorStopped:
				delete(coordinators, cmpOr(e.EntityType, "?"))
				if e.EntityType == "" {
					clear(coordinators)
				}
			}
			role := RoleMember
			switch {
			case oldest == m:
				role = RoleOldest
			case oldest != "":
				role = RoleYounger
			}
			if len(coordinators) > 0 {
				role += "+" + RoleCoordinator
			}
			out = append(out, step{typ: e.Type, role: role, node: e.Node, member: m, lo: e.Lo, hi: e.Hi, seq: e.Seq,
				decision: isDecision(e.Type)})
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Relations of the two steps of a happens-before pair.
const (
	relSame  = "same"  // logged by the same member
	relOther = "other" // by another member
	relFault = "fault" // one of them is a fault step
)

// seenAt is where a step type was last seen.
type seenAt struct {
	hi  int64
	seq uint64
}

// sequences adds the pairs and the triples. Pairs: for each step, every
// step type that certainly came before it within Window (on the same
// member: an earlier sequence number; across members or with a fault
// step: its window over before this one's began), by the fault families
// that held at the later step. Triples: three decisions in a row in one
// member's log (fault steps that certainly came between them included),
// each within Window of the one before.
func (b *Builder) sequences(steps []step) {
	sort.SliceStable(steps, func(i, j int) bool {
		if steps[i].lo != steps[j].lo {
			return steps[i].lo < steps[j].lo
		}
		return steps[i].seq < steps[j].seq
	})
	w := Window.Nanoseconds()
	// last[type][member] ("" for fault steps): its latest occurrence,
	// and the one before (which may be over when the latest is not yet).
	last := map[string]map[string]*[2]*seenAt{}
	types := []string{}
	record := func(s step) {
		byM := last[s.typ]
		if byM == nil {
			byM = map[string]*[2]*seenAt{}
			last[s.typ] = byM
			types = append(types, s.typ)
		}
		two := byM[s.member]
		if two == nil {
			two = &[2]*seenAt{}
			byM[s.member] = two
		}
		two[0], two[1] = &seenAt{hi: s.hi, seq: s.seq}, two[0]
	}
	// before says whether at certainly came before s, within Window, and
	// how the two relate.
	before := func(at *seenAt, m string, s step) (string, bool) {
		if at == nil || s.lo-at.hi > w {
			return "", false
		}
		switch {
		case m == "" || s.member == "":
			return relFault, at.hi < s.lo
		case m == s.member:
			// Same member: its own order (sequence numbers) says
			// what came first, whatever the windows.
			return relSame, at.seq < s.seq
		}
		return relOther, at.hi < s.lo
	}
	for _, s := range steps {
		fams := b.families(s.lo, s.hi)
		var preds []string
		for _, t := range types {
			for _, m := range sortedKeys(last[t]) {
				two := last[t][m]
				rel, ok := before(two[0], m, s)
				if !ok {
					if rel, ok = before(two[1], m, s); !ok {
						continue
					}
				}
				pred := t + " >" + rel
				if slices.Contains(preds, pred) {
					continue
				}
				preds = append(preds, pred)
				for _, f := range fams {
					b.add(KindPair, t, ">"+rel, s.typ, "|", f)
				}
			}
		}
		record(s)
	}
	b.triples(steps)
}

// triples adds, for each member, every three decisions in a row of its
// log, with the fault steps that certainly came between them.
func (b *Builder) triples(steps []step) {
	w := Window.Nanoseconds()
	var faults []step
	byMember := map[string][]step{}
	for _, s := range steps {
		switch {
		case !s.decision:
		case s.member == "":
			faults = append(faults, s)
		default:
			byMember[s.member] = append(byMember[s.member], s)
		}
	}
	for _, m := range sortedKeys(byMember) {
		own := byMember[m]
		sort.SliceStable(own, func(i, j int) bool { return own[i].seq < own[j].seq })
		// The member's decisions with the fault steps merged in where
		// they certainly fell.
		var seq []step
		f := 0
		for _, s := range own {
			for f < len(faults) && faults[f].hi < s.lo {
				seq = append(seq, faults[f])
				f++
			}
			seq = append(seq, s)
		}
		for i := 2; i < len(seq); i++ {
			x, y, z := seq[i-2], seq[i-1], seq[i]
			if y.lo-x.hi > w || z.lo-y.hi > w || z.member == "" {
				continue
			}
			for _, fam := range b.families(z.lo, z.hi) {
				b.add(KindTriple, x.typ, ">", y.typ, ">", z.typ, "|", fam)
			}
		}
	}
}

// isDecision reports whether a step type is a decision of membership, the
// singleton managers or a coordinator's life, or a fault step: the events
// triples are made of. Triples of every event type were tried first: the
// shard, region and entity events, many per hand-off, made tens of
// thousands of triples in one run of the append workload (21,471 of its
// 22,718 behaviours), nearly all of them different in every run, so every
// run looked new and the count said little.
func isDecision(typ string) bool {
	if strings.HasPrefix(typ, "inject:") || strings.HasPrefix(typ, "heal:") {
		return true
	}
	switch typ {
	case protocol.EventMemberUnreachable, protocol.EventMemberReachable, protocol.EventMemberDowned,
		protocol.EventSelfDowned, protocol.EventDowningDecision, protocol.EventIncarnationReplaced,
		protocol.EventMemberLeaving, protocol.EventMemberRemoved, protocol.EventLeaveStarted, protocol.EventLeaveCompleted,
		protocol.EventOldestChanged, protocol.EventSingletonStarted, protocol.EventSingletonStopped, protocol.EventSingletonFailed,
		protocol.EventHandOverToMe, protocol.EventHandOverInProgress, protocol.EventHandOverDone, protocol.EventTakeOverFromMe,
		protocol.EventHandOverGaveUp, protocol.EventCoordinatorStarted, protocol.EventCoordinatorStopped:
		return true
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

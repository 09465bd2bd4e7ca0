package checker

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
)

// The node-event checkers read events.jsonl beside the history: what every
// node logged, each event with the window of harness time in which it
// certainly happened (docs/history.md), and status.jsonl: what every node's
// status said ran on it, sampled through the run. They prove that two
// instances of something that must be unique were alive at the same time.
//
// An instance started at S and ended at E (its stop, or the member being
// downed) was certainly alive from S's window's end to E's window's start.
// With no end logged (the process was killed, or the run ended), it was
// certainly alive until the start of the window of the last event its
// member logged after S: any stop would have been logged before that.
//
// Status samples are evidence of life too, so a member that goes quiet
// (logs nothing more, or never logged events) cannot hide a lasting
// duplicate: a sample taken in [lo, hi] that lists an instance proves it
// alive at some moment of that window. Where the sample names the instance
// (an entity's incarnation, a singleton's instance), every sighting of it,
// in events and samples, belongs to one life, alive from its first
// sighting's end to its last one's start (an instance never comes back once
// stopped). A sample that does not name it proves only its own window.
//
// Two instances of one key (a singleton's name, a coordinator's entity
// type, a shard, an entity) on different members whose certain lives
// overlap are a violation. Unknown is the verdict when neither events nor
// samples show any instance.

// SingletonEvents checks, from node events, that at most one instance of
// every singleton and of every entity type's shard coordinator is alive at
// a time.
type SingletonEvents struct{}

// Name implements Checker.
func (SingletonEvents) Name() string { return "singleton-events" }

// Stream implements Streamer: of the history, only the pauses count.
func (c SingletonEvents) Stream(in Inputs) Stream {
	return &outlineStream{check: func(ctx context.Context, h *history.File) Result { return c.Check(ctx, h, in) }}
}

// Check implements Checker.
func (SingletonEvents) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkLifetimes(ctx, in, "singleton-events", freezes(h), []lifeKind{
		{what: "singleton", start: "singleton-started", stops: []string{"singleton-stopped", "singleton-failed"},
			key: func(e *history.NodeEvent) string { return e.Singleton },
			sampled: func(s *history.StatusSample) []sighting {
				var out []sighting
				for _, x := range s.Singletons {
					out = append(out, sighting{key: x.Name, id: x.Instance})
				}
				return out
			}},
		{what: "coordinator", start: "coordinator-started", stops: []string{"coordinator-stopped"},
			key: func(e *history.NodeEvent) string { return e.EntityType },
			sampled: func(s *history.StatusSample) []sighting {
				var out []sighting
				for _, t := range s.Coordinators {
					out = append(out, sighting{key: t})
				}
				return out
			}},
	}, nil)
}

// HandOff checks, from node events, that a shard never lives in two
// regions at once (hand-off waits for the old region to stop it), nor an
// entity in two places, and
// reports messages regions dropped from their buffers (allowed for
// at-most-once delivery, but never hidden).
type HandOff struct{}

// Name implements Checker.
func (HandOff) Name() string { return "hand-off" }

// Stream implements Streamer: of the history, only the pauses count.
func (c HandOff) Stream(in Inputs) Stream {
	return &outlineStream{check: func(ctx context.Context, h *history.File) Result { return c.Check(ctx, h, in) }}
}

// Check implements Checker.
func (HandOff) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkLifetimes(ctx, in, "hand-off", freezes(h), []lifeKind{
		{what: "shard", start: "shard-started", stops: []string{"shard-stopped"},
			key: func(e *history.NodeEvent) string {
				if e.Shard == "" {
					return ""
				}
				return e.EntityType + "/" + e.Shard
			}},
		// The entities themselves: corroborates single-instance, which
		// sees only the incarnations that served a client.
		{what: "entity", start: "entity-started", stops: []string{"entity-stopped"},
			key: func(e *history.NodeEvent) string {
				if e.Entity == "" {
					return ""
				}
				return e.EntityType + "/" + e.Entity
			},
			id: func(e *history.NodeEvent) string { return e.EntityIncarnation },
			sampled: func(s *history.StatusSample) []sighting {
				out := make([]sighting, 0, len(s.Entities))
				for _, e := range s.Entities {
					out = append(out, sighting{key: e.Type + "/" + e.ID, id: e.Incarnation})
				}
				return out
			}},
	}, func(evs []history.NodeEvent) string {
		dropped := map[string]int{}
		total := 0
		for _, e := range evs {
			if e.Type == "buffer-dropped" {
				dropped[e.Node]++
				total++
			}
		}
		if total == 0 {
			return "no region dropped a buffered message"
		}
		var parts []string
		for n, c := range dropped {
			parts = append(parts, fmt.Sprintf("%s %d", n, c))
		}
		sort.Strings(parts)
		return fmt.Sprintf("%d buffered messages dropped by full region buffers (allowed at most once; by node: %s)", total, strings.Join(parts, ", "))
	})
}

// lifeKind is a kind of instance that must be unique per key.
type lifeKind struct {
	what  string
	start string
	stops []string
	key   func(e *history.NodeEvent) string
	// id names the instance an event is about, where the event says
	// (an entity's incarnation); "" when it does not.
	id func(e *history.NodeEvent) string
	// sampled lists the instances a status sample shows running: key and
	// id (or "" when the sample does not name the instance).
	sampled func(s *history.StatusSample) []sighting
}

// sighting is an instance a status sample lists.
type sighting struct{ key, id string }

// life is one instance's life as the events bound it: it started at some
// moment in [start.Lo, start.Hi] and was alive from then until at least
// to, where to >= start.Hi is proven by an end or a later event (to <
// start.Hi: nothing is proven beyond the start itself).
type life struct {
	key, member string
	// id names the instance, when its events or samples do.
	id       string
	from, to int64
	start    *history.NodeEvent
	end      *history.NodeEvent // nil: none logged
	last     *history.NodeEvent // the evidence for to when end is nil
	// seen is the latest status sample that listed the instance, when it
	// is the evidence for to; firstSeen the earliest, for a life known
	// only from samples (then start is that sample's window).
	seen, firstSeen *history.StatusSample
}

func (l life) String() string {
	name := l.member
	if l.id != "" {
		name += " (" + l.id + ")"
	}
	how := "until the end of what was logged"
	switch {
	case l.seen != nil:
		how = fmt.Sprintf("still listed in %s's status sampled in [%.3f s, %.3f s]", l.seen.Node, nsToSecs(l.seen.Lo), nsToSecs(l.seen.Hi))
		if l.end != nil {
			how += fmt.Sprintf(" (%s seen in [%.3f s, %.3f s])", l.end.Type, nsToSecs(l.end.Lo), nsToSecs(l.end.Hi))
		}
	case l.end != nil:
		how = fmt.Sprintf("%s seen in [%.3f s, %.3f s]", l.end.Type, nsToSecs(l.end.Lo), nsToSecs(l.end.Hi))
	case l.last != nil:
		how = fmt.Sprintf("no stop logged; %s logged %s later, in [%.3f s, %.3f s]", l.member, l.last.Type, nsToSecs(l.last.Lo), nsToSecs(l.last.Hi))
	}
	if l.firstSeen != nil {
		return fmt.Sprintf("%s listed in %s's status sampled in [%.3f s, %.3f s], %s", name, l.firstSeen.Node, nsToSecs(l.start.Lo), nsToSecs(l.start.Hi), how)
	}
	return fmt.Sprintf("%s started in [%.3f s, %.3f s], %s", name, nsToSecs(l.start.Lo), nsToSecs(l.start.Hi), how)
}

func nsToSecs(ns int64) float64 { return float64(ns) / 1e9 }

// ThawGrace is how soon after its node thaws from a freeze (a pause fault)
// an instance must be gone for its life to count as ended when the freeze
// began: a frozen process cannot act, and one that wakes up with its old
// view still lists its instances until it has read what waited in its
// sockets (its downing). What it serves in that moment the operation
// checkers judge (single-instance, linearizable, unique-ids).
const ThawGrace = 2 * time.Second

// freeze is one pause of a node: frozen from from (the inject took effect)
// until it thawed, at some moment of [thawFrom, thawTo] (the heal began,
// took effect).
type freeze struct{ from, thawFrom, thawTo int64 }

// freezes returns, per node, the pause faults that froze it.
func freezes(h *history.File) map[string][]freeze {
	out := map[string][]freeze{}
	if h == nil {
		return out
	}
	open := map[string]int64{}
	for i := range h.Ops {
		e, ok := history.ReadNemesis(h.Ops, i)
		if !ok || e.Failed || !strings.HasPrefix(e.Fault, "pause:") {
			continue
		}
		for _, n := range e.Nodes {
			switch e.Action {
			case "inject":
				open[n] = e.At
			case "heal":
				if from, ok := open[n]; ok {
					out[n] = append(out[n], freeze{from: from, thawFrom: max(e.Began, from), thawTo: e.At})
					delete(open, n)
				}
			}
		}
	}
	return out
}

// excuseFrozen ends at the freeze a life whose node froze while it lived
// and that is gone within ThawGrace of the thaw, and leaves out a life known
// only from status samples that its node may have answered within
// ThawGrace of a thaw (and none later): the sample was taken at some moment
// of its window, and if that moment may be one where the just-thawed
// process still held its old view, the sample proves nothing (found with
// four clusters on two cores, where a thawed node's status answered 3.2 s
// after the thaw, in a window that began while it was frozen). The thaw
// happened at some moment between the heal's start and its taking effect:
// a sample answered in between may be the thawed process's too (found with
// eight clusters on two cores: answered 4 ms after the heal began, 2 ms
// before it was recorded as done).
func excuseFrozen(lives []life, frozen map[string][]freeze) []life {
	kept := lives[:0]
	for i := range lives {
		l := &lives[i]
		node, _, _ := strings.Cut(l.member, "@")
		stale := false
		for _, w := range frozen[node] {
			thawEnd := w.thawTo + int64(ThawGrace)
			if l.start.Hi < w.from && l.to > w.from && l.to <= thawEnd {
				l.to = w.from
			}
			if l.firstSeen != nil && l.start.Type == "status" && l.start.Lo <= thawEnd && l.start.Hi >= w.thawFrom && l.to <= thawEnd {
				stale = true
			}
		}
		if !stale {
			kept = append(kept, *l)
		}
	}
	return kept
}

func checkLifetimes(ctx context.Context, in Inputs, name string, frozen map[string][]freeze, kinds []lifeKind, extra func([]history.NodeEvent) string) Result {
	res := Result{Checker: name}
	var events []history.NodeEvent
	switch evs := in.Events; {
	case in.EventsErr != nil:
		res.Verdict, res.Summary = Unknown, "node events unreadable: "+in.EventsErr.Error()
		return res
	case evs == nil:
		res.Evidence = append(res.Evidence, "no node events were recorded (the implementation lacks the events capability, or an older run): status samples only")
	default:
		events = evs.Events
		if evs.Truncated {
			res.Evidence = append(res.Evidence, "events.jsonl ends with a cut-off line (the harness stopped while writing it); it was left out")
		}
	}
	var samples []history.StatusSample
	switch ss := in.Samples; {
	case in.SamplesErr != nil:
		res.Evidence = append(res.Evidence, "status samples unreadable, left out: "+in.SamplesErr.Error())
	case ss == nil:
	default:
		samples = ss.Samples
		if ss.Truncated {
			res.Evidence = append(res.Evidence, "status.jsonl ends with a cut-off line; it was left out")
		}
	}
	if events == nil && samples == nil {
		res.Verdict, res.Summary = Unknown, "no node events and no status samples were recorded (the implementation lacks the events capability, or an older run)"
		return res
	}
	// Each member's events in its node's order.
	byMember := map[string][]int{}
	for i := range events {
		e := &events[i]
		if e.Incarnation == "" {
			continue
		}
		m := e.Node + "@" + e.Incarnation
		byMember[m] = append(byMember[m], i)
	}
	members := make([]string, 0, len(byMember))
	for m := range byMember {
		members = append(members, m)
	}
	sort.Strings(members)
	var violations []string
	reported := map[string]bool{}
	counted := map[string]lifeCount{}
	total := 0
	for _, k := range kinds {
		var lives []life
		for _, m := range members {
			idx := byMember[m]
			sort.Slice(idx, func(i, j int) bool { return events[idx[i]].Seq < events[idx[j]].Seq })
			open := map[string]int{} // key → position in idx of its start
			for pos, i := range idx {
				e := &events[i]
				key := k.key(e)
				switch {
				case e.Type == k.start && key != "":
					open[key] = pos
				case key != "" && slices.Contains(k.stops, e.Type), e.Type == "self-downed":
					ends := []string{key}
					if e.Type == "self-downed" {
						ends = ends[:0]
						for key := range open {
							ends = append(ends, key)
						}
					}
					for _, key := range ends {
						sp, ok := open[key]
						if !ok {
							continue
						}
						delete(open, key)
						s := &events[idx[sp]]
						lives = append(lives, life{key: key, member: m, id: k.eventID(s), from: s.Hi, to: e.Lo, start: s, end: e})
					}
				}
			}
			// Still running when the member's log ends.
			for key, sp := range open {
				s := &events[idx[sp]]
				last := &events[idx[len(idx)-1]]
				l := life{key: key, member: m, id: k.eventID(s), from: s.Hi, to: s.Hi, start: s}
				if sp < len(idx)-1 {
					l.to, l.last = last.Lo, last
				}
				lives = append(lives, l)
			}
		}
		lives = k.addSamples(lives, samples)
		lives = excuseFrozen(lives, frozen)
		counted[k.what] = countLives(lives)
		total += len(lives)
		// Per key, the lives on different members that overlap.
		sort.Slice(lives, func(i, j int) bool {
			if lives[i].key != lives[j].key {
				return lives[i].key < lives[j].key
			}
			return lives[i].start.Lo < lives[j].start.Lo
		})
		for i := 0; i < len(lives); {
			if ctx.Err() != nil {
				res.Verdict, res.Summary = Unknown, "stopped: "+ctx.Err().Error()
				return res
			}
			j := i
			for j < len(lives) && lives[j].key == lives[i].key {
				j++
			}
			for _, pr := range overlaps(lives[i:j]) {
				a, b := pr[0], pr[1]
				// One line per pair of members of a key: events and
				// samples may prove the same overlap twice.
				pair := k.what + "\x00" + a.key + "\x00" + min(a.member, b.member) + "\x00" + max(a.member, b.member)
				if reported[pair] {
					continue
				}
				reported[pair] = true
				at, _ := overlap(a, b)
				res.proven(at)
				violations = append(violations, fmt.Sprintf("%s %s: two instances alive at once (at %.3f s at the latest): %s; and %s",
					k.what, a.key, nsToSecs(at), a, b))
			}
			i = j
		}
	}
	var stats []string
	for _, k := range kinds {
		stats = append(stats, counted[k.what].describe(k.what))
	}
	summary := fmt.Sprintf("%d node events, %d status samples; %s", len(events), len(samples), strings.Join(stats, ", "))
	if extra != nil {
		note := extra(events)
		summary += "; " + note
	}
	switch {
	case len(violations) > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d overlaps; %s", len(violations), summary)
		res.Evidence = append(res.Evidence, limit(violations)...)
	case total == 0:
		// Nothing ran, as far as events and samples show: nothing was
		// shown unique.
		res.Verdict, res.Summary = Unknown, "nothing to judge: no instance seen in the node events or status samples; "+summary
	default:
		res.Verdict, res.Summary = Valid, "never two instances alive at once; "+summary
	}
	return res
}

// lifeCount is how many lives of a kind there were, as a person counts
// them (countLives).
type lifeCount struct {
	lives int
	// samplesOnly of them are known from status samples alone: no
	// logged start of theirs was seen.
	samplesOnly int
}

func (c lifeCount) describe(what string) string {
	s := fmt.Sprintf("%d %s lives", c.lives, what)
	if c.lives == 1 {
		s = fmt.Sprintf("1 %s life", what)
	}
	if c.samplesOnly > 0 {
		s += fmt.Sprintf(" (%d known only from status samples)", c.samplesOnly)
	}
	return s
}

// countLives counts the lives the judgement works with as a person would:
// each instance once. The judgement keeps every status sighting that does
// not name its instance as a life of its own, proven only in its window (a
// coordinator listed in 30 samples is 30 of them), and a life known from
// events apart from the samples that name its instance (a singleton's);
// counting those would say a coordinator lived 30 times. Here, per key and
// member, taking lives and sightings in the order their windows begin:
//
//   - every logged start is a new life, unless sightings not yet given to
//     a logged life lie just before it and the last of them ended after
//     its window began: then those sightings saw this life;
//   - a sighting belongs to the member's latest logged life before it,
//     unless that life's logged end certainly happened before the
//     sighting's window began;
//   - else it continues the member's sightings just before it (no logged
//     start or end of the key on the member between them);
//   - else it begins a life known only from samples.
//
// Instances named differently (an entity's incarnation, a singleton's
// instance) are never the same life. Only the count shown to people comes
// from here; overlaps are judged on the lives as they are.
func countLives(lives []life) lifeCount {
	type keyAt struct{ key, member string }
	groups := map[keyAt][]*life{}
	for i := range lives {
		l := &lives[i]
		groups[keyAt{l.key, l.member}] = append(groups[keyAt{l.key, l.member}], l)
	}
	var c lifeCount
	for _, g := range groups {
		sort.SliceStable(g, func(i, j int) bool {
			if g[i].start.Lo != g[j].start.Lo {
				return g[i].start.Lo < g[j].start.Lo
			}
			return g[i].firstSeen == nil && g[j].firstSeen != nil
		})
		var cur *lifeRun
		var runs []*lifeRun
		for _, l := range g {
			if cur == nil || !cur.takes(l) {
				cur = &lifeRun{}
				runs = append(runs, cur)
			}
			cur.add(l)
		}
		for _, r := range runs {
			c.lives++
			if !r.logged {
				c.samplesOnly++
			}
		}
	}
	return c
}

// lifeRun is one instance's life on one member as countLives sees it: a
// logged life and the sightings of it, or sightings alone.
type lifeRun struct {
	// logged: a logged start began it; until is then when it certainly
	// ended (its end's window's end; no end logged: never).
	logged bool
	until  int64
	// seenTo is the end of the latest sighting's window.
	seenTo int64
	// id names the instance, once a life or sighting of it does.
	id string
}

func (r *lifeRun) takes(l *life) bool {
	if r.id != "" && l.id != "" && r.id != l.id {
		return false
	}
	if l.firstSeen == nil { // a logged start
		return !r.logged && l.start.Lo <= r.seenTo
	}
	return !r.logged || l.start.Lo <= r.until
}

func (r *lifeRun) add(l *life) {
	if r.id == "" {
		r.id = l.id
	}
	if l.firstSeen == nil {
		r.logged, r.until = true, math.MaxInt64
		if l.end != nil {
			r.until = l.end.Hi
		}
	}
	if l.seen != nil {
		r.seenTo = max(r.seenTo, l.seen.Hi)
	}
}

// eventID is the instance a start event names, if the kind's events do.
func (k lifeKind) eventID(e *history.NodeEvent) string {
	if k.id == nil {
		return ""
	}
	return k.id(e)
}

// addSamples adds what the status samples show to lives: a sighting that
// names its instance extends that instance's life (or begins one, known
// from samples only); one that does not is a life proven only in its own
// window. Events win where they speak: a life whose end was logged is not
// extended past it, and a sighting that does not name its instance is left
// out once its member logged an end of that key (a status that lags its
// own events must not invent an overlap).
func (k lifeKind) addSamples(lives []life, samples []history.StatusSample) []life {
	if k.sampled == nil || len(samples) == 0 {
		return lives
	}
	type ident struct{ key, member, id string }
	type keyAt struct{ key, member string }
	byID := map[ident]int{}       // → index in lives
	firstEnd := map[keyAt]int64{} // the earliest logged end of key on member
	for i, l := range lives {
		if l.id != "" {
			byID[ident{l.key, l.member, l.id}] = i
		}
		if l.end != nil {
			ka := keyAt{l.key, l.member}
			if t, ok := firstEnd[ka]; !ok || l.end.Lo < t {
				firstEnd[ka] = l.end.Lo
			}
		}
	}
	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return samples[order[a]].Lo < samples[order[b]].Lo })
	for _, si := range order {
		s := &samples[si]
		for _, sg := range k.sampled(s) {
			window := &history.NodeEvent{Node: s.Node, Lo: s.Lo, Hi: s.Hi, Event: protocol.Event{Type: "status"}}
			if sg.id == "" {
				if t, ok := firstEnd[keyAt{sg.key, s.Member}]; ok && t <= s.Hi {
					continue
				}
				lives = append(lives, life{key: sg.key, member: s.Member, from: s.Hi, to: s.Lo, start: window, seen: s, firstSeen: s})
				continue
			}
			id := ident{sg.key, s.Member, sg.id}
			i, ok := byID[id]
			if !ok {
				byID[id] = len(lives)
				lives = append(lives, life{key: sg.key, member: s.Member, id: sg.id, from: s.Hi, to: s.Lo, start: window, seen: s, firstSeen: s})
				continue
			}
			l := &lives[i]
			if l.end == nil && s.Lo > l.to {
				l.to, l.seen = s.Lo, s
			}
		}
	}
	return lives
}

// overlap reports whether two lives certainly shared a moment, and the
// latest moment they surely did by. A life with a proven stretch
// [start.Hi, to] overlaps another such one if the stretches intersect; a
// life proven only at its start overlaps another if its whole start
// window lies inside the other's stretch (whenever it started, the other
// was alive).
func overlap(a, b *life) (int64, bool) {
	aLong, bLong := a.to > a.start.Hi, b.to > b.start.Hi
	switch {
	case aLong && bLong:
		from, to := max(a.start.Hi, b.start.Hi), min(a.to, b.to)
		return from, from < to
	case aLong:
		return b.start.Hi, a.start.Hi < b.start.Lo && b.start.Hi < a.to
	case bLong:
		return a.start.Hi, b.start.Hi < a.start.Lo && a.start.Hi < b.to
	}
	return 0, false
}

// top2 keeps the two lives with the latest proven end, on different
// members: whatever member asks, one of them is from another member.
type top2 struct{ first, second *life }

func (t *top2) add(l *life) {
	switch {
	case t.first == nil || l.to > t.first.to:
		if t.first != nil && t.first.member != l.member {
			t.second = t.first
		}
		t.first = l
	case l.member != t.first.member && (t.second == nil || l.to > t.second.to):
		t.second = l
	}
}

// other returns the kept life with the latest end not on member.
func (t *top2) other(member string) *life {
	if t.first != nil && t.first.member != member {
		return t.first
	}
	return t.second
}

// overlaps finds, among one key's lives, for each life one earlier-starting
// life of another member it provably overlaps (see overlap), in O(n log n):
// a sweep by start keeping the two latest-ending lives of distinct members.
func overlaps(lives []life) [][2]*life {
	var long, short []*life
	for i := range lives {
		l := &lives[i]
		if l.to > l.start.Hi {
			long = append(long, l)
		} else {
			short = append(short, l)
		}
	}
	sort.Slice(long, func(i, j int) bool { return long[i].start.Hi < long[j].start.Hi })
	sort.Slice(short, func(i, j int) bool { return short[i].start.Lo < short[j].start.Lo })
	var out [][2]*life
	// Two proven stretches: the later-starting one begins before the
	// other ends.
	var seen top2
	for _, l := range long {
		if o := seen.other(l.member); o != nil {
			if _, ok := overlap(o, l); ok {
				out = append(out, [2]*life{o, l})
			}
		}
		seen.add(l)
	}
	// A life proven only at its start: a stretch of another member that
	// began before that start window and ends after it.
	seen = top2{}
	k := 0
	for _, l := range short {
		for k < len(long) && long[k].start.Hi < l.start.Lo {
			seen.add(long[k])
			k++
		}
		if o := seen.other(l.member); o != nil {
			if _, ok := overlap(o, l); ok {
				out = append(out, [2]*life{o, l})
			}
		}
	}
	return out
}

package checker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/shardtest/shardtest/harness/history"
)

// The node-event checkers read events.jsonl beside the history: what every
// node logged, each event with the window of harness time in which it
// certainly happened (docs/history.md). They prove that two instances of
// something that must be unique were alive at the same time.
//
// An instance started at S and ended at E (its stop, or the member being
// downed) was certainly alive from S's window's end to E's window's start.
// With no end logged (the process was killed, or the run ended), it was
// certainly alive until the start of the window of the last event its
// member logged after S: any stop would have been logged before that.
// Two instances of one key (a singleton's name, a coordinator's entity
// type, a shard) on different members whose certain lives overlap are a
// violation. Unknown is the verdict when no events were recorded.

// SingletonEvents checks, from node events, that at most one instance of
// every singleton and of every entity type's shard coordinator is alive at
// a time.
type SingletonEvents struct{}

// Name implements Checker.
func (SingletonEvents) Name() string { return "singleton-events" }

// Check implements Checker.
func (SingletonEvents) Check(ctx context.Context, _ *history.File, dir string) Result {
	return checkLifetimes(ctx, dir, "singleton-events", []lifeKind{
		{what: "singleton", start: "singleton-started", stops: []string{"singleton-stopped", "singleton-failed"},
			key: func(e *history.NodeEvent) string { return e.Singleton }},
		{what: "coordinator", start: "coordinator-started", stops: []string{"coordinator-stopped"},
			key: func(e *history.NodeEvent) string { return e.EntityType }},
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

// Check implements Checker.
func (HandOff) Check(ctx context.Context, _ *history.File, dir string) Result {
	return checkLifetimes(ctx, dir, "hand-off", []lifeKind{
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
}

// life is one instance's life as the events bound it: it started at some
// moment in [start.Lo, start.Hi] and was alive from then until at least
// to, where to >= start.Hi is proven by an end or a later event (to <
// start.Hi: nothing is proven beyond the start itself).
type life struct {
	key, member string
	from, to    int64
	start       *history.NodeEvent
	end         *history.NodeEvent // nil: none logged
	last        *history.NodeEvent // the evidence for to when end is nil
}

func (l life) String() string {
	how := "until the end of what was logged"
	switch {
	case l.end != nil:
		how = fmt.Sprintf("%s seen in [%.3f s, %.3f s]", l.end.Type, nsToSecs(l.end.Lo), nsToSecs(l.end.Hi))
	case l.last != nil:
		how = fmt.Sprintf("no stop logged; %s logged %s later, in [%.3f s, %.3f s]", l.member, l.last.Type, nsToSecs(l.last.Lo), nsToSecs(l.last.Hi))
	}
	return fmt.Sprintf("%s started in [%.3f s, %.3f s], %s", l.member, nsToSecs(l.start.Lo), nsToSecs(l.start.Hi), how)
}

func nsToSecs(ns int64) float64 { return float64(ns) / 1e9 }

func checkLifetimes(ctx context.Context, dir, name string, kinds []lifeKind, extra func([]history.NodeEvent) string) Result {
	res := Result{Checker: name}
	evs, err := history.ReadEventsFile(filepath.Join(dir, "events.jsonl"))
	switch {
	case errors.Is(err, history.ErrNoEvents):
		res.Verdict, res.Summary = Unknown, "no node events were recorded (the implementation lacks the events capability, or an older run)"
		return res
	case err != nil:
		res.Verdict, res.Summary = Unknown, "node events unreadable: "+err.Error()
		return res
	}
	if evs.Truncated {
		res.Evidence = append(res.Evidence, "events.jsonl ends with a cut-off line (the harness stopped while writing it); it was left out")
	}
	// Each member's events in its node's order.
	byMember := map[string][]int{}
	for i := range evs.Events {
		e := &evs.Events[i]
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
	counted := map[string]int{}
	for _, k := range kinds {
		var lives []life
		for _, m := range members {
			idx := byMember[m]
			sort.Slice(idx, func(i, j int) bool { return evs.Events[idx[i]].Seq < evs.Events[idx[j]].Seq })
			open := map[string]int{} // key → position in idx of its start
			for pos, i := range idx {
				e := &evs.Events[i]
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
						s := &evs.Events[idx[sp]]
						lives = append(lives, life{key: key, member: m, from: s.Hi, to: e.Lo, start: s, end: e})
					}
				}
			}
			// Still running when the member's log ends.
			for key, sp := range open {
				s := &evs.Events[idx[sp]]
				last := &evs.Events[idx[len(idx)-1]]
				l := life{key: key, member: m, from: s.Hi, to: s.Hi, start: s}
				if sp < len(idx)-1 {
					l.to, l.last = last.Lo, last
				}
				lives = append(lives, l)
			}
		}
		counted[k.what] = len(lives)
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
				at, _ := overlap(a, b)
				violations = append(violations, fmt.Sprintf("%s %s: two instances alive at once (at %.3f s at the latest): %s; and %s",
					k.what, a.key, nsToSecs(at), a, b))
			}
			i = j
		}
	}
	var stats []string
	for _, k := range kinds {
		stats = append(stats, fmt.Sprintf("%d %s instances", counted[k.what], k.what))
	}
	summary := fmt.Sprintf("%d node events; %s", len(evs.Events), strings.Join(stats, ", "))
	if extra != nil {
		note := extra(evs.Events)
		summary += "; " + note
	}
	switch {
	case len(violations) > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d overlaps; %s", len(violations), summary)
		res.Evidence = append(res.Evidence, limit(violations)...)
	case len(evs.Events) == 0:
		res.Verdict, res.Summary = Unknown, "no node events were recorded"
	default:
		res.Verdict, res.Summary = Valid, "never two instances alive at once; "+summary
	}
	return res
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

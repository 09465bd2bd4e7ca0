package checker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
)

// AppendLog checks the append workload's logs against the last complete
// read of each log (the final phase reads every log touched):
//   - every acknowledged (ok) synchronous append is in the log, once;
//   - no (client, seq) entry appears twice (appends are never retried, and
//     tells are delivered at most once);
//   - a client's acknowledged appends that did not overlap in time are in
//     the log in the order they were made (real-time order);
//   - appends and tells with unknown outcomes, and accepted tells, may be
//     missing (tells are at most once) — counted and reported, not errors.
//
// A log with acknowledged appends but no successful read is unknown.
type AppendLog struct{}

// Name implements Checker.
func (AppendLog) Name() string { return "append-log" }

// appended is one acknowledged append, with its real-time interval.
type appended struct {
	e          protocol.LogEntry
	call, ret  int64
	inv        int64 // history index of the invocation
	tell, sure bool  // tell: fire-and-forget; sure: acknowledged append
}

// Check implements Checker.
func (c AppendLog) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, c, h, in)
}

// Stream implements Streamer: per log its appends and its last read.
func (AppendLog) Stream(Inputs) Stream {
	st := &logStream{writes: map[string][]appended{}, reads: lastReads{}, clients: map[string]string{}}
	st.pairs = newPairStream(func(op *history.Op) bool { return strings.HasPrefix(op.Entity, "log/") }, st.pair)
	return st
}

// lastLogRead is a log's read that completed last (the later invocation
// among equal times).
type lastLogRead struct {
	entries       []protocol.LogEntry
	at, call, inv int64
}

// lastReads keeps each log's last read as the pairs stream past.
type lastReads map[string]lastLogRead

// read takes an ok read of a log; an unreadable one is bad evidence.
func (r lastReads) read(inv, comp *history.Op, bad *badLines) {
	entries, why := logRead(comp)
	if why != "" {
		bad.add(inv.Index, why)
		return
	}
	if last, seen := r[inv.Entity]; seen && (comp.Time < last.at || comp.Time == last.at && inv.Index < last.inv) {
		return
	}
	r[inv.Entity] = lastLogRead{entries: entries, at: comp.Time, call: inv.Time, inv: inv.Index}
}

// sentEntry reads the entry an append or tell sends, its client interned
// in strs; an unreadable one is bad evidence.
func sentEntry(inv *history.Op, strs map[string]string, bad *badLines) (protocol.LogEntry, bool) {
	var e protocol.LogEntry
	if err := json.Unmarshal(inv.Value, &e); err != nil || e.Client == "" {
		bad.add(inv.Index, fmt.Sprintf("#%d: unreadable %s arguments %s", inv.Index, inv.F, inv.Value))
		return e, false
	}
	e.Client = intern(strs, e.Client)
	return e, true
}

// intern returns the copy of s in strs, adding it if new.
func intern(strs map[string]string, s string) string {
	if c, ok := strs[s]; ok {
		return c
	}
	strs[s] = s
	return s
}

// byInvocation sorts each list of m by invocation: pairs arrive in
// completion order, and the checks and their evidence go in invocation
// order.
func byInvocation[K comparable, V any](m map[K][]V, inv func(V) int64) {
	for _, vs := range m {
		slices.SortFunc(vs, func(a, b V) int { return cmp.Compare(inv(a), inv(b)) })
	}
}

// badLines are evidence of unreadable ops, listed in invocation order
// whatever order the pairs came in.
type badLines []badLine

type badLine struct {
	inv  int64
	line string
}

func (b *badLines) add(inv int64, line string) { *b = append(*b, badLine{inv, line}) }

func (b badLines) lines() []string {
	slices.SortStableFunc(b, func(x, y badLine) int { return cmp.Compare(x.inv, y.inv) })
	var out []string
	for _, x := range b {
		out = append(out, x.line)
	}
	return out
}

type logStream struct {
	pairs   *pairStream
	writes  map[string][]appended
	reads   lastReads
	clients map[string]string // interned client names
	bad     badLines
}

func (st *logStream) Observe(op *history.Op) { st.pairs.observe(op) }

func (st *logStream) pair(inv, comp *history.Op) {
	switch inv.F {
	case "append", "tell":
		e, ok := sentEntry(inv, st.clients, &st.bad)
		if !ok {
			return
		}
		a := appended{e: e, call: inv.Time, ret: -1, inv: inv.Index, tell: inv.F == "tell"}
		if comp != nil && comp.Kind == history.Fail {
			return // definitely not appended
		}
		if comp != nil && comp.Kind == history.OK {
			a.ret = comp.Time
			a.sure = !a.tell
		}
		st.writes[inv.Entity] = append(st.writes[inv.Entity], a)
	case "read":
		if comp == nil || comp.Kind != history.OK {
			return
		}
		st.reads.read(inv, comp, &st.bad)
	}
}

func (st *logStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	res := Result{Checker: "append-log"}
	writes := st.writes
	byInvocation(writes, func(a appended) int64 { return a.inv })
	bad := st.bad.lines()
	entities := make([]string, 0, len(writes))
	for e := range writes {
		entities = append(entities, e)
	}
	sort.Strings(entities)
	var violations, unknown []string
	var lostTells, lostUnknown, sure int
	for _, ent := range entities {
		if ctx.Err() != nil {
			res.Verdict, res.Summary = Unknown, "stopped: "+ctx.Err().Error()
			return res
		}
		ws := writes[ent]
		for _, w := range ws {
			if w.sure {
				sure++
			}
		}
		before := len(violations)
		last, ok := st.reads[ent]
		log := last.entries
		if !ok {
			for _, w := range ws {
				if w.sure {
					unknown = append(unknown, fmt.Sprintf("%s: acknowledged appends but no successful read of the log", ent))
					break
				}
			}
			continue
		}
		// Appends acknowledged after the last read was sent may be missing
		// from it: only appends completed before then must be there.
		readAt := last.call
		pos := map[protocol.LogEntry]int{}
		for i, e := range log {
			if _, dup := pos[e]; dup {
				violations = append(violations, fmt.Sprintf("%s: entry {client %s, seq %d} appears more than once", ent, e.Client, e.Seq))
				continue
			}
			pos[e] = i
		}
		var inOrder []appended
		for _, w := range ws {
			_, present := pos[w.e]
			switch {
			case w.sure && w.ret < readAt && !present:
				violations = append(violations, fmt.Sprintf("%s: acknowledged append {client %s, seq %d} (#%d) is missing from the final read", ent, w.e.Client, w.e.Seq, w.inv))
			case w.sure && present:
				inOrder = append(inOrder, w)
			case w.tell && !present:
				lostTells++
			case !w.sure && !w.tell && !present:
				lostUnknown++
			}
		}
		// Real-time order: if a completed before b was invoked, a comes first.
		sort.Slice(inOrder, func(i, j int) bool { return inOrder[i].ret < inOrder[j].ret })
		latest := -1 // the latest log position among appends completed so far
		var latestW appended
		byCall := append([]appended(nil), inOrder...)
		sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
		k := 0
		for _, b := range byCall {
			for k < len(inOrder) && inOrder[k].ret < b.call {
				if pos[inOrder[k].e] > latest {
					latest, latestW = pos[inOrder[k].e], inOrder[k]
				}
				k++
			}
			if latest >= 0 && pos[b.e] < latest {
				violations = append(violations, fmt.Sprintf("%s: append {client %s, seq %d} (#%d) completed before {client %s, seq %d} (#%d) was sent, yet comes after it in the log",
					ent, latestW.e.Client, latestW.e.Seq, latestW.inv, b.e.Client, b.e.Seq, b.inv))
			}
		}
		if len(violations) > before {
			// The read that shows a violation proves it once it completed.
			res.proven(last.at)
		}
	}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
	res.Evidence = append(res.Evidence, limit(bad)...)
	stats := fmt.Sprintf("%d logs, %d acknowledged appends; %d accepted tells and %d unknown appends not in the logs (allowed)", len(entities), sure, lostTells, lostUnknown)
	switch {
	case len(violations) > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d violations; %s", len(violations), stats)
		res.Evidence = append(res.Evidence, limit(violations)...)
	case len(entities) == 0:
		res.Verdict, res.Summary = Unknown, "nothing to check: no appends"
	case len(unknown) > 0 || len(bad) > 0:
		res.Verdict = Unknown
		res.Summary = fmt.Sprintf("no violation found, but %d logs could not be checked; %s", len(unknown), stats)
		res.Evidence = append(res.Evidence, limit(unknown)...)
	default:
		res.Verdict, res.Summary = Valid, stats
	}
	return res
}

// logRead decodes the result of a log read; why says what was wrong with
// an unreadable one, for the evidence.
func logRead(comp *history.Op) (entries []protocol.LogEntry, why string) {
	var r protocol.LogReadResult
	if err := json.Unmarshal(comp.Value, &r); err != nil {
		return nil, fmt.Sprintf("#%d: unreadable read result %s", comp.Index, comp.Value)
	}
	return r.Entries, ""
}

func limit(lines []string) []string {
	if len(lines) > maxEvidence {
		return append(lines[:maxEvidence:maxEvidence], fmt.Sprintf("... and %d more", len(lines)-maxEvidence))
	}
	return lines
}

package checker

import (
	"context"
	"encoding/json"
	"fmt"
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
func (AppendLog) Check(ctx context.Context, h *history.File, _ string) Result {
	res := Result{Checker: "append-log"}
	p := pairOps(h.Ops, func(op *history.Op) bool { return strings.HasPrefix(op.Entity, "log/") })
	writes := map[string][]appended{}
	lastRead := map[string][]protocol.LogEntry{}
	lastReadAt := map[string]int64{}   // completion of the last read
	lastReadCall := map[string]int64{} // and its invocation
	var bad []string
	for _, pr := range p.pairs {
		inv := h.Ops[pr.inv]
		var comp *history.Op
		if pr.comp >= 0 {
			comp = &h.Ops[pr.comp]
		}
		switch inv.F {
		case "append", "tell":
			var e protocol.LogEntry
			if err := json.Unmarshal(inv.Value, &e); err != nil || e.Client == "" {
				bad = append(bad, fmt.Sprintf("#%d: unreadable %s arguments %s", inv.Index, inv.F, inv.Value))
				continue
			}
			a := appended{e: e, call: inv.Time, ret: -1, inv: inv.Index, tell: inv.F == "tell"}
			if comp != nil && comp.Kind == history.Fail {
				continue // definitely not appended
			}
			if comp != nil && comp.Kind == history.OK {
				a.ret = comp.Time
				a.sure = !a.tell
			}
			writes[inv.Entity] = append(writes[inv.Entity], a)
		case "read":
			if comp == nil || comp.Kind != history.OK {
				continue
			}
			entries, why := logRead(comp)
			if why != "" {
				bad = append(bad, why)
				continue
			}
			if comp.Time >= lastReadAt[inv.Entity] {
				lastRead[inv.Entity], lastReadAt[inv.Entity], lastReadCall[inv.Entity] = entries, comp.Time, inv.Time
			}
		}
	}
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
		log, ok := lastRead[ent]
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
		readAt := lastReadCall[ent]
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
			res.proven(lastReadAt[ent])
		}
	}
	res.Evidence = append(res.Evidence, truncatedNote(h)...)
	res.Evidence = append(res.Evidence, p.evidence(h.Ops)...)
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

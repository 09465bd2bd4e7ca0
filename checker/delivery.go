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

// Delivery checks the deliver workload's guarantees (docs/protocol.md):
//   - at least once: a message whose send was acknowledged (the sender
//     stored it) is in its target log, once the sender's final flush found
//     nothing unconfirmed and the log was read after that;
//   - effectively once: a message sent with de-duplication is there at most
//     once (so exactly once when acknowledged); without it, duplicates are
//     allowed and counted;
//   - a send that definitely failed is never delivered, and nothing that
//     was never sent appears.
//
// A sender whose flush did not settle, or a log never read after it, makes
// the verdict unknown for its messages, never valid by default.
type Delivery struct{}

// Name implements Checker.
func (Delivery) Name() string { return "delivery" }

type msgKey struct {
	client string
	seq    int64
}

// Check implements Checker.
func (d Delivery) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, d, h, in)
}

// Stream implements Streamer: it keeps the sends, flushes and reads of the
// deliver workload (and nothing else of the history) and judges them in
// invocation order, since a sender's flushes settle it in that order.
func (Delivery) Stream(Inputs) Stream {
	st := &deliveryStream{}
	st.pairs = newPairStream(func(op *history.Op) bool {
		return strings.HasPrefix(op.Entity, "sender/") || strings.HasPrefix(op.Entity, "log/d")
	}, st.pair)
	return st
}

// heldPair is an invocation and its completion (nil: none), copied.
type heldPair struct {
	inv  history.Op
	comp *history.Op
}

type deliveryStream struct {
	pairs *pairStream
	held  []heldPair
}

func (st *deliveryStream) Observe(op *history.Op) { st.pairs.observe(op) }

func (st *deliveryStream) pair(inv, comp *history.Op) {
	p := heldPair{inv: *inv}
	if comp != nil {
		c := *comp
		p.comp = &c
	}
	st.held = append(st.held, p)
}

func (st *deliveryStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	slices.SortFunc(st.held, func(a, b heldPair) int { return cmp.Compare(a.inv.Index, b.inv.Index) })
	res := Result{Checker: "delivery"}
	type sent struct {
		m      protocol.SenderSend
		kind   string // ok, fail, info ("" never completed)
		inv    int64
		sender string
	}
	sends := map[msgKey]*sent{}
	settledAt := map[string]int64{} // sender → completion of a flush that found nothing unconfirmed
	unsettled := map[string]bool{}
	lastRead := map[string][]protocol.LogEntry{}
	readCall := map[string]int64{}
	readDone := map[string]int64{} // completion of the read in lastRead
	var bad, violations []string
	for _, pr := range st.held {
		inv, comp := pr.inv, pr.comp
		switch inv.F {
		case "send":
			var m protocol.SenderSend
			if err := json.Unmarshal(inv.Value, &m); err != nil || m.Client == "" || m.To == "" {
				bad = append(bad, fmt.Sprintf("#%d: unreadable send arguments %s", inv.Index, inv.Value))
				continue
			}
			s := &sent{m: m, inv: inv.Index, sender: inv.Entity}
			if comp != nil {
				s.kind = comp.Kind
			}
			k := msgKey{m.Client, m.Seq}
			if prev, dup := sends[k]; dup {
				bad = append(bad, fmt.Sprintf("#%d: message {client %s, seq %d} sent twice (also #%d)", inv.Index, m.Client, m.Seq, prev.inv))
			}
			sends[k] = s
		case "flush":
			if comp == nil || comp.Kind != history.OK {
				unsettled[inv.Entity] = true
				continue
			}
			var r struct {
				Unconfirmed *int `json:"unconfirmed"`
			}
			if err := json.Unmarshal(comp.Value, &r); err != nil || r.Unconfirmed == nil {
				bad = append(bad, fmt.Sprintf("#%d: unreadable flush result %s", comp.Index, comp.Value))
				continue
			}
			if *r.Unconfirmed == 0 {
				settledAt[inv.Entity] = comp.Time
				delete(unsettled, inv.Entity)
			} else if _, ok := settledAt[inv.Entity]; !ok {
				unsettled[inv.Entity] = true
			}
		case "read":
			if comp == nil || comp.Kind != history.OK {
				continue
			}
			entries, why := logRead(comp)
			if why != "" {
				bad = append(bad, why)
				continue
			}
			if inv.Time >= readCall[inv.Entity] {
				lastRead[inv.Entity], readCall[inv.Entity], readDone[inv.Entity] = entries, inv.Time, comp.Time
			}
		}
	}
	if ctx.Err() != nil {
		res.Verdict, res.Summary = Unknown, "stopped: "+ctx.Err().Error()
		return res
	}
	// Occurrences of every message in its log's last read.
	count := map[msgKey]int{}
	logs := make([]string, 0, len(lastRead))
	for l := range lastRead {
		logs = append(logs, l)
	}
	sort.Strings(logs)
	for _, l := range logs {
		for _, e := range lastRead[l] {
			k := msgKey{e.Client, e.Seq}
			count[k]++
			s, ok := sends[k]
			switch {
			case !ok:
				if count[k] == 1 {
					violations = append(violations, fmt.Sprintf("%s: {client %s, seq %d} is in the log but was never sent", l, e.Client, e.Seq))
					res.proven(readDone[l])
				}
			case "log/"+s.m.To != l:
				if count[k] == 1 {
					violations = append(violations, fmt.Sprintf("%s: {client %s, seq %d} (send #%d) was sent to %s", l, e.Client, e.Seq, s.inv, s.m.To))
					res.proven(readDone[l])
				}
			}
		}
	}
	keys := make([]msgKey, 0, len(sends))
	for k := range sends {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].client != keys[j].client {
			return keys[i].client < keys[j].client
		}
		return keys[i].seq < keys[j].seq
	})
	var acked, delivered, duplicates, undecided int
	var undecidedWhy []string
	for _, k := range keys {
		s := sends[k]
		n := count[k]
		log := "log/" + s.m.To
		if s.kind == history.Fail && n > 0 {
			violations = append(violations, fmt.Sprintf("%s: {client %s, seq %d}: the send (#%d) definitely failed, yet the log has it %d times", log, k.client, k.seq, s.inv, n))
			res.proven(readDone[log])
		}
		if n > 1 {
			if s.m.Dedup {
				violations = append(violations, fmt.Sprintf("%s: {client %s, seq %d} (send #%d, de-duplicated) is in the log %d times: not effectively once", log, k.client, k.seq, s.inv, n))
				res.proven(readDone[log])
			} else {
				duplicates += n - 1
			}
		}
		if s.kind != history.OK {
			continue
		}
		acked++
		if n > 0 {
			delivered++
			continue
		}
		at, settled := settledAt[s.sender]
		read, wasRead := readCall[log]
		switch {
		case settled && wasRead && read > at:
			violations = append(violations, fmt.Sprintf("%s: {client %s, seq %d}: the send (#%d) was acknowledged and its sender %s flushed with nothing unconfirmed, yet the log read after that lacks it: lost", log, k.client, k.seq, s.inv, s.sender))
			res.proven(readDone[log])
		default:
			undecided++
			why := fmt.Sprintf("%s: {client %s, seq %d} (send #%d) not in the log, but ", log, k.client, k.seq, s.inv)
			switch {
			case !settled:
				why += "its sender " + s.sender + " never flushed with nothing unconfirmed"
			default:
				why += "the log was not read after the sender's flush"
			}
			undecidedWhy = append(undecidedWhy, why)
		}
	}
	st.held = nil
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
	res.Evidence = append(res.Evidence, limit(bad)...)
	stats := fmt.Sprintf("%d sends (%d acknowledged, %d of them found in their logs), %d duplicate deliveries without de-duplication (allowed)", len(sends), acked, delivered, duplicates)
	switch {
	case len(violations) > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d delivery violations; %s", len(violations), stats)
		res.Evidence = append(res.Evidence, limit(violations)...)
	case len(sends) == 0:
		res.Verdict, res.Summary = Unknown, "nothing to check: no sends"
	case acked == 0:
		// Nothing was promised, so nothing can be shown kept (a node that
		// refuses every send must not pass as a reliable one).
		res.Verdict, res.Summary = Unknown, "nothing to judge: no send was acknowledged; "+stats
	case undecided > 0 || len(bad) > 0:
		res.Verdict = Unknown
		res.Summary = fmt.Sprintf("no violation found, but %d acknowledged messages could not be judged; %s", undecided, stats)
		res.Evidence = append(res.Evidence, limit(undecidedWhy)...)
	default:
		res.Verdict, res.Summary = Valid, "every acknowledged message delivered, de-duplicated ones exactly once; "+stats
	}
	return res
}

package checker

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
)

// SenderOrder checks per-sender ordering on the append workload's logs:
//   - fire-and-forget tells from one sender to one entity that went through
//     the same region (the same node incarnation accepted them) are
//     processed in the order they were sent. That is the guarantee sharding
//     gives (Akka: per sender, per region), and what buffering during a
//     hand-off or while a shard's home is looked up must keep. Tells through
//     different regions, or through a region that restarted in between, may
//     overtake each other, and so may a tell and a later ask (an ask has a
//     sender of its own, as in Akka);
//   - a message the sender sent after one of its appends was acknowledged
//     comes after that append in the log (cause before effect), whatever
//     path either took.
//
// Messages with unknown outcomes constrain nothing: the region that took
// them, if any, is unknown.
//
// The order a log processed its entries is the last complete read of it
// (the final phase reads every log touched). A sender sends one message
// at a time, so its send order is its invocation order.
type SenderOrder struct{}

// Name implements Checker.
func (SenderOrder) Name() string { return "sender-order" }

// sent is one accepted message of a sender.
type sent struct {
	e    protocol.LogEntry
	call int64 // invocation time: the send order
	ret  int64 // completion time
	inv  int64 // history index of the invocation
	f    string
	via  string // the node incarnation that accepted it
}

// Check implements Checker.
func (c SenderOrder) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, c, h, in)
}

// senderKey is a sender to one log.
type senderKey struct{ entity, client string }

// Stream implements Streamer: per log and sender its accepted messages,
// and per log its last read.
func (SenderOrder) Stream(Inputs) Stream {
	st := &senderStream{bySender: map[senderKey][]sent{}, reads: lastReads{}, strs: map[string]string{}}
	st.pairs = newPairStream(func(op *history.Op) bool { return strings.HasPrefix(op.Entity, "log/") }, st.pair)
	return st
}

type senderStream struct {
	pairs    *pairStream
	bySender map[senderKey][]sent
	reads    lastReads
	strs     map[string]string // interned clients and incarnations
	bad      badLines
}

func (st *senderStream) Observe(op *history.Op) { st.pairs.observe(op) }

func (st *senderStream) pair(inv, comp *history.Op) {
	if comp == nil || comp.Kind != history.OK {
		return
	}
	switch inv.F {
	case "append", "tell":
		e, ok := sentEntry(inv, st.strs, &st.bad)
		if !ok {
			return
		}
		via := inv.Node
		if comp.Reply != nil && comp.Reply.Incarnation != "" {
			via = intern(st.strs, comp.Reply.Node+"@"+comp.Reply.Incarnation)
		}
		k := senderKey{inv.Entity, e.Client}
		st.bySender[k] = append(st.bySender[k], sent{e: e, call: inv.Time, ret: comp.Time, inv: inv.Index, f: inv.F, via: via})
	case "read":
		st.reads.read(inv, comp, &st.bad)
	}
}

func (st *senderStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	res := Result{Checker: "sender-order"}
	bySender := st.bySender
	byInvocation(bySender, func(m sent) int64 { return m.inv })
	bad := st.bad.lines()
	keys := make([]senderKey, 0, len(bySender))
	for k := range bySender {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].entity != keys[j].entity {
			return keys[i].entity < keys[j].entity
		}
		return keys[i].client < keys[j].client
	})
	positions := map[string]map[protocol.LogEntry]int{}
	var violations []string
	checkedPaths, checkedMsgs, unread := 0, 0, 0
	for _, k := range keys {
		if ctx.Err() != nil {
			res.Verdict, res.Summary = Unknown, "stopped: "+ctx.Err().Error()
			return res
		}
		last, ok := st.reads[k.entity]
		log := last.entries
		if !ok {
			unread++
			continue
		}
		pos, ok := positions[k.entity]
		if !ok {
			pos = make(map[protocol.LogEntry]int, len(log))
			for i, e := range log {
				if _, dup := pos[e]; !dup {
					pos[e] = i
				}
			}
			positions[k.entity] = pos
		}
		msgs := bySender[k]
		sort.Slice(msgs, func(i, j int) bool { return msgs[i].call < msgs[j].call })
		nViolations := len(violations)
		describe := func(m *sent) string { return fmt.Sprintf("seq %d (%s #%d via %s)", m.e.Seq, m.f, m.inv, m.via) }
		// Tells through one region: in send order, their log positions
		// must rise.
		paths := map[string]bool{}
		lastTell := map[string]*sent{} // via → the tell furthest in the log so far
		// Acknowledged appends: the one furthest in the log among those
		// acknowledged before the current message was sent.
		acked := []*sent{}
		for i := range msgs {
			if msgs[i].f == "append" {
				acked = append(acked, &msgs[i])
			}
		}
		sort.Slice(acked, func(i, j int) bool { return acked[i].ret < acked[j].ret })
		var before *sent
		next := 0
		for i := range msgs {
			m := &msgs[i]
			for next < len(acked) && acked[next].ret < m.call {
				if a := acked[next]; before == nil || posOr(pos, a.e) > posOr(pos, before.e) {
					before = a
				}
				next++
			}
			at, present := pos[m.e]
			if !present {
				continue // lost: allowed for tells; the append-log checker judges appends
			}
			checkedMsgs++
			if before != nil && posOr(pos, before.e) > at {
				violations = append(violations, fmt.Sprintf("%s: sender %s sent %s after %s was acknowledged, yet the log has it first (position %d before %d)",
					k.entity, k.client, describe(m), describe(before), at, posOr(pos, before.e)))
			}
			if m.f != "tell" {
				continue
			}
			paths[m.via] = true
			if prev := lastTell[m.via]; prev != nil && at < pos[prev.e] {
				violations = append(violations, fmt.Sprintf("%s: sender %s told %s before %s through the same region, yet the log has them the other way round (positions %d, %d)",
					k.entity, k.client, describe(prev), describe(m), pos[prev.e], at))
			}
			if prev := lastTell[m.via]; prev == nil || at > pos[prev.e] {
				lastTell[m.via] = m
			}
		}
		if len(violations) > nViolations {
			// The read that shows it proves it once it completed.
			res.proven(last.at)
		}
		checkedPaths += len(paths)
	}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
	res.Evidence = append(res.Evidence, limit(bad)...)
	stats := fmt.Sprintf("%d sender→entity tell paths (per accepting region), %d accepted messages found in the logs", checkedPaths, checkedMsgs)
	switch {
	case len(violations) > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d messages processed out of send order; %s", len(violations), stats)
		res.Evidence = append(res.Evidence, limit(violations)...)
	case checkedMsgs == 0:
		res.Verdict, res.Summary = Unknown, "nothing to check: no accepted message found in a read log"
	case len(bad) > 0 || unread > 0:
		res.Verdict = Unknown
		res.Summary = fmt.Sprintf("no reordering found, but %d paths lead to logs never read and %d entries were unreadable; %s", unread, len(bad), stats)
	default:
		res.Verdict, res.Summary = Valid, "every sender's messages in send order; "+stats
	}
	return res
}

// posOr is e's position in the log, or -1 if it is not there (a lost
// append constrains nothing here).
func posOr(pos map[protocol.LogEntry]int, e protocol.LogEntry) int {
	if at, ok := pos[e]; ok {
		return at
	}
	return -1
}

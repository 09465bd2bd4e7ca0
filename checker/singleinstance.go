package checker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/shardtest/shardtest/history"
)

// SingleInstance checks that at most one incarnation of each entity, and
// one instance of the singleton, is alive at a time, from the client
// history alone: every ok reply names who served it (Reply.EntityIncarnation
// for an entity op, Reply.Singleton for next-id). An incarnation never comes
// back once another has taken over, so if ops served by X completed before
// an op served by Y was invoked, and were invoked after it completed, X and
// Y were alive at the same time. Only ok ops count: fail, info and
// unfinished ops name no server. Tells are skipped: their ok is the node
// accepting the message, not the entity handling it. O(n log n).
type SingleInstance struct{}

// Name implements Checker.
func (SingleInstance) Name() string { return "single-instance" }

// singletonKey groups the singleton's ops, beside the entity names.
const singletonKey = "singleton"

// servedOp is an ok op and who served it: key and inst index the key
// names and the spans.
type servedOp = okServed

// instSpan is what an instance's ops prove about its life: it was alive
// at its first op's completion and at its last op's invocation.
type instSpan struct {
	name               string
	key                int32
	firstRet, lastCall int64
	firstOp, lastOp    int // indexes into the served ops
}

// instanceOf names the key and instance that served an ok completion, or
// returns ok false when it names none (or the op proves nothing).
func instanceOf(inv, comp *history.Op) (key, inst string, ok bool) {
	if comp.Reply == nil || inv.F == "tell" {
		return "", "", false
	}
	switch {
	case inv.Entity != "":
		return inv.Entity, comp.Reply.EntityIncarnation, comp.Reply.EntityIncarnation != ""
	case inv.F == "next-id":
		return singletonKey, comp.Reply.Singleton, comp.Reply.Singleton != ""
	}
	return "", "", false
}

// Check implements Checker.
func (s SingleInstance) Check(ctx context.Context, h *history.File, outDir string) Result {
	return checkInMemory(ctx, s, h, outDir)
}

// Stream implements Streamer: every ok op that names its server, in a
// few words each.
func (s SingleInstance) Stream(string) Stream {
	st := &siStream{firstUnnamed: -1, insts: map[instID]int32{}}
	st.pairs = newPairStream(func(op *history.Op) bool { return op.Entity != "" || op.F == "next-id" }, st.pair)
	return st
}

// okServed is an ok op as the stream keeps it (40 bytes): key and inst
// number the stream's keys and instances in the order it met them.
type okServed struct {
	call, ret int64
	inv, comp opRef
	key, inst int32
}

type siStream struct {
	pairs        *pairStream
	ok           []okServed
	keys         idTable
	insts        map[instID]int32
	instNames    []string
	unnamed      int // ok ops that named no server
	firstUnnamed opRef
}

func (st *siStream) Observe(op *history.Op) { st.pairs.observe(op) }

func (st *siStream) pair(inv, comp *history.Op) {
	if comp == nil || comp.Kind != history.OK {
		return
	}
	key, inst, ok := instanceOf(inv, comp)
	if !ok {
		if inv.F != "tell" {
			st.unnamed++
			if st.firstUnnamed < 0 {
				st.firstUnnamed = comp.Index
			}
		}
		return
	}
	k := st.keys.id(key)
	id := instID{int(k), inst}
	x, found := st.insts[id]
	if !found {
		x = int32(len(st.instNames))
		st.insts[id] = x
		st.instNames = append(st.instNames, inst)
	}
	st.ok = append(st.ok, okServed{call: inv.Time, ret: max(comp.Time, inv.Time), inv: inv.Index, comp: comp.Index, key: k, inst: x})
}

func (st *siStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	res := Result{Checker: SingleInstance{}.Name(), Verdict: Unknown}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
	// In invocation order, as the ops were numbered before streaming.
	slices.SortFunc(st.ok, func(a, b okServed) int { return cmp.Compare(a.inv, b.inv) })
	// Keys and instances numbered again, in place, in the order of their
	// first op's invocation, as the sweep and its evidence expect.
	var (
		served   = st.ok
		spans    []instSpan
		keyNames []string
		keyIDs   = slices.Repeat([]int32{-1}, len(st.keys.names))
		instIDs  = slices.Repeat([]int32{-1}, len(st.instNames))
	)
	for n := range served {
		o := &served[n]
		k := keyIDs[o.key]
		if k < 0 {
			k = int32(len(keyNames))
			keyIDs[o.key] = k
			keyNames = append(keyNames, st.keys.names[o.key])
		}
		x := instIDs[o.inst]
		if x < 0 {
			x = int32(len(spans))
			instIDs[o.inst] = x
			spans = append(spans, instSpan{name: st.instNames[o.inst], key: k, firstOp: -1, lastOp: -1})
		}
		o.key, o.inst = k, x
		sp := &spans[x]
		if sp.firstOp < 0 || o.ret < sp.firstRet {
			sp.firstRet, sp.firstOp = o.ret, n
		}
		if sp.lastOp < 0 || o.call > sp.lastCall {
			sp.lastCall, sp.lastOp = o.call, n
		}
	}
	st.ok, st.keys, st.insts, st.instNames = nil, idTable{}, nil, nil
	unnamed := st.unnamed
	if unnamed > 0 {
		line := fmt.Sprintf("%d ok entity or next-id ops named no incarnation or singleton instance and were not checked", unnamed)
		if ops, err := lookup(ctx, pass, st.firstUnnamed); err != nil {
			line += " (" + err.Error() + ")"
		} else {
			c := ops[st.firstUnnamed]
			line += fmt.Sprintf(" (first: #%d, %s %s)", st.firstUnnamed, c.F, c.Entity)
		}
		res.Evidence = append(res.Evidence, line)
	}
	if len(served) == 0 {
		res.Summary = "no ok entity or next-id op named the incarnation or instance that served it: nothing to check"
		return res
	}
	if err := ctx.Err(); err != nil {
		res.Summary = "stopped: " + err.Error()
		return res
	}

	// Keys in name order, so the evidence reads in a stable order.
	order := make([]int, len(keyNames))
	for k := range order {
		order[k] = k
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keyNames[a], keyNames[b]) })
	rank := make([]int, len(keyNames))
	for r, k := range order {
		rank[k] = r
	}
	byCall := make([]int, len(served))
	for i := range byCall {
		byCall[i] = i
	}
	slices.SortFunc(byCall, func(a, b int) int {
		x, y := &served[a], &served[b]
		return cmp.Or(cmp.Compare(rank[x.key], rank[y.key]), cmp.Compare(x.call, y.call), cmp.Compare(x.inv, y.inv))
	})
	byFirst := make([]int, len(spans))
	for i := range byFirst {
		byFirst[i] = i
	}
	slices.SortFunc(byFirst, func(a, b int) int {
		x, y := &spans[a], &spans[b]
		return cmp.Or(cmp.Compare(rank[x.key], rank[y.key]), cmp.Compare(x.firstRet, y.firstRet))
	})

	// Sweep each key's ops in invocation order. An op y (served by Y) is a
	// violation iff some other instance X completed an op before y was
	// invoked (firstRet < y.call) and was invoked for an op after y
	// completed (lastCall > y.ret). Instances enter the sweep as their
	// firstRet passes; of those, only the two with the latest lastCall
	// matter (the best one, or the runner-up when the best is Y itself).
	var (
		bad      int                // violating ops
		badKeys  = map[int32]bool{} // keys with a violation
		pairs    = map[[2]int]bool{}
		overlaps []servedOverlap
		morePair int
	)
	j := 0
	for start := 0; start < len(byCall); {
		key := served[byCall[start]].key
		end := start
		for end < len(byCall) && served[byCall[end]].key == key {
			end++
		}
		seg := byCall[start:end]
		best, second := -1, -1
		for _, o := range seg {
			y := &served[o]
			for ; j < len(byFirst) && spans[byFirst[j]].key == key && spans[byFirst[j]].firstRet < y.call; j++ {
				x := byFirst[j]
				switch {
				case best < 0 || spans[x].lastCall > spans[best].lastCall:
					best, second = x, best
				case second < 0 || spans[x].lastCall > spans[second].lastCall:
					second = x
				}
			}
			x := best
			if x == int(y.inst) {
				x = second
			}
			if x < 0 || spans[x].lastCall <= y.ret {
				continue
			}
			bad++
			badKeys[key] = true
			res.proven(max(y.ret, served[spans[x].lastOp].ret))
			pr := [2]int{min(x, int(y.inst)), max(x, int(y.inst))}
			if pairs[pr] {
				continue
			}
			pairs[pr] = true
			if len(overlaps) >= maxEvidence {
				morePair++
				continue
			}
			overlaps = append(overlaps, tightest(served, spans, seg, o, x))
		}
		// Skip this key's instances that never entered the sweep (their
		// first completion came after the key's last invocation).
		for j < len(byFirst) && spans[byFirst[j]].key == key {
			j++
		}
		start = end
		if err := ctx.Err(); err != nil {
			res.Summary = "stopped: " + err.Error()
			return res
		}
	}

	counts := fmt.Sprintf("%d ok ops on %d keys (entities and the singleton) served by %d incarnations or instances", len(served), len(keyNames), len(spans))
	if bad > 0 {
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d ops on %d keys were served by one incarnation while another was alive before and after them (%s)", bad, len(badKeys), counts)
		var refs []opRef
		for _, ov := range overlaps {
			for _, o := range []int{ov.y, ov.before, ov.after} {
				refs = append(refs, served[o].inv, served[o].comp)
			}
		}
		ops, err := lookup(ctx, pass, refs...)
		if err != nil {
			res.Evidence = append(res.Evidence, err.Error())
		}
		for _, ov := range overlaps {
			if err == nil {
				res.Evidence = append(res.Evidence, ov.describe(ops, served, spans, keyNames))
			}
		}
		if morePair > 0 {
			res.Evidence = append(res.Evidence, fmt.Sprintf("... and %d more pairs of incarnations alive at once", morePair))
		}
		return res
	}
	res.Verdict = Valid
	res.Summary = counts + ": never two alive at once"
	return res
}

// instID names an instance within its key.
type instID struct {
	key  int
	name string
}

// servedOverlap is one violation: the op y served by Y, the instance x alive
// before and after it, and x's tightest ops around y (indexes into the
// served ops).
type servedOverlap struct {
	y, x, before, after int
}

// tightest finds, for the violation of op yi by instance x, x's tightest
// ops around it: the last to complete before y was invoked and the first
// invoked after y completed. seg is the key's ops. Linear in them, so only
// done for the evidence.
func tightest(served []servedOp, spans []instSpan, seg []int, yi, x int) servedOverlap {
	y := &served[yi]
	before, after := spans[x].firstOp, spans[x].lastOp
	for _, o := range seg {
		s := &served[o]
		if int(s.inst) != x {
			continue
		}
		if s.ret < y.call && s.ret > served[before].ret {
			before = o
		}
		if s.call > y.ret && s.call < served[after].call {
			after = o
		}
	}
	return servedOverlap{y: yi, x: x, before: before, after: after}
}

// describe explains the violation.
func (ov servedOverlap) describe(ops map[int64]history.Op, served []servedOp, spans []instSpan, keyNames []string) string {
	y := &served[ov.y]
	key := keyNames[y.key]
	return fmt.Sprintf("%s: %s %s (hosted by %s) was alive before and after %s %s (hosted by %s) served %s: it served %s before and %s after",
		key, instWord(key), spans[ov.x].name, hostOf(ops, served[ov.before]), instWord(key), spans[y.inst].name, hostOf(ops, *y),
		describeServed(ops, *y), describeServed(ops, served[ov.before]), describeServed(ops, served[ov.after]))
}

// instWord says what an instance of key is called.
func instWord(key string) string {
	if key == singletonKey {
		return "instance"
	}
	return "incarnation"
}

// describeServed names an op as the linearizable checker does.
func describeServed(ops map[int64]history.Op, s servedOp) string {
	return ops[s.inv].F + " " + describeRegMeta(ops, regOp{inv: s.inv, comp: s.comp})
}

// hostOf names the member that hosted the instance serving s: the entity's
// host, the singleton instance's member (node@incarnation#instance), or,
// failing both, the node that answered.
func hostOf(ops map[int64]history.Op, s servedOp) string {
	r := ops[s.comp].Reply
	switch {
	case r == nil:
		return "unknown"
	case r.HostNode != "":
		return r.HostNode
	case r.Singleton != "":
		if i := strings.LastIndexByte(r.Singleton, '#'); i > 0 {
			return r.Singleton[:i]
		}
		return r.Singleton
	case r.Node != "":
		return "unknown, answered by " + r.Node
	}
	return "unknown"
}

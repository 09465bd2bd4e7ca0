package checker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/packed"
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
func (s SingleInstance) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, s, h, in)
}

// Stream implements Streamer: every ok op that names its server, packed
// per key (a dozen bytes each).
func (s SingleInstance) Stream(Inputs) Stream {
	st := &siStream{firstUnnamed: -1, insts: map[instID]int32{}}
	st.pairs = newPairStream(func(op *history.Op) bool { return op.Entity != "" || op.F == "next-id" }, st.pair)
	return st
}

// okServed is an ok op of one key while the key is swept: inst numbers
// the key's instances in the order of their first op's invocation.
type okServed struct {
	call, ret int64
	inv, comp opRef
	inst      int32
}

// Fields of a packed okServed.
const (
	siCall = iota
	siRet  // ret-call
	siInv
	siComp // comp-inv
	siInst // the stream's instance number
)

type siStream struct {
	pairs *pairStream
	keys  idTable
	// ops[k] are key k's ok ops, packed.
	ops          []packed.Log
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
	if int(k) == len(st.ops) {
		st.ops = append(st.ops, packed.Log{})
	}
	id := instID{int(k), inst}
	x, found := st.insts[id]
	if !found {
		x = int32(len(st.instNames))
		st.insts[id] = x
		st.instNames = append(st.instNames, inst)
	}
	call, ret := inv.Time, max(comp.Time, inv.Time)
	p := &st.ops[k]
	p.Put(siCall, call)
	p.Put(siRet, ret-call)
	p.Put(siInv, inv.Index)
	p.Put(siComp, comp.Index-inv.Index)
	p.Put(siInst, int64(x))
	p.End()
}

// unpack returns key k's ok ops in invocation order, their instances
// numbered again in the order of their first op, and the instances' spans.
func (st *siStream) unpack(k int32) ([]okServed, []instSpan) {
	r := st.ops[k].Reader()
	served := make([]okServed, st.ops[k].Len())
	for i := range served {
		o := &served[i]
		o.call = r.Get(siCall)
		o.ret = o.call + r.Get(siRet)
		o.inv = r.Get(siInv)
		o.comp = o.inv + r.Get(siComp)
		o.inst = int32(r.Get(siInst))
	}
	st.ops[k] = packed.Log{}
	slices.SortFunc(served, func(a, b okServed) int { return cmp.Compare(a.inv, b.inv) })
	local := map[int32]int32{}
	var spans []instSpan
	for n := range served {
		o := &served[n]
		x, ok := local[o.inst]
		if !ok {
			x = int32(len(spans))
			local[o.inst] = x
			spans = append(spans, instSpan{name: st.instNames[o.inst], key: k, firstOp: -1, lastOp: -1})
		}
		o.inst = x
		sp := &spans[x]
		if sp.firstOp < 0 || o.ret < sp.firstRet {
			sp.firstRet, sp.firstOp = o.ret, n
		}
		if sp.lastOp < 0 || o.call > sp.lastCall {
			sp.lastCall, sp.lastOp = o.call, n
		}
	}
	return served, spans
}

func (st *siStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	res := Result{Checker: SingleInstance{}.Name(), Verdict: Unknown}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
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
	if len(st.ops) == 0 {
		res.Summary = "no ok entity or next-id op named the incarnation or instance that served it: nothing to check"
		return res
	}
	if err := ctx.Err(); err != nil {
		res.Summary = "stopped: " + err.Error()
		return res
	}

	// Keys in name order, so the evidence reads in a stable order; one
	// key at a time, so only one key's ops are ever unpacked.
	keyNames := st.keys.names
	order := make([]int32, len(keyNames))
	for k := range order {
		order[k] = int32(k)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(keyNames[a], keyNames[b]) })

	// Sweep each key's ops in invocation order. An op y (served by Y) is a
	// violation iff some other instance X completed an op before y was
	// invoked (firstRet < y.call) and was invoked for an op after y
	// completed (lastCall > y.ret). Instances enter the sweep as their
	// firstRet passes; of those, only the two with the latest lastCall
	// matter (the best one, or the runner-up when the best is Y itself).
	var (
		bad, badKeys, nServed, nSpans, morePair int
		overlaps                                []servedOverlap
	)
	for _, key := range order {
		served, spans := st.unpack(key)
		nServed += len(served)
		nSpans += len(spans)
		byCall := make([]int, len(served))
		for i := range byCall {
			byCall[i] = i
		}
		slices.SortFunc(byCall, func(a, b int) int {
			x, y := &served[a], &served[b]
			return cmp.Or(cmp.Compare(x.call, y.call), cmp.Compare(x.inv, y.inv))
		})
		byFirst := make([]int, len(spans))
		for i := range byFirst {
			byFirst[i] = i
		}
		slices.SortFunc(byFirst, func(a, b int) int { return cmp.Compare(spans[a].firstRet, spans[b].firstRet) })
		pairs := map[[2]int]bool{}
		badKey := false
		best, second, j := -1, -1, 0
		for _, o := range byCall {
			y := &served[o]
			for ; j < len(byFirst) && spans[byFirst[j]].firstRet < y.call; j++ {
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
			badKey = true
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
			overlaps = append(overlaps, tightest(served, spans, byCall, o, x, keyNames[key]))
		}
		if badKey {
			badKeys++
		}
		if err := ctx.Err(); err != nil {
			res.Summary = "stopped: " + err.Error()
			return res
		}
	}
	st.ops, st.keys, st.insts, st.instNames = nil, idTable{}, nil, nil

	counts := fmt.Sprintf("%d ok ops on %d keys (entities and the singleton) served by %d incarnations or instances", nServed, len(keyNames), nSpans)
	if bad > 0 {
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d ops on %d keys were served by one incarnation while another was alive before and after them (%s)", bad, badKeys, counts)
		var refs []opRef
		for _, ov := range overlaps {
			for _, o := range []okServed{ov.y, ov.before, ov.after} {
				refs = append(refs, o.inv, o.comp)
			}
		}
		ops, err := lookup(ctx, pass, refs...)
		if err != nil {
			res.Evidence = append(res.Evidence, err.Error())
		}
		for _, ov := range overlaps {
			if err == nil {
				res.Evidence = append(res.Evidence, ov.describe(ops))
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

// servedOverlap is one violation, kept whole once its key's ops are gone:
// the op y served by Y, the instance X alive before and after it, and X's
// tightest ops around y.
type servedOverlap struct {
	key, xName, yName string
	y, before, after  okServed
}

// tightest finds, for the violation of op yi by instance x, x's tightest
// ops around it: the last to complete before y was invoked and the first
// invoked after y completed. seg is the key's ops. Linear in them, so only
// done for the evidence.
func tightest(served []okServed, spans []instSpan, seg []int, yi, x int, key string) servedOverlap {
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
	return servedOverlap{key: key, xName: spans[x].name, yName: spans[y.inst].name, y: *y, before: served[before], after: served[after]}
}

// describe explains the violation.
func (ov servedOverlap) describe(ops map[int64]history.Op) string {
	key := ov.key
	return fmt.Sprintf("%s: %s %s (hosted by %s) was alive before and after %s %s (hosted by %s) served %s: it served %s before and %s after",
		key, instWord(key), ov.xName, hostOf(ops, ov.before), instWord(key), ov.yName, hostOf(ops, ov.y),
		describeServed(ops, ov.y), describeServed(ops, ov.before), describeServed(ops, ov.after))
}

// instWord says what an instance of key is called.
func instWord(key string) string {
	if key == singletonKey {
		return "instance"
	}
	return "incarnation"
}

// describeServed names an op as the linearizable checker does.
func describeServed(ops map[int64]history.Op, s okServed) string {
	return ops[s.inv].F + " " + describeRegMeta(ops, regOp{inv: s.inv, comp: s.comp})
}

// hostOf names the member that hosted the instance serving s: the entity's
// host, the singleton instance's member (node@incarnation#instance), or,
// failing both, the node that answered.
func hostOf(ops map[int64]history.Op, s okServed) string {
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

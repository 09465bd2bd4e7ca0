package checker

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/atomicfile"
	"github.com/shardtest/shardtest/internal/packed"
)

// Linearizable checks the register workload: every register entity
// ("register/<id>") must be linearizable on its own, with porcupine.
//
// Failed ops are dropped (they did not happen). Ops with unknown outcomes
// (info, or never completed) are open-ended: they may take effect at any
// time after their invocation, or never; unknown reads are dropped (they
// change nothing). Entities are checked one at a time so memory stays
// bounded by the largest entity, and an entity too costly to check (too
// many ops, too many ops in flight at once, a timeout) is unknown rather
// than risking the machine: porcupine's time and memory grow exponentially
// with the ops in flight on one entity, and its timeout does not bound
// memory. Ops on other entity types are skipped (and said so).
type Linearizable struct {
	// Timeout per entity; 0 means 10 s.
	Timeout time.Duration
	// MaxOpsPerEntity: an entity with more ops is not checked (unknown);
	// 0 means 200000.
	MaxOpsPerEntity int
	// MaxConcurrency: an entity with more ops in flight at one time
	// (counting unknown outcomes as in flight from their invocation to the
	// end) is not checked (unknown); 0 means 8. Measured on this project's
	// 2-core machines, porcupine needs about 16 s and 1.7 GB at 10 in
	// flight and exhausts memory around 16; a timeout does not bound memory.
	MaxConcurrency int
}

// Name implements Checker.
func (Linearizable) Name() string { return "linearizable" }

// HTMLDir is the directory, under the output directory, that holds the
// visualizations of non-linearizable entities.
const HTMLDir = "linearizability"

// never is the return time of an op with an unknown outcome: after
// everything.
const never = math.MaxInt64

// regOp is one register op (64 bytes; the pass keeps it packed, see
// entityOps): its arguments and result, its interval, and where it is in
// the history. Porcupine's Operation is built only while the entity is
// checked.
type regOp struct {
	call, ret             int64
	inv, comp             opRef // entry indexes; comp -1 if none
	value, expect, result int64
	client                int32
	op                    uint8
	flags                 regFlags
}

// regFlags are regOp's booleans.
type regFlags uint8

const (
	valueSet regFlags = 1 << iota
	expectSet
	resultSet
	resultUnknown
	resultOK
	resultHasValue
)

func (f regFlags) has(x regFlags) bool { return f&x != 0 }

func flagIf(b bool, x regFlags) regFlags {
	if b {
		return x
	}
	return 0
}

// setIn packs the arguments.
func (o *regOp) setIn(in regInput) {
	o.op, o.value, o.expect = uint8(in.Op), in.Value.V, in.Expect.V
	o.flags |= flagIf(in.Value.Set, valueSet) | flagIf(in.Expect.Set, expectSet)
}

// setOut packs the result.
func (o *regOp) setOut(out regOutput) {
	o.result = out.Value.V
	o.flags |= flagIf(out.Value.Set, resultSet) | flagIf(out.Unknown, resultUnknown) | flagIf(out.OK, resultOK) | flagIf(out.HasValue, resultHasValue)
}

func (o *regOp) in() regInput {
	return regInput{Op: int(o.op), Value: regValue{Set: o.flags.has(valueSet), V: o.value}, Expect: regValue{Set: o.flags.has(expectSet), V: o.expect}}
}

func (o *regOp) out() regOutput {
	return regOutput{Unknown: o.flags.has(resultUnknown), OK: o.flags.has(resultOK), HasValue: o.flags.has(resultHasValue),
		Value: regValue{Set: o.flags.has(resultSet), V: o.result}}
}

// porcupine is the op as porcupine takes it, k its position in its entity.
func (o *regOp) porcupine(k int) porcupine.Operation {
	return porcupine.Operation{ClientId: int(o.client), Input: o.in(), Call: o.call, Output: o.out(), Return: o.ret, Metadata: opMeta{k}}
}

// opMeta is porcupine metadata: the op's position in its entity.
type opMeta struct{ k int }

// entityOps is one entity's ops and what went wrong reading them. During
// the pass the ops are packed (about 17 bytes each instead of regOp's 64);
// they are unpacked, one entity at a time, when it is checked.
type entityOps struct {
	packedOps packed.Log
	ops       []regOp
	// badInput: an invocation could not be read, so the entity cannot be
	// checked; badOutput: ok results that could not be read (taken as
	// unknown outcomes), so valid becomes unknown.
	badInput, badOutput string
}

// linCounts are the counts in the summary.
type linCounts struct {
	ok, unknown, failed, unknownReads, unreadable int
	// unobserved: unknown writes and cas whose value nobody observed,
	// dropped before checking (counted as the entities are checked).
	unobserved int
}

// Check implements Checker.
func (l Linearizable) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, l, h, in)
}

// Stream implements Streamer: per register entity its ops, compactly;
// ops on other entity types are only counted.
func (l Linearizable) Stream(in Inputs) Stream {
	s := &linStream{l: l, outDir: in.Out, skipped: map[string]int{}, entities: map[string]*entityOps{}}
	s.pairs = newPairStream(func(op *history.Op) bool {
		if strings.HasPrefix(op.Entity, "register/") {
			return true
		}
		t, _, _ := strings.Cut(op.Entity, "/")
		if t == "" {
			t = "(no entity)"
		}
		s.skipped[t]++
		return false
	}, s.pair)
	return s
}

type linStream struct {
	l        Linearizable
	outDir   string
	pairs    *pairStream
	skipped  map[string]int // entity type -> invocations
	entities map[string]*entityOps
	c        linCounts
}

func (s *linStream) Observe(op *history.Op) { s.pairs.observe(op) }

// pair files one completed (or never completed) invocation under its
// entity.
func (s *linStream) pair(inv, comp *history.Op) {
	e := s.entities[inv.Entity]
	if e == nil {
		e = &entityOps{}
		s.entities[inv.Entity] = e
	}
	if comp != nil && comp.Kind == history.Fail {
		s.c.failed++
		return
	}
	in, err := parseRegInput(inv.F, inv.Value)
	if err != nil {
		s.c.unreadable++
		if e.badInput == "" {
			e.badInput = fmt.Sprintf("op #%d: %v", inv.Index, err)
		}
		return
	}
	o := regOp{client: int32(max(inv.Process, 0)), call: inv.Time, inv: inv.Index, comp: -1}
	o.setIn(in)
	if comp == nil || comp.Kind == history.Info {
		if in.Op == opRead {
			s.c.unknownReads++
			return
		}
		s.c.unknown++
		o.setOut(regOutput{Unknown: true})
		o.ret = never
	} else {
		s.c.ok++
		out, err := parseRegOutput(in, comp.Value)
		if err != nil {
			out = regOutput{Unknown: true}
			if e.badOutput == "" {
				e.badOutput = fmt.Sprintf("op #%d: %v", comp.Index, err)
			}
		}
		o.setOut(out)
		o.ret = max(comp.Time, inv.Time)
	}
	if comp != nil {
		o.comp = comp.Index
	}
	e.pack(&o)
}

// Fields of a packed regOp.
const (
	packCall = iota
	packRet  // ret-call+1; 0: never
	packInv
	packComp // comp-inv+1; 0: none
	packClient
	packOpFlags // op<<8 | flags
	packValue   // if valueSet
	packExpect  // if expectSet
	packResult  // if resultSet
)

// pack appends o to the entity's packed ops.
func (e *entityOps) pack(o *regOp) {
	p := &e.packedOps
	p.Put(packCall, o.call)
	ret := int64(0)
	if o.ret != never {
		ret = o.ret - o.call + 1
	}
	p.Put(packRet, ret)
	p.Put(packInv, o.inv)
	comp := int64(0)
	if o.comp >= 0 {
		comp = o.comp - o.inv + 1
	}
	p.Put(packComp, comp)
	p.Put(packClient, int64(o.client))
	p.Put(packOpFlags, int64(o.op)<<8|int64(o.flags))
	if o.flags.has(valueSet) {
		p.Put(packValue, o.value)
	}
	if o.flags.has(expectSet) {
		p.Put(packExpect, o.expect)
	}
	if o.flags.has(resultSet) {
		p.Put(packResult, o.result)
	}
	p.End()
}

// unpack sets ops from the packed ops, in invocation order (pairs arrive
// in completion order; the evidence lists ops in invocation order), and
// drops the packed form.
func (e *entityOps) unpack() {
	r := e.packedOps.Reader()
	e.ops = make([]regOp, e.packedOps.Len())
	for i := range e.ops {
		o := &e.ops[i]
		o.call = r.Get(packCall)
		o.ret = never
		if ret := r.Get(packRet); ret > 0 {
			o.ret = o.call + ret - 1
		}
		o.inv = r.Get(packInv)
		o.comp = -1
		if comp := r.Get(packComp); comp > 0 {
			o.comp = o.inv + comp - 1
		}
		o.client = int32(r.Get(packClient))
		of := r.Get(packOpFlags)
		o.op, o.flags = uint8(of>>8), regFlags(of)
		if o.flags.has(valueSet) {
			o.value = r.Get(packValue)
		}
		if o.flags.has(expectSet) {
			o.expect = r.Get(packExpect)
		}
		if o.flags.has(resultSet) {
			o.result = r.Get(packResult)
		}
	}
	e.packedOps = packed.Log{}
	slices.SortFunc(e.ops, func(a, b regOp) int { return cmp.Compare(a.inv, b.inv) })
}

func (s *linStream) Result(ctx context.Context, pass *Pass) Result {
	l, outDir, entities, skipped := s.l, s.outDir, s.entities, s.skipped
	s.pairs.finish()
	c := &s.c
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	maxOps := l.MaxOpsPerEntity
	if maxOps <= 0 {
		maxOps = 200000
	}
	maxConc := l.MaxConcurrency
	if maxConc <= 0 {
		maxConc = 8
	}
	res := Result{Checker: l.Name(), Verdict: Unknown}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, s.pairs.evidence()...)
	skippedNote := ""
	if len(skipped) > 0 {
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(skipped)) {
			parts = append(parts, fmt.Sprintf("%s: %d", t, skipped[t]))
		}
		skippedNote = "; skipped ops not on registers (" + strings.Join(parts, ", ") + ")"
	}
	names := slices.Sorted(maps.Keys(entities))
	if len(names) == 0 {
		res.Summary = "no register operations: nothing to check" + skippedNote
		return res
	}
	if c.ok+c.unknown+c.unreadable == 0 {
		res.Summary = fmt.Sprintf("no register operation took effect or may have (dropped %d failed and %d unknown reads): nothing to check", c.failed, c.unknownReads) + skippedNote
		return res
	}
	counts := fmt.Sprintf("%d register entities, %d ops (%d ok, %d with unknown outcomes; dropped %d failed and %d unknown reads",
		len(names), c.ok+c.unknown, c.ok, c.unknown, c.failed, c.unknownReads)
	if c.unreadable > 0 {
		counts += fmt.Sprintf("; %d with unreadable arguments", c.unreadable)
	}
	counts += ")"

	var (
		invalid   []string
		unknowns  = map[string]int{} // reason -> entities
		unknownEv []string
		linOK     int
	)
	addUnknown := func(reason, line string) {
		unknowns[reason]++
		if len(unknownEv) < maxEvidence {
			unknownEv = append(unknownEv, line)
		}
	}
	var stopped error
	// The searches for the first violation share a budget: they make the
	// report more precise, and must not make a check with many failing
	// entities take much longer.
	searchUntil := time.Now().Add(firstViolationBudget)
	// Each entity is judged on its own, on up to pass.Jobs goroutines
	// (judgeEntity); the verdicts are taken here in the entities' order,
	// and a violation explained, as with one core.
	es := make([]*entityOps, len(names))
	for i, name := range names {
		es[i] = entities[name]
	}
	clear(entities)
	lim := linLimits{timeout: timeout, maxOps: maxOps, maxConc: maxConc}
	explain := func(name string, v linVerdict) error {
		e, pops, t := v.e, v.pops, v.timeout
		invalid = append(invalid, name)
		if res.Smallest == nil || len(e.ops) < res.Smallest.Ops {
			res.Smallest = &Counterexample{What: name, Ops: len(e.ops)}
		}
		if len(invalid) > maxEvidence {
			return nil
		}
		refs := make([]opRef, 0, 2*len(e.ops))
		for _, o := range e.ops {
			refs = append(refs, o.inv, o.comp)
		}
		ops, err := lookup(ctx, pass, refs...)
		if err != nil {
			res.Evidence = append(res.Evidence, fmt.Sprintf("%s: not linearizable (%d ops); no explanation: %v", name, len(e.ops), err))
			return nil
		}
		m := registerModel
		m.DescribeOperationMetadata = func(md interface{}) string {
			if x, ok := md.(opMeta); ok && x.k < len(e.ops) {
				return describeRegMeta(ops, e.ops[x.k])
			}
			return ""
		}
		var info porcupine.LinearizationInfo
		r2, err := runPorcupine(ctx, func() porcupine.CheckResult {
			var r porcupine.CheckResult
			r, info = porcupine.CheckOperationsVerbose(m, pops, t)
			return r
		})
		if err != nil {
			return err
		}
		if r2 != porcupine.Illegal {
			res.Evidence = append(res.Evidence, fmt.Sprintf("%s: not linearizable (%d ops); the detailed re-check did not finish (%s), so there is no explanation", name, len(e.ops), r2))
			return nil
		}
		res.Evidence = append(res.Evidence, explainIllegal(m, name, info, e.ops, ops)...)
		if at := firstViolation(ctx, m, pops, min(t, time.Until(searchUntil))); at > 0 {
			res.proven(at)
			res.Evidence = append(res.Evidence, fmt.Sprintf("%s: the history up to %.3f s is already not linearizable", name, nsToSecs(at)))
		}
		if outDir != "" {
			rel := filepath.Join(HTMLDir, fileName(name)+".html")
			if err := writeVisualization(outDir, rel, m, info); err != nil {
				res.Evidence = append(res.Evidence, fmt.Sprintf("%s: visualization not written: %v", name, err))
			} else {
				res.Files = append(res.Files, filepath.ToSlash(rel))
				res.Evidence = append(res.Evidence, fmt.Sprintf("%s: visualization in %s", name, filepath.ToSlash(rel)))
				if res.Smallest != nil && res.Smallest.What == name {
					res.Smallest.File = filepath.ToSlash(rel)
				}
			}
		}
		return nil
	}
	inOrder(pass.Jobs, len(names), func(i int) linVerdict {
		e := es[i]
		es[i] = nil // judged: its ops can go
		return judgeEntity(ctx, names[i], e, lim)
	}, func(i int, v linVerdict) bool {
		c.unobserved += v.unobserved
		switch {
		case v.stopped != nil:
			stopped = v.stopped
		case v.reason != "":
			addUnknown(v.reason, v.line)
		case v.e == nil:
			linOK++
		default:
			stopped = explain(names[i], v)
		}
		return stopped == nil
	})

	nUnknown := 0
	var reasons []string
	for _, r := range slices.Sorted(maps.Keys(unknowns)) {
		nUnknown += unknowns[r]
		reasons = append(reasons, fmt.Sprintf("%d %s", unknowns[r], r))
	}
	res.Evidence = append(res.Evidence, unknownEv...)
	if nUnknown > len(unknownEv) {
		res.Evidence = append(res.Evidence, fmt.Sprintf("(and %d more entities not checked)", nUnknown-len(unknownEv)))
	}
	if c.unobserved > 0 {
		counts += fmt.Sprintf("; %d unknown writes or cas dropped because no op observed their value", c.unobserved)
	}
	switch {
	case len(invalid) > 0:
		res.Verdict = Invalid
		list := invalid
		if len(list) > maxEvidence {
			list = list[:maxEvidence]
			res.Evidence = append(res.Evidence, fmt.Sprintf("(explained the first %d of %d non-linearizable entities)", maxEvidence, len(invalid)))
		}
		res.Summary = fmt.Sprintf("%d of %d register entities are not linearizable: %s", len(invalid), len(names), strings.Join(list, ", "))
		if len(list) < len(invalid) {
			res.Summary += ", ..."
		}
		res.Summary += " (" + counts + ")"
	case stopped != nil:
		res.Summary = fmt.Sprintf("stopped (%v) after %d of %d register entities, no violation found", stopped, linOK+nUnknown, len(names))
	case nUnknown > 0:
		res.Summary = fmt.Sprintf("no violation found, but %d of %d register entities could not be decided (%s); %s", nUnknown, len(names), strings.Join(reasons, ", "), counts)
	default:
		res.Verdict = Valid
		res.Summary = counts + ": all linearizable"
	}
	res.Summary += skippedNote
	return res
}

// linLimits are what makes an entity too costly to check.
type linLimits struct {
	timeout         time.Duration
	maxOps, maxConc int
}

// linVerdict is one entity judged by judgeEntity.
type linVerdict struct {
	// stopped: ctx ended first.
	stopped error
	// reason and line: not decided (unknown), why and the evidence line.
	reason, line string
	// e, pops and timeout: not linearizable, the ops to explain it with
	// (nil e and no reason: linearizable).
	e       *entityOps
	pops    []porcupine.Operation
	timeout time.Duration
	// unobserved: unknown writes and cas dropped (dropUnobserved).
	unobserved int
}

// judgeEntity checks one entity's ops with porcupine, unless they are
// unreadable or too costly to check. It touches nothing but e, so entities
// are judged at once on several goroutines.
func judgeEntity(ctx context.Context, name string, e *entityOps, lim linLimits) linVerdict {
	if err := ctx.Err(); err != nil {
		return linVerdict{stopped: err}
	}
	e.unpack()
	if e.badInput != "" {
		return linVerdict{reason: "unreadable arguments", line: fmt.Sprintf("%s: not checked: %s", name, e.badInput)}
	}
	v := linVerdict{unobserved: e.dropUnobserved()}
	if len(e.ops) == 0 {
		return v // only failed ops and unknown reads: nothing happened
	}
	if len(e.ops) > lim.maxOps {
		v.reason, v.line = "too many ops", fmt.Sprintf("%s: not checked: %d ops, more than the limit of %d", name, len(e.ops), lim.maxOps)
		return v
	}
	if n, at, unk := concurrency(e.ops); n > lim.maxConc {
		v.reason, v.line = "too concurrent", fmt.Sprintf("%s: not checked: %d ops in flight at t=%d (%d of them with unknown outcomes, in flight until the end), more than the limit of %d; checking costs time and memory exponential in it",
			name, n, at, unk, lim.maxConc)
		return v
	}
	pops := make([]porcupine.Operation, len(e.ops))
	for i := range e.ops {
		pops[i] = e.ops[i].porcupine(i)
	}
	t := lim.timeout
	if d, ok := ctx.Deadline(); ok {
		t = min(t, time.Until(d))
	}
	r, err := runPorcupine(ctx, func() porcupine.CheckResult {
		return porcupine.CheckOperationsTimeout(registerModel, pops, t)
	})
	if err != nil {
		v.stopped = err
		return v
	}
	switch r {
	case porcupine.Ok:
		if e.badOutput != "" {
			v.reason, v.line = "unreadable results", fmt.Sprintf("%s: linearizable if the unreadable results are taken as unknown, but %s", name, e.badOutput)
		}
	case porcupine.Unknown:
		v.reason, v.line = "timed out", fmt.Sprintf("%s: not decided within %v (%d ops)", name, t, len(e.ops))
	case porcupine.Illegal:
		v.e, v.pops, v.timeout = e, pops, t
	}
	return v
}

// dropUnobserved drops the unknown-outcome writes and cas whose value no
// op observed (no read or failed cas returned it, no cas expected it), and
// returns how many. This keeps the ops in flight, and so porcupine's cost,
// down after faults, when many ops have unknown outcomes. It is exact: such
// an op can always be moved to the end of a linearization (never taking
// effect). Where it took effect, the register held its value until the
// next write, since no op that needs that value exists, and the only ops
// in between are unknown cas that failed, which can move to the end too.
func (e *entityOps) dropUnobserved() int {
	seen := map[regValue]bool{}
	for _, o := range e.ops {
		in, out := o.in(), o.out()
		if in.Op == opCAS {
			seen[in.Expect] = true
			if !out.Unknown && !out.OK && !out.HasValue {
				return 0 // a failed cas that did not say what it saw: keep all
			}
		}
		if !out.Unknown && (in.Op == opRead || in.Op == opCAS && !out.OK) {
			seen[out.Value] = true
		}
	}
	kept := e.ops[:0]
	for _, o := range e.ops {
		if in := o.in(); o.ret == never && in.Op != opRead && !seen[in.Value] {
			continue
		}
		kept = append(kept, o)
	}
	n := len(e.ops) - len(kept)
	clear(e.ops[len(kept):])
	e.ops = kept
	return n
}

// runPorcupine runs a check, giving up (and leaving it to finish within its
// timeout) if ctx ends first.
func runPorcupine(ctx context.Context, check func() porcupine.CheckResult) (porcupine.CheckResult, error) {
	if ctx.Done() == nil {
		return check(), nil
	}
	done := make(chan porcupine.CheckResult, 1)
	go func() { done <- check() }()
	select {
	case r := <-done:
		return r, nil
	case <-ctx.Done():
		return porcupine.Unknown, ctx.Err()
	}
}

// concurrency returns the most ops in flight at one time (intervals are
// closed; an unknown outcome is in flight from its invocation on), when,
// and how many of them had unknown outcomes.
func concurrency(ops []regOp) (most int, at int64, unknown int) {
	type event struct {
		t     int64
		delta int // +1 call, -1 return
		open  bool
	}
	ev := make([]event, 0, 2*len(ops))
	for _, o := range ops {
		open := o.ret == never
		ev = append(ev, event{o.call, 1, open})
		if !open {
			ev = append(ev, event{o.ret, -1, false})
		}
	}
	slices.SortFunc(ev, func(a, b event) int {
		return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(b.delta, a.delta)) // calls first
	})
	n, openN := 0, 0
	for _, e := range ev {
		n += e.delta
		if e.open {
			openN++
		}
		if n > most {
			most, at, unknown = n, e.t, openN
		}
	}
	return most, at, unknown
}

// explainIllegal turns porcupine's partial linearizations into evidence.
func explainIllegal(m porcupine.Model, name string, info porcupine.LinearizationInfo, eops []regOp, ops map[int64]history.Op) []string {
	ev := []string{fmt.Sprintf("%s: not linearizable (%d ops)", name, len(eops))}
	parts := info.PartialLinearizationsOperations()
	var longest []porcupine.Operation
	for _, p := range parts {
		for _, lin := range p {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	placed := make([]bool, len(eops))
	state := m.Init()
	for _, o := range longest {
		if md, ok := o.Metadata.(opMeta); ok && md.k < len(placed) {
			placed[md.k] = true
		}
		_, state = m.Step(state, o.Input, o.Output)
	}
	line := fmt.Sprintf("%s: the longest linearizable prefix found orders %d of the %d ops and leaves the register at %s", name, len(longest), len(eops), m.DescribeState(state))
	if len(longest) > 0 {
		last := longest[len(longest)-1]
		if md, ok := last.Metadata.(opMeta); ok && md.k < len(eops) {
			line += fmt.Sprintf(" (last: %s %s)", describeRegOp(last.Input.(regInput), last.Output.(regOutput)), describeRegMeta(ops, eops[md.k]))
		}
	}
	ev = append(ev, line)
	var rest []int
	for k := range eops {
		if !placed[k] && eops[k].ret != never {
			rest = append(rest, k)
		}
	}
	slices.SortFunc(rest, func(a, b int) int { return cmp.Compare(eops[a].ret, eops[b].ret) })
	var next []string
	for _, k := range rest[:min(len(rest), 3)] {
		next = append(next, describeRegOp(eops[k].in(), eops[k].out())+" "+describeRegMeta(ops, eops[k]))
	}
	if len(next) > 0 {
		ev = append(ev, fmt.Sprintf("%s: no remaining op fits next; the first to complete: %s", name, strings.Join(next, "; ")))
	}
	return ev
}

// describeRegMeta names an op's history entries, process, node and times.
func describeRegMeta(ops map[int64]history.Op, o regOp) string {
	inv := ops[o.inv]
	inv.Index = o.inv
	if o.comp < 0 {
		return describeEntries(&inv, nil)
	}
	c := ops[o.comp]
	c.Index = o.comp
	return describeEntries(&inv, &c)
}

// describeEntries names an invocation and its completion (nil: none).
func describeEntries(inv, c *history.Op) string {
	if c == nil {
		return fmt.Sprintf("[#%d, process %d, node %s, invoked t=%d, never completed]", inv.Index, inv.Process, inv.Node, inv.Time)
	}
	return fmt.Sprintf("[#%d/#%d, process %d, node %s, t=%d..%d %s]", inv.Index, c.Index, inv.Process, inv.Node, inv.Time, c.Time, c.Kind)
}

// fileName makes an entity name safe as a file name.
func fileName(entity string) string {
	b := []byte(entity)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// firstViolationBudget bounds the time all first-violation searches of one
// check take together.
const firstViolationBudget = 20 * time.Second

// firstViolation is the earliest completion time T at which the entity's
// history, cut at T, is already not linearizable: the moment the history
// proves the violation. The cut keeps the ops invoked by T; an op that
// completed later has, at T, an unknown outcome (a read is dropped, a
// write or cas may take effect at any time or never). A longer cut only
// adds constraints, so the cuts go from linearizable to not at one T,
// found by binary search over the completion times. pops is known not to
// be linearizable as a whole, which is the cut at the last completion
// (ops invoked after it have unknown outcomes, which cannot make a history
// illegal). A search step porcupine cannot decide in time ends the search
// with the earliest cut known to be illegal; 0 when nothing is known.
func firstViolation(ctx context.Context, m porcupine.Model, pops []porcupine.Operation, timeout time.Duration) int64 {
	if timeout <= 0 {
		return 0
	}
	var times []int64
	for _, o := range pops {
		if o.Return != never {
			times = append(times, o.Return)
		}
	}
	slices.Sort(times)
	times = slices.Compact(times)
	if len(times) == 0 {
		return 0
	}
	cut := func(t int64) []porcupine.Operation {
		var out []porcupine.Operation
		for _, o := range pops {
			switch {
			case o.Call > t:
			case o.Return <= t:
				out = append(out, o)
			case o.Input.(regInput).Op == opRead:
			default:
				o.Output, o.Return = regOutput{Unknown: true}, never
				out = append(out, o)
			}
		}
		return out
	}
	lo, hi := 0, len(times)-1 // times[hi] is known illegal
	for lo < hi && ctx.Err() == nil {
		mid := (lo + hi) / 2
		r, err := runPorcupine(ctx, func() porcupine.CheckResult {
			return porcupine.CheckOperationsTimeout(m, cut(times[mid]), timeout)
		})
		switch {
		case err != nil || r == porcupine.Unknown:
			return times[hi]
		case r == porcupine.Illegal:
			hi = mid
		default:
			lo = mid + 1
		}
	}
	return times[hi]
}

// writeVisualization writes porcupine's page of an entity that is not
// linearizable to outDir/rel, through atomicfile: outDir is a stored run's
// folder, and its linearizability folder may be a link out of it.
func writeVisualization(outDir, rel string, m porcupine.Model, info porcupine.LinearizationInfo) error {
	var page bytes.Buffer
	if err := porcupine.Visualize(m, info, &page); err != nil {
		return err
	}
	return atomicfile.Write(outDir, rel, page.Bytes())
}

package checker

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/packed"
)

// Liveness checks that, with no disruptive fault to excuse it, every
// operation gets an answer: the seeds promise that messages buffered while a
// shard's home is looked up, during a hand-off or while an entity
// passivates are delivered, so an ask that times out on a healthy cluster
// was lost. Partitions, packet loss, crashes, pauses and clock skew excuse
// timeouts while they last and for LivenessGrace after their heal (failure
// detection, downing, restarts), but never into the final phase, which
// starts once the cluster has converged and settled (15 s after the last
// heal at least). Graceful membership changes (join, leave, rolling
// restart) excuse nothing on the rest of the cluster; they excuse only the
// operations sent to the nodes that leave, while the fault lasts: a node's
// process exits once it has left, and a request that reached it just then
// loses its connection. Tells are not judged (at most once). The
// evidence names, for each window that excused operations, the faults
// that opened it and how many it excused; a failed inject opens none.
//
// Definite failures are answers; only unknown outcomes (timeouts, lost
// replies) and invocations never completed count.
type Liveness struct{}

// LivenessGrace is how long after a disruptive fault's heal timeouts are
// still excused.
const LivenessGrace = 30 * time.Second

// Name implements Checker.
func (Liveness) Name() string { return "liveness" }

// disruptive reports whether a fault family may legitimately make
// operations time out.
func disruptive(fault string) bool {
	family, _, _ := strings.Cut(fault, ":")
	switch family {
	case "member":
		return false
	}
	return true
}

// Check implements Checker.
func (l Liveness) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, l, h, in)
}

// Stream implements Streamer: the outline (fault and phase entries) and
// every operation's interval, in a few words each.
func (Liveness) Stream(Inputs) Stream {
	st := &liveStream{}
	st.pairs = newPairStream(func(op *history.Op) bool { return op.F != "tell" }, st.pair)
	return st
}

// liveOp is an operation as liveness keeps it: to is -1 when it never
// completed.
type liveOp struct {
	from, to  int64
	inv, comp opRef
	node      int32 // into liveStream.nodes
	answered  bool
}

type liveStream struct {
	pairs *pairStream
	// ops are the liveOps, packed (a few bytes each), in completion order.
	ops     packed.Log
	nodes   idTable
	outline outline
}

// Fields of a packed liveOp.
const (
	liveFrom = iota
	liveTo   // to-from+1; 0: never completed
	liveInv
	liveComp // comp-inv+1; 0: none
	liveNode
	liveAnswered
)

func (st *liveStream) Observe(op *history.Op) {
	st.outline.observe(op)
	st.pairs.observe(op)
}

func (st *liveStream) pair(inv, comp *history.Op) {
	p := &st.ops
	p.Put(liveFrom, inv.Time)
	to, c, answered := int64(0), int64(0), int64(0)
	if comp != nil {
		to, c = comp.Time-inv.Time+1, comp.Index-inv.Index+1
		if comp.Kind != history.Info {
			answered = 1
		}
	}
	p.Put(liveTo, to)
	p.Put(liveInv, inv.Index)
	p.Put(liveComp, c)
	p.Put(liveNode, int64(st.nodes.id(inv.Node)))
	p.Put(liveAnswered, answered)
	p.End()
}

// unpack reads the next packed op.
func (st *liveStream) unpack(r *packed.Reader) liveOp {
	o := liveOp{from: r.Get(liveFrom), to: -1, comp: -1}
	to := r.Get(liveTo)
	o.inv = r.Get(liveInv)
	c := r.Get(liveComp)
	o.node = int32(r.Get(liveNode))
	o.answered = r.Get(liveAnswered) == 1
	if c > 0 {
		o.to, o.comp = o.from+to-1, o.inv+c-1
	}
	return o
}

func (st *liveStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	h := st.outline.file(pass)
	res := Result{Checker: "liveness"}
	end := st.outline.end
	// Excused windows: each disruptive fault from its inject until grace
	// after its heal (or the end).
	type window struct {
		from, to int64
		faults   []string // the faults that opened it, in inject order
		excused  int
	}
	var excused []window
	// The final phase starts once the harness saw the cluster converge
	// after the last heal: from then on nothing is excused.
	final := st.outline.finalAt()
	// Nodes that leave: operations sent to them are excused while they
	// leave and stay away — a leave's inject until its heal (the restart),
	// a joined node's heal (its leave), a rolling restart's inject.
	type nodeWindow struct {
		node     string
		from, to int64
		fault    string
		excused  int
	}
	var leaving []nodeWindow
	spans, _ := history.Faults(h.Ops)
	failed := 0
	for _, f := range spans {
		if f.Failed() {
			// It did nothing: it excuses nothing.
			failed++
			continue
		}
		inj, heal := f.Inject, f.Heal
		if !disruptive(f.Fault()) {
			switch {
			case f.Fault() == "member:join" && heal != nil:
				for _, n := range heal.Nodes {
					leaving = append(leaving, nodeWindow{node: n, from: heal.Began, to: heal.At, fault: f.Fault()})
				}
			case f.Fault() == "member:rolling-restart":
				for _, n := range inj.Nodes {
					leaving = append(leaving, nodeWindow{node: n, from: inj.Began, to: inj.At, fault: f.Fault()})
				}
			case strings.HasPrefix(f.Fault(), "member:leave"):
				to := end + 1
				if heal != nil {
					to = heal.At
				}
				for _, n := range inj.Nodes {
					leaving = append(leaving, nodeWindow{node: n, from: inj.Began, to: to, fault: f.Fault()})
				}
			}
			continue
		}
		// The fault acts from the moment its injection began (a kill
		// resets connections before the harness hears it is done).
		if heal == nil {
			excused = append(excused, window{from: inj.Began, to: end + 1, faults: []string{f.Fault()}})
			continue
		}
		to := heal.At + int64(LivenessGrace)
		if final >= 0 && final > heal.At {
			to = min(to, final)
		}
		excused = append(excused, window{from: inj.Began, to: to, faults: []string{f.Fault()}})
	}
	sort.Slice(excused, func(i, j int) bool { return excused[i].from < excused[j].from })
	// Merge into disjoint windows, so each op is looked up by binary search.
	var merged []window
	for _, w := range excused {
		if n := len(merged); n > 0 && w.from <= merged[n-1].to {
			merged[n-1].to = max(merged[n-1].to, w.to)
			merged[n-1].faults = append(merged[n-1].faults, w.faults...)
			continue
		}
		merged = append(merged, w)
	}
	// excusedBy is the window that excuses an operation over [from, to]
	// (the first it overlaps), or nil.
	excusedBy := func(from, to int64) *window {
		i := sort.Search(len(merged), func(i int) bool { return merged[i].to >= from })
		if i < len(merged) && merged[i].from <= to {
			return &merged[i]
		}
		return nil
	}
	leavingAt := func(node string, from, to int64) *nodeWindow {
		for i := range leaving {
			if w := &leaving[i]; w.node == node && w.from <= to && from <= w.to {
				return w
			}
		}
		return nil
	}
	ended, _ := h.Ended()
	judged, lost, excusedN := 0, 0, 0
	var unanswered []liveOp
	r := st.ops.Reader()
	for i := range st.ops.Len() {
		if i%4096 == 0 && ctx.Err() != nil {
			res.Verdict, res.Summary = Unknown, "stopped: "+ctx.Err().Error()
			return res
		}
		o := st.unpack(&r)
		to := end
		if o.comp >= 0 {
			to = o.to
		} else if !ended {
			continue // the harness stopped: no answer was awaited to the end
		}
		if w := excusedBy(o.from, to); w != nil {
			w.excused++
			excusedN++
			continue
		}
		if w := leavingAt(st.nodes.names[o.node], o.from, to); w != nil {
			w.excused++
			excusedN++
			continue
		}
		judged++
		if o.answered {
			continue
		}
		lost++
		res.proven(to)
		unanswered = append(unanswered, o)
	}
	st.ops = packed.Log{}
	// The first in invocation order, as the evidence lists them.
	slices.SortFunc(unanswered, func(a, b liveOp) int { return cmp.Compare(a.inv, b.inv) })
	unanswered = unanswered[:min(len(unanswered), maxEvidence)]
	var violations []string
	if len(unanswered) > 0 {
		var refs []opRef
		for _, o := range unanswered {
			refs = append(refs, o.inv, o.comp)
		}
		ops, err := lookup(ctx, pass, refs...)
		if err != nil {
			violations = append(violations, err.Error())
		}
		for _, o := range unanswered {
			inv := ops[o.inv]
			what := "never completed"
			if o.comp >= 0 {
				what = "no answer: " + ops[o.comp].Error
			}
			violations = append(violations, fmt.Sprintf("%s %s (#%d, process %d, node %s) invoked at %.3f s with no disruptive fault active or recent: %s",
				inv.F, inv.Entity, o.inv, inv.Process, inv.Node, float64(o.from)/1e9, what))
		}
		if lost > len(unanswered) {
			violations = append(violations, fmt.Sprintf("... and %d more", lost-len(unanswered)))
		}
	}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
	stats := fmt.Sprintf("%d operations on a healthy cluster judged, %d excused by %d fault windows (+%v grace)", judged, excusedN, len(merged), LivenessGrace)
	if failed > 0 {
		res.Evidence = append(res.Evidence, fmt.Sprintf("%d injects failed and did nothing: they excuse nothing", failed))
	}
	// Each window that excused something names the faults that opened it,
	// so a reader can tell which fault a verdict leaned on.
	var windows []string
	for _, w := range merged {
		if w.excused > 0 {
			windows = append(windows, fmt.Sprintf("%d operations excused from %.3f s to %.3f s (grace included) by %s",
				w.excused, float64(w.from)/1e9, float64(w.to)/1e9, namedFaults(w.faults)))
		}
	}
	for _, w := range leaving {
		if w.excused > 0 {
			windows = append(windows, fmt.Sprintf("%d operations sent to %s excused from %.3f s to %.3f s while it left (%s)",
				w.excused, w.node, float64(w.from)/1e9, float64(w.to)/1e9, w.fault))
		}
	}
	if len(windows) > maxEvidence {
		windows = append(windows[:maxEvidence:maxEvidence], fmt.Sprintf("... and %d more windows", len(windows)-maxEvidence))
	}
	switch {
	case lost > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d operations got no answer with no fault to excuse it; %s", lost, stats)
		res.Evidence = append(res.Evidence, violations...)
	case judged == 0:
		res.Verdict, res.Summary = Unknown, "nothing to judge: no operation ran on a healthy cluster; "+stats
	default:
		res.Verdict, res.Summary = Valid, "every operation on a healthy cluster got an answer; "+stats
	}
	res.Evidence = append(res.Evidence, windows...)
	return res
}

// namedFaults lists a window's faults, each once with its count
// ("partition:majorities, kill:one ×2").
func namedFaults(faults []string) string {
	var names []string
	count := map[string]int{}
	for _, f := range faults {
		if count[f] == 0 {
			names = append(names, f)
		}
		count[f]++
	}
	for i, f := range names {
		if n := count[f]; n > 1 {
			names[i] = fmt.Sprintf("%s ×%d", f, n)
		}
	}
	return strings.Join(names, ", ")
}

package checker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/shardtest/shardtest/history"
)

// UniqueIDs checks the idgen workload's next-id operations (ok result
// {"id": n}): every id is handed out at most once, and ids increase in
// real-time order: if an op completed before another was invoked, its id
// is smaller. Ops with unknown outcomes (info, never completed) constrain
// nothing: their ids, if any, were never seen. O(n log n).
type UniqueIDs struct{}

// Name implements Checker.
func (UniqueIDs) Name() string { return "unique-ids" }

// idOp is a next-id op that returned an id (40 bytes).
type idOp struct {
	id        int64
	call, ret int64 // invocation and completion times
	inv, comp opRef // entry indexes
}

// Check implements Checker.
func (u UniqueIDs) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, u, h, in)
}

// Stream implements Streamer: per next-id op that returned an id, the id
// and its interval.
func (UniqueIDs) Stream(Inputs) Stream {
	st := &idStream{firstBad: -1}
	st.pairs = newPairStream(func(op *history.Op) bool { return op.F == "next-id" }, st.pair)
	return st
}

type idStream struct {
	pairs                      *pairStream
	got                        []idOp
	n, fails, unknown, badJSON int
	firstBad                   opRef
}

func (st *idStream) Observe(op *history.Op) { st.pairs.observe(op) }

func (st *idStream) pair(inv, c *history.Op) {
	st.n++
	if c == nil {
		st.unknown++
		return
	}
	switch c.Kind {
	case history.Fail:
		st.fails++
		return
	case history.Info:
		st.unknown++
		return
	}
	id, ok := parseID(c.Value)
	if !ok {
		st.badJSON++
		if st.firstBad < 0 {
			st.firstBad = c.Index
		}
		return
	}
	st.got = append(st.got, idOp{id: id, call: inv.Time, ret: c.Time, inv: inv.Index, comp: c.Index})
}

func (st *idStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	res := Result{Checker: UniqueIDs{}.Name(), Verdict: Unknown}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
	if st.n == 0 {
		res.Summary = "no next-id operations: nothing to check"
		return res
	}
	got, fails, unknown, badJSON := st.got, st.fails, st.unknown, st.badJSON
	st.got = nil
	// In invocation order, as the ops were numbered before streaming.
	slices.SortFunc(got, func(a, b idOp) int { return cmp.Compare(a.inv, b.inv) })
	// The evidence: pairs of ops, described once the entries are read
	// again.
	type evidence struct {
		dup  bool
		a, b idOp
	}
	var evs []evidence
	if err := ctx.Err(); err != nil {
		res.Summary = "stopped: " + err.Error()
		return res
	}
	counts := fmt.Sprintf("%d next-id ops: %d ok, %d failed, %d unknown", st.n, len(got), fails, unknown)
	if badJSON > 0 {
		counts += fmt.Sprintf(", %d with unreadable results", badJSON)
		line := fmt.Sprintf("%d ok next-id results are not {\"id\": integer}", badJSON)
		if ops, err := lookup(ctx, pass, st.firstBad); err != nil {
			line += " (" + err.Error() + ")"
		} else {
			line += fmt.Sprintf(" (first: #%d %s)", st.firstBad, ops[st.firstBad].Value)
		}
		res.Evidence = append(res.Evidence, line+"; they were not checked")
	}

	// Duplicates: sort by id (then by completion, for stable evidence).
	byID := slices.Clone(got)
	slices.SortFunc(byID, func(a, b idOp) int {
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.comp, b.comp))
	})
	dups := 0
	for i := 1; i < len(byID); i++ {
		a, b := byID[i-1], byID[i]
		if a.id != b.id {
			continue
		}
		dups++
		res.proven(max(a.ret, b.ret))
		if dups <= maxEvidence {
			evs = append(evs, evidence{true, a, b})
		}
	}
	if err := ctx.Err(); err != nil {
		res.Summary = "stopped: " + err.Error()
		return res
	}

	// Real-time order: sweep the invocations in time order, folding in
	// every op that completed strictly before (intervals are closed: equal
	// times are concurrent), keeping the largest id seen so far.
	byRet := byID // reuse the storage
	copy(byRet, got)
	slices.SortFunc(byRet, func(a, b idOp) int { return cmp.Compare(a.ret, b.ret) })
	byCall := got
	slices.SortFunc(byCall, func(a, b idOp) int { return cmp.Compare(a.call, b.call) })
	order := 0
	var best idOp
	have := false
	j := 0
	for _, b := range byCall {
		for ; j < len(byRet) && byRet[j].ret < b.call; j++ {
			if !have || byRet[j].id > best.id {
				best, have = byRet[j], true
			}
		}
		if have && best.id > b.id {
			order++
			res.proven(b.ret)
			if order <= maxEvidence {
				evs = append(evs, evidence{false, best, b})
			}
		}
	}
	if len(evs) > 0 {
		var refs []opRef
		for _, e := range evs {
			refs = append(refs, e.a.inv, e.a.comp, e.b.inv, e.b.comp)
		}
		ops, err := lookup(ctx, pass, refs...)
		if err != nil {
			res.Evidence = append(res.Evidence, err.Error())
		}
		for _, e := range evs {
			switch {
			case err != nil:
			case e.dup:
				res.Evidence = append(res.Evidence, fmt.Sprintf("id %d handed out twice: %s and %s", e.a.id, describeIDOp(ops, e.a), describeIDOp(ops, e.b)))
			default:
				res.Evidence = append(res.Evidence, fmt.Sprintf("ids went backwards in real time: %s completed with id %d before %s was invoked, which got the smaller id %d", describeIDOp(ops, e.a), e.a.id, describeIDOp(ops, e.b), e.b.id))
			}
		}
	}

	switch {
	case dups > 0 || order > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d ids handed out more than once, %d ops got an id smaller than one returned before they were invoked (%s)", dups, order, counts)
		if dups > maxEvidence || order > maxEvidence {
			res.Evidence = append(res.Evidence, fmt.Sprintf("(evidence lists the first %d of each kind)", maxEvidence))
		}
	case len(got) == 0:
		res.Summary = counts + ": no ids returned, nothing to check"
	case badJSON > 0:
		res.Summary = counts + ": the readable ids are unique and increase in real time, but some results were unreadable"
	default:
		res.Verdict = Valid
		res.Summary = counts + ": every id unique and increasing in real time"
	}
	return res
}

// describeIDOp names an op for the evidence.
func describeIDOp(ops map[int64]history.Op, o idOp) string {
	c := ops[o.comp]
	s := fmt.Sprintf("op #%d/#%d (process %d, node %s, invoked t=%d, ok t=%d", o.inv, o.comp, c.Process, ops[o.inv].Node, o.call, o.ret)
	if c.Reply != nil && c.Reply.Singleton != "" {
		s += ", singleton " + c.Reply.Singleton
	}
	return s + ")"
}

// parseID reads {"id": n}, with a fast path for the compact form the
// harness writes.
func parseID(v json.RawMessage) (int64, bool) {
	const prefix = `{"id":`
	if len(v) > len(prefix)+1 && string(v[:len(prefix)]) == prefix && v[len(v)-1] == '}' {
		if n, ok := parseInt(v[len(prefix) : len(v)-1]); ok {
			return n, true
		}
	}
	var r struct {
		ID *json.Number `json:"id"`
	}
	if err := json.Unmarshal(v, &r); err != nil || r.ID == nil {
		return 0, false
	}
	n, err := r.ID.Int64()
	return n, err == nil
}

// parseInt parses a decimal int64 (optional minus sign, digits only).
func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false // longer numbers take the slow path
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

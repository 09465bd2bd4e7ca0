package checker

// Expectation checkers: a scenario adds them to its workload's checkers to
// check what it promises about its own faults (shards moved to a joined
// node, the surviving side of a split serves, requests wait out a cut).
// They judge only the faults they are given; a history without such a
// fault is unknown, never valid.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shardtest/shardtest/history"
)

// faultSpan is one inject of a fault and its heal, read from the nemesis
// entries.
type faultSpan struct {
	fault string
	// inject is the inject entry's index in File.Ops; began when the
	// harness started injecting, at when the fault had taken effect.
	inject    int
	began, at int64
	// healAt is when the heal took effect (healed), or the end of the
	// history (not healed).
	healAt int64
	healed bool
	// injectErr and healErr are the entries' errors; failed: the inject
	// did nothing.
	injectErr, healErr string
	failed             bool
	targets            []string
}

func (s faultSpan) String() string {
	return fmt.Sprintf("%s injected at %.1f s", s.fault, nsToSecs(s.at))
}

// faultSpans are the injects (history.Faults) of the faults match accepts,
// with their heals; failed injects are kept (callers skip them, saying
// so); unhealed ones end at the end of the history.
// end is the history's latest time (historyEnd).
func faultSpans(ops []history.Op, end int64, match func(string) bool) []faultSpan {
	all, _ := history.Faults(ops)
	var spans []faultSpan
	for _, f := range all {
		if !match(f.Fault()) {
			continue
		}
		s := faultSpan{fault: f.Fault(), inject: f.Inject.Index, began: f.Inject.Began, at: f.Inject.At,
			healAt: max(end, f.Inject.At), injectErr: f.Inject.Error, failed: f.Failed(), targets: f.Inject.Nodes}
		if f.Heal != nil {
			// The fault ends when its heal begins (a restart takes effect
			// at once, long before the heal returns).
			s.healAt, s.healed, s.healErr = max(f.Heal.Began, s.at), true, f.Heal.Error
		}
		spans = append(spans, s)
	}
	return spans
}

// historyEnd is the latest time in the history (0 when empty).
func historyEnd(ops []history.Op) int64 {
	var end int64
	for _, op := range ops {
		end = max(end, op.Time)
	}
	return end
}

func hasPrefix(prefix string) func(string) bool {
	return func(f string) bool { return strings.HasPrefix(f, prefix) }
}

func stopped(res Result, err error) Result {
	res.Verdict, res.Summary, res.Evidence = Unknown, "stopped: "+err.Error(), nil
	return res
}

// ShardsMoved checks, from node events, that shards rebalance to a joined
// node: for every member:join fault (its target is the new node), the
// node's region must have started at least Min distinct shards (entity
// type and shard) while it was a member, i.e. with a shard-started event
// it logged (its member, or the polled node when the event names no
// member) whose window reaches into [the inject's beginning, the heal]
// (the end of the history when never healed). Windows, not Lo alone: a
// node's first polled events carry Lo 0. Each event counts for the latest
// join of its node that began before the harness received it. Failed
// injects, and joined nodes of which no event was recorded, are not
// judged; unknown when no join was judged or no node events were recorded.
type ShardsMoved struct {
	// Min is the least number of shards each joined node must start; 0
	// (or less) means 2.
	Min int
}

// Name implements Checker.
func (ShardsMoved) Name() string { return "shards-moved" }

// Check implements Checker.
func (c ShardsMoved) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return c.judge(ctx, h.Ops, historyEnd(h.Ops), in)
}

// Stream implements Streamer: of the history it needs only the joins (and
// its end); the rest is in the node events.
func (c ShardsMoved) Stream(in Inputs) Stream {
	s := &outlineStream{}
	s.check = func(ctx context.Context, h *history.File) Result { return c.judge(ctx, h.Ops, s.o.latest, in) }
	return s
}

// judge checks the joins among ops (the history, or its outline), whose
// latest time is end.
func (c ShardsMoved) judge(ctx context.Context, ops []history.Op, end int64, in Inputs) Result {
	res := Result{Checker: c.Name(), Verdict: Unknown}
	want := c.Min
	if want <= 0 {
		want = 2
	}
	if err := ctx.Err(); err != nil {
		return stopped(res, err)
	}
	spans := faultSpans(ops, end, func(f string) bool { return f == "member:join" })
	var notes []string
	type join struct {
		span   faultSpan
		node   string
		judged bool
		shards map[string]bool
		logged int // events the node logged while it was a member
	}
	byNode := map[string][]*join{}
	var joins []*join
	for _, s := range spans {
		j := &join{span: s, shards: map[string]bool{}}
		if len(s.targets) > 0 {
			j.node = s.targets[0]
		}
		switch {
		case s.injectErr != "":
			notes = append(notes, fmt.Sprintf("%s: not judged, the inject failed: %s", s, s.injectErr))
		case j.node == "":
			notes = append(notes, fmt.Sprintf("%s: not judged, the entry names no node", s))
		default:
			j.judged = true
		}
		joins = append(joins, j)
		if j.node != "" {
			byNode[j.node] = append(byNode[j.node], j)
		}
	}
	judged := 0
	for _, j := range joins {
		if j.judged {
			judged++
		}
	}
	if judged == 0 {
		res.Summary = "nothing to judge: no member:join fault was injected"
		if len(spans) > 0 {
			res.Summary = fmt.Sprintf("nothing to judge: none of the %d member:join injects took effect", len(spans))
		}
		res.Evidence = limit(notes)
		return res
	}
	evs := in.Events
	switch {
	case in.EventsErr != nil:
		res.Summary = "node events unreadable: " + in.EventsErr.Error()
		return res
	case evs == nil:
		res.Summary = "no node events were recorded (the implementation lacks the events capability, or an older run): cannot see shards start"
		return res
	}
	if evs.Truncated {
		notes = append(notes, "events.jsonl ends with a cut-off line (the harness stopped while writing it); it was left out")
	}
	for _, js := range byNode {
		sort.SliceStable(js, func(a, b int) bool { return js[a].span.began < js[b].span.began })
	}
	// joinOf is the latest join of node that began by the time the harness
	// had e, if e may have happened before its heal.
	joinOf := func(node string, e *history.NodeEvent) *join {
		js := byNode[node]
		k := sort.Search(len(js), func(k int) bool { return js[k].span.began > e.Hi }) - 1
		if k < 0 || e.Lo > js[k].span.healAt {
			return nil
		}
		return js[k]
	}
	for i := range evs.Events {
		if i%4096 == 0 && ctx.Err() != nil {
			return stopped(res, ctx.Err())
		}
		e := &evs.Events[i]
		if j := joinOf(e.Node, e); j != nil {
			j.logged++
		}
		if e.Type != "shard-started" || e.Shard == "" {
			continue
		}
		node := e.Node
		if e.Member != "" {
			node, _, _ = strings.Cut(e.Member, "@")
		}
		if j := joinOf(node, e); j != nil {
			j.shards[e.EntityType+"/"+e.Shard] = true
		}
	}
	if len(evs.Events) == 0 {
		res.Summary = "no node events were recorded: cannot see shards start"
		res.Evidence = notes
		return res
	}
	var bad, good []string
	for _, j := range joins {
		if !j.judged {
			continue
		}
		if j.logged == 0 && len(j.shards) == 0 {
			// Not even its member-up: the harness never read its log.
			notes = append(notes, fmt.Sprintf("%s joined at %.1f s: not judged, no events from it were recorded", j.node, nsToSecs(j.span.at)))
			judged--
			continue
		}
		shards := make([]string, 0, len(j.shards))
		for s := range j.shards {
			shards = append(shards, s)
		}
		sort.Strings(shards)
		list := shards
		if len(list) > maxEvidence {
			list = append(list[:maxEvidence:maxEvidence], fmt.Sprintf("... %d more", len(shards)-maxEvidence))
		}
		until := "before it left"
		if !j.span.healed {
			until = "by the end of the history (it never left)"
		}
		plural := "s"
		if len(shards) == 1 {
			plural = ""
		}
		line := fmt.Sprintf("%s joined at %.1f s: %d shard%s started on it %s (want %d): [%s]",
			j.node, nsToSecs(j.span.at), len(shards), plural, until, want, strings.Join(list, ", "))
		if len(shards) < want {
			bad = append(bad, line)
			res.proven(j.span.healAt) // by its leave, it had not got them
		} else {
			good = append(good, line)
		}
	}
	res.Evidence = append(res.Evidence, limit(notes)...)
	if judged == 0 {
		res.Summary = "nothing to judge: no events were recorded from any joined node"
		return res
	}
	if len(bad) > 0 {
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d of %d joined nodes started fewer than %d shards", len(bad), judged, want)
		res.Evidence = append(res.Evidence, limit(bad)...)
		return res
	}
	res.Verdict = Valid
	res.Summary = fmt.Sprintf("every joined node (%d joins) started at least %d shards", judged, want)
	res.Evidence = append(res.Evidence, limit(good)...)
	return res
}

// ServedDuringFault checks the scenario's promise that the surviving side
// of a split serves every entity once the resolver has acted: Settle after
// each fault whose name starts with Fault took effect (failure detection,
// stable-after, shard reallocation), until its heal, every entity that
// clients tried must be served at least once. Operations sent to the
// downed side fail, but workers rotate over all nodes, so each entity is
// tried on the surviving side too.
//
// In each window [inject + Settle, heal] (windows shorter than 1 s are not
// judged), the entity operations (not tells; idgen's next-id counts as one entity, the id-generator) invoked in it and completed by
// the heal are an entity's attempts; one of them must be ok. Operations
// still in flight at the heal had no chance and are left out. The nodes
// that served any operation in the window are taken as the surviving side:
// an entity whose attempts all went to other nodes is not held to the
// promise (unless no node served anything, when every entity is). Failed
// injects and faults never healed are not judged; unknown when no window
// was judged.
type ServedDuringFault struct {
	// Fault is a fault-name prefix, e.g. "partition:".
	Fault string
	// Settle is how long after the inject took effect the promise starts.
	Settle time.Duration
}

// Name implements Checker.
func (ServedDuringFault) Name() string { return "served-during-fault" }

// servedKey is what ServedDuringFault holds to its promise an operation is
// an attempt on: its entity, or, for the idgen workload's next-id, the
// id-generator singleton (the surviving side must run one); "" for the
// rest (tells: no answer to judge).
func servedKey(op *history.Op) string {
	switch {
	case op.Entity != "" && op.F != "tell":
		return op.Entity
	case op.Entity == "" && op.F == "next-id":
		return "the id-generator"
	}
	return ""
}

// minServedWindow is the shortest window ServedDuringFault judges.
const minServedWindow = time.Second

// Check implements Checker.
func (c ServedDuringFault) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, c, h, in)
}

// Stream implements Streamer: the outline, and per entity operation its
// interval, key, node and whether it was served.
func (c ServedDuringFault) Stream(Inputs) Stream {
	st := &servedStream{c: c, keys: idTable{}, nodes: idTable{}}
	st.pairs = newPairStream(func(op *history.Op) bool { return servedKey(op) != "" }, st.pair)
	return st
}

// idTable numbers strings in the order met.
type idTable struct {
	ids   map[string]int32
	names []string
}

func (t *idTable) id(s string) int32 {
	if t.ids == nil {
		t.ids = map[string]int32{}
	}
	if i, ok := t.ids[s]; ok {
		return i
	}
	i := int32(len(t.names))
	t.ids[s] = i
	t.names = append(t.names, s)
	return i
}

// servedRec is an entity operation as ServedDuringFault keeps it: ret is
// -1 when it never completed.
type servedRec struct {
	call, ret, inv int64
	key, node      int32
	ok             bool
}

// byInvokeTime orders records by invocation time, ties in invocation
// order.
func byInvokeTime[T any](recs []T, inv, call func(*T) int64) {
	slices.SortFunc(recs, func(a, b T) int { return cmp.Compare(inv(&a), inv(&b)) })
	slices.SortStableFunc(recs, func(a, b T) int { return cmp.Compare(call(&a), call(&b)) })
}

type servedStream struct {
	c           ServedDuringFault
	pairs       *pairStream
	outline     outline
	recs        []servedRec
	keys, nodes idTable
}

func (st *servedStream) Observe(op *history.Op) {
	st.outline.observe(op)
	st.pairs.observe(op)
}

func (st *servedStream) pair(inv, comp *history.Op) {
	r := servedRec{call: inv.Time, ret: -1, inv: inv.Index, key: st.keys.id(servedKey(inv)), node: st.nodes.id(inv.Node)}
	if comp != nil {
		r.ret, r.ok = comp.Time, comp.Kind == history.OK
	}
	st.recs = append(st.recs, r)
}

func (st *servedStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	c := st.c
	res := Result{Checker: c.Name(), Verdict: Unknown}
	if err := ctx.Err(); err != nil {
		return stopped(res, err)
	}
	spans := faultSpans(st.outline.ops, st.outline.latest, hasPrefix(c.Fault))
	if len(spans) == 0 {
		res.Summary = fmt.Sprintf("nothing to judge: no fault named %s* was injected", c.Fault)
		return res
	}
	recs := st.recs
	byInvokeTime(recs, func(r *servedRec) int64 { return r.inv }, func(r *servedRec) int64 { return r.call })
	var notes, bad []string
	windows, judgedWindows, badWindows := 0, 0, 0
	for _, s := range spans {
		if err := ctx.Err(); err != nil {
			return stopped(res, err)
		}
		from, to := s.at+int64(c.Settle), s.healAt
		switch {
		case s.injectErr != "":
			notes = append(notes, fmt.Sprintf("%s: not judged, the inject failed: %s", s, s.injectErr))
			continue
		case !s.healed:
			notes = append(notes, fmt.Sprintf("%s: not judged, never healed", s))
			continue
		case to-from < int64(minServedWindow):
			notes = append(notes, fmt.Sprintf("%s, healed at %.1f s: not judged, less than %v left after the settle time %v", s, nsToSecs(to), minServedWindow, c.Settle))
			continue
		}
		windows++
		type entity struct {
			attempts, inFlight int
			served             bool
			nodes              map[string]bool
		}
		ents := map[string]*entity{}
		servedBy := map[string]bool{}
		lo := sort.Search(len(recs), func(i int) bool { return recs[i].call >= from })
		for i := lo; i < len(recs) && recs[i].call <= to; i++ {
			if i%4096 == 0 && ctx.Err() != nil {
				return stopped(res, ctx.Err())
			}
			r := &recs[i]
			key, node := st.keys.names[r.key], st.nodes.names[r.node]
			e := ents[key]
			if e == nil {
				e = &entity{nodes: map[string]bool{}}
				ents[key] = e
			}
			if r.ret < 0 || r.ret > to {
				e.inFlight++
				continue
			}
			e.attempts++
			e.nodes[node] = true
			if r.ok {
				e.served = true
				servedBy[node] = true
			}
		}
		label := fmt.Sprintf("%s, judged from %.1f s to its heal at %.1f s", s, nsToSecs(from), nsToSecs(to))
		names := make([]string, 0, len(ents))
		for n := range ents {
			names = append(names, n)
		}
		sort.Strings(names)
		judged, excused := 0, 0
		var never []string
		for _, n := range names {
			e := ents[n]
			if e.attempts == 0 {
				continue
			}
			if !e.served && len(servedBy) > 0 && !anyIn(e.nodes, servedBy) {
				excused++
				continue
			}
			judged++
			if !e.served {
				never = append(never, fmt.Sprintf("%s: %s never served: %d attempts, none ok, sent to %s", label, n, e.attempts, strings.Join(sortedKeys(e.nodes), ", ")))
			}
		}
		if judged == 0 {
			notes = append(notes, fmt.Sprintf("%s: not judged, no entity operation completed in the window", label))
			continue
		}
		judgedWindows++
		surviving := "no node served anything"
		if len(servedBy) > 0 {
			surviving = "served by " + strings.Join(sortedKeys(servedBy), ", ")
		}
		summary := fmt.Sprintf("%s: %d of %d entities served (%s)", label, judged-len(never), judged, surviving)
		if excused > 0 {
			summary += fmt.Sprintf("; %d entities tried only on nodes that served nothing (the downed side) not judged", excused)
		}
		notes = append(notes, summary)
		if len(never) > 0 {
			badWindows++
			bad = append(bad, never...)
			res.proven(to)
		}
	}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
	res.Evidence = append(res.Evidence, limit(notes)...)
	switch {
	case len(bad) > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d entities never served in %d of %d judged %s* windows", len(bad), badWindows, judgedWindows, c.Fault)
		res.Evidence = append(res.Evidence, limit(bad)...)
	case judgedWindows == 0:
		res.Summary = fmt.Sprintf("nothing to judge: none of the %d %s* faults left a window with completed entity operations", len(spans), c.Fault)
	default:
		res.Verdict = Valid
		res.Summary = fmt.Sprintf("every entity tried was served in each of %d %s* windows (from %v after the inject to the heal)", judgedWindows, c.Fault, c.Settle)
	}
	return res
}

func anyIn(a, b map[string]bool) bool {
	for k := range a {
		if b[k] {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// AnsweredAfterHeal checks the scenario's promise that requests needing
// the cut-off resource (the journal) are answered, when the operation
// timeout outlasts the fault: every client operation (not tells) invoked
// from the moment a fault whose name starts with Fault had taken effect
// (its inject entry) until its heal began gets a reply from the node — a
// result, a definite failure, or an error reply with outcome unknown (a
// node may answer unknown-outcome after its own timeout, as the protocol
// allows) — never silence (the harness's timeout or a lost connection)
// and never none (unless the history was cut off, when operations without
// a completion are skipped). docs/protocol.md states the demand: a node
// answers every request within its own time limit. Operations already under
// way when the fault took effect are not judged: a request cut midway has
// an unknown outcome. Failed injects, failed heals and faults never healed
// are not judged; unknown when no operation was judged.
type AnsweredAfterHeal struct {
	// Fault is a fault-name prefix, e.g. "partition:journal".
	Fault string
}

// Name implements Checker.
func (AnsweredAfterHeal) Name() string { return "answered-after-heal" }

// Check implements Checker.
func (c AnsweredAfterHeal) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, c, h, in)
}

// Stream implements Streamer: the outline, and per operation its interval
// and whether the node answered.
func (c AnsweredAfterHeal) Stream(Inputs) Stream {
	st := &answeredStream{c: c}
	st.pairs = newPairStream(func(op *history.Op) bool { return op.F != "tell" }, st.pair)
	return st
}

// answeredRec is an operation as AnsweredAfterHeal keeps it: comp is -1
// when it never completed; silent, when its completion carries no reply.
type answeredRec struct {
	call, ret, inv, comp int64
	silent               bool
}

type answeredStream struct {
	c       AnsweredAfterHeal
	pairs   *pairStream
	outline outline
	recs    []answeredRec
}

func (st *answeredStream) Observe(op *history.Op) {
	st.outline.observe(op)
	st.pairs.observe(op)
}

func (st *answeredStream) pair(inv, comp *history.Op) {
	r := answeredRec{call: inv.Time, ret: -1, inv: inv.Index, comp: -1}
	if comp != nil {
		r.ret, r.comp, r.silent = comp.Time, comp.Index, comp.Kind == history.Info && !comp.Answered()
	}
	st.recs = append(st.recs, r)
}

// lostOp is an operation that got no answer during fault span.
type lostOp struct {
	span int
	rec  answeredRec
}

func (st *answeredStream) Result(ctx context.Context, pass *Pass) Result {
	st.pairs.finish()
	c := st.c
	res := Result{Checker: c.Name(), Verdict: Unknown}
	if err := ctx.Err(); err != nil {
		return stopped(res, err)
	}
	h := st.outline.file(pass)
	spans := faultSpans(h.Ops, st.outline.latest, hasPrefix(c.Fault))
	if len(spans) == 0 {
		res.Summary = fmt.Sprintf("nothing to judge: no fault named %s* was injected", c.Fault)
		return res
	}
	recs := st.recs
	byInvokeTime(recs, func(r *answeredRec) int64 { return r.inv }, func(r *answeredRec) int64 { return r.call })
	var notes []string
	var lostOps []lostOp
	judged, skipped := 0, 0
	ended, _ := h.Ended()
	for si, s := range spans {
		if err := ctx.Err(); err != nil {
			return stopped(res, err)
		}
		switch {
		case s.injectErr != "":
			notes = append(notes, fmt.Sprintf("%s: not judged, the inject failed: %s", s, s.injectErr))
			continue
		case !s.healed:
			notes = append(notes, fmt.Sprintf("%s: not judged, never healed", s))
			continue
		case s.healErr != "":
			notes = append(notes, fmt.Sprintf("%s: not judged, the heal at %.1f s failed: %s", s, nsToSecs(s.healAt), s.healErr))
			continue
		}
		n, lost := 0, 0
		// From when the cut had taken effect everywhere: an operation
		// already under way then may have had its request to the
		// resource cut midway, and its outcome is honestly unknown.
		lo := sort.Search(len(recs), func(i int) bool { return recs[i].call >= s.at })
		for i := lo; i < len(recs) && recs[i].call <= s.healAt; i++ {
			if i%4096 == 0 && ctx.Err() != nil {
				return stopped(res, ctx.Err())
			}
			r := recs[i]
			switch {
			case r.comp < 0 && !ended:
				skipped++
				continue
			case r.comp >= 0 && !r.silent:
				n++
				continue
			}
			n++
			lost++
			if r.comp >= 0 {
				res.proven(r.ret)
			} else {
				res.proven(st.outline.latest)
			}
			lostOps = append(lostOps, lostOp{si, r})
		}
		judged += n
		notes = append(notes, fmt.Sprintf("%s (began %.3f s), healed at %.1f s: %d of %d operations invoked after it took effect answered", s, nsToSecs(s.began), nsToSecs(s.healAt), n-lost, n))
	}
	// The evidence of the first lost operations, their entries read again.
	var bad []string
	if len(lostOps) > 0 {
		var refs []opRef
		for _, l := range lostOps[:min(len(lostOps), maxEvidence)] {
			refs = append(refs, l.rec.inv, l.rec.comp)
		}
		ops, err := lookup(ctx, pass, refs...)
		for k, l := range lostOps {
			if k == maxEvidence || err != nil {
				if err != nil {
					bad = append(bad, err.Error())
				}
				if more := len(lostOps) - k; more > 0 {
					bad = append(bad, fmt.Sprintf("... and %d more", more))
				}
				break
			}
			s, inv := spans[l.span], ops[l.rec.inv]
			what := "never completed"
			if l.rec.comp >= 0 {
				what = fmt.Sprintf("no reply by %.3f s: %s", nsToSecs(l.rec.ret), ops[l.rec.comp].Error)
			}
			ent := inv.Entity
			if ent == "" {
				ent = "-"
			}
			bad = append(bad, fmt.Sprintf("%s, healed at %.1f s: %s %s (#%d, process %d, node %s) invoked at %.3f s got no answer: %s",
				s, nsToSecs(s.healAt), inv.F, ent, l.rec.inv, inv.Process, inv.Node, nsToSecs(l.rec.call), what))
		}
	}
	res.Evidence = append(res.Evidence, pass.truncatedNote()...)
	res.Evidence = append(res.Evidence, st.pairs.evidence()...)
	if skipped > 0 {
		res.Evidence = append(res.Evidence, fmt.Sprintf("%d operations with no completion in the cut-off history were not judged", skipped))
	}
	res.Evidence = append(res.Evidence, limit(notes)...)
	switch {
	case len(lostOps) > 0:
		res.Verdict = Invalid
		res.Summary = fmt.Sprintf("%d of %d operations invoked during %s* faults got no answer", len(lostOps), judged, c.Fault)
		res.Evidence = append(res.Evidence, bad...)
	case judged == 0:
		res.Summary = fmt.Sprintf("nothing to judge: no operation was invoked during the %d %s* faults", len(spans), c.Fault)
	default:
		res.Verdict = Valid
		res.Summary = fmt.Sprintf("all %d operations invoked during %s* faults got an answer", judged, c.Fault)
	}
	return res
}

// Passivated checks a passivation scenario's premise: entities stopped and
// started again under traffic, so what the workload's checkers found says
// something about messages held while an entity passivates. At least Min
// entities (0 or less: 1) must have been served, in ok replies, by two or
// more incarnations in turn. Unknown, never valid, when none was: the
// implementation may ignore the passivate-idle-after setting (it may), and
// then the scenario showed nothing about passivation.
type Passivated struct {
	Min int
}

// Name implements Checker.
func (Passivated) Name() string { return "passivated" }

// Check implements Checker.
func (c Passivated) Check(ctx context.Context, h *history.File, in Inputs) Result {
	return checkInMemory(ctx, c, h, in)
}

// Stream implements Streamer: per entity the incarnations that served it.
func (c Passivated) Stream(Inputs) Stream {
	return &passivatedStream{c: c, incs: map[string]map[string]bool{}}
}

type passivatedStream struct {
	c    Passivated
	incs map[string]map[string]bool // entity -> incarnations that served it
}

func (st *passivatedStream) Observe(op *history.Op) {
	if op.Kind != history.OK || op.Entity == "" || op.Reply == nil || op.Reply.EntityIncarnation == "" {
		return
	}
	m := st.incs[op.Entity]
	if m == nil {
		m = map[string]bool{}
		st.incs[op.Entity] = m
	}
	m[op.Reply.EntityIncarnation] = true
}

func (st *passivatedStream) Result(ctx context.Context, _ *Pass) Result {
	c, incs := st.c, st.incs
	res := Result{Checker: c.Name(), Verdict: Unknown}
	if err := ctx.Err(); err != nil {
		return stopped(res, err)
	}
	want := max(c.Min, 1)
	var again []string
	most := 0
	for e, m := range incs {
		if len(m) > 1 {
			again = append(again, e)
		}
		most = max(most, len(m))
	}
	sort.Strings(again)
	stats := fmt.Sprintf("%d of %d entities served by more than one incarnation (at most %d)", len(again), len(incs), most)
	switch {
	case len(incs) == 0:
		res.Summary = "nothing to judge: no ok reply named an entity incarnation"
	case len(again) < want:
		res.Summary = fmt.Sprintf("nothing shown about passivation: %s, want %d (the implementation may ignore passivate-idle-after)", stats, want)
	default:
		res.Verdict = Valid
		res.Summary = "entities passivated and started again under traffic: " + stats
		res.Evidence = limit(again)
	}
	return res
}

package checker

import (
	"context"
	"fmt"
	"time"

	"github.com/shardtest/shardtest/history"
)

// Recovered checks that the cluster recovers once every fault is healed:
// within the harness's recovery timeout after the last heal, every node is
// ready, reaches every member and counts every node up (the recovery
// outcome the final phase's history entry records). A cluster that never
// re-forms after the faults — every request failing long after the heal —
// is a liveness failure the other checkers cannot see: they judge what was
// answered, and excuse what failed near a fault. Runs with faults only;
// unknown when the history records no outcome (an older history, or one
// that ended before its final phase).
type Recovered struct{}

// Name implements Checker.
func (Recovered) Name() string { return "recovered" }

// Stream implements Streamer: it reads only the final phase and the heals.
func (c Recovered) Stream(in Inputs) Stream {
	return &outlineStream{check: func(ctx context.Context, h *history.File) Result { return c.Check(ctx, h, in) }}
}

// Check implements Checker.
func (Recovered) Check(ctx context.Context, h *history.File, _ Inputs) Result {
	res := Result{Checker: "recovered", Verdict: Unknown}
	if err := ctx.Err(); err != nil {
		return stopped(res, err)
	}
	r, ok := h.Recovery()
	if !ok {
		res.Summary = "nothing to judge: the history records no recovery outcome (no final phase after faults, or an older harness)"
		return res
	}
	waited := time.Duration(r.Waited).Round(100 * time.Millisecond)
	if r.Converged {
		res.Verdict = Valid
		res.Summary = fmt.Sprintf("the cluster had converged %v after the last heal, when the harness saw it so (every node ready, reaching and counting every member up)", waited)
		return res
	}
	res.Verdict = Invalid
	res.Summary = fmt.Sprintf("the cluster did not converge in the %v after the last heal: %s", waited, r.Why)
	res.Evidence = []string{"after every fault was healed the cluster did not re-form: " + r.Why}
	if at := lastHeal(h); at > 0 {
		res.FirstViolation = at + r.Waited
	}
	return res
}

// lastHeal returns the time of the history's last heal entry, or 0.
func lastHeal(h *history.File) int64 {
	var at int64
	for i := range h.Ops {
		if e, ok := history.ReadNemesis(h.Ops, i); ok && e.Action == "heal" && e.At > at {
			at = e.At
		}
	}
	return at
}

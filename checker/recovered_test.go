package checker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/history"
)

func TestRecovered(t *testing.T) {
	final := func(r *history.Recovery) history.Op {
		op := history.Op{Kind: history.Phase, Process: -1, F: history.PhaseFinal, Time: 40 * sec}
		if r != nil {
			op.Value, _ = json.Marshal(r)
		}
		return op
	}
	heal := (&hb{}).fault(1*sec, "kill:majority", "inject").fault(20*sec, "kill:majority", "heal")
	tests := []struct {
		name    string
		final   *history.Op
		want    Verdict
		summary string
	}{
		{"no final phase", nil, Unknown, "records no recovery outcome"},
		{"a final phase without an outcome (older harness)", ptr(final(nil)), Unknown, "records no recovery outcome"},
		{"converged", ptr(final(&history.Recovery{Converged: true, Waited: int64(3 * sec)})), Valid, "converged 3s after"},
		{"never converged", ptr(final(&history.Recovery{Waited: int64(120 * sec), Why: "n1 not ready: joining"})), Invalid, "did not converge in the 2m0s after the last heal: n1 not ready: joining"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &history.File{Ops: append([]history.Op(nil), heal.ops...)}
			if tt.final != nil {
				h.Ops = append(h.Ops, *tt.final)
			}
			res := Recovered{}.Check(context.Background(), h, Inputs{Out: t.TempDir()})
			if res.Verdict != tt.want || !strings.Contains(res.Summary, tt.summary) {
				t.Fatalf("got %s %q, want %s containing %q", res.Verdict, res.Summary, tt.want, tt.summary)
			}
			if tt.want == Invalid && res.FirstViolation != int64(140*sec) {
				t.Errorf("first violation at %d, want the last heal plus the wait", res.FirstViolation)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

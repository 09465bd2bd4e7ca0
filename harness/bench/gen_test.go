package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/history"
)

// TestGeneratedHistoryIsAHealthyRun: every checker of the register
// workload says valid on a generated history (so bench check measures the
// checkers' whole path, not an early exit on a violation), with fault
// windows and unknown outcomes in it; the baseline finds every entity
// linearizable.
func TestGeneratedHistoryIsAHealthyRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := GenRegister(dir, RegisterOptions{Ops: 150_000, Entities: 500, Workers: 32, PerEntity: 4, InfoRate: 0.01, FailRate: 0.01, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	h, err := history.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	s := h.Summarize()
	if s.Info == 0 || s.Fail == 0 || s.Nemesis < 2 {
		t.Fatalf("want unknown and failed outcomes inside fault windows: %+v", s)
	}
	var o run.Options
	b, _ := os.ReadFile(filepath.Join(dir, "test.json"))
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	verdict, results := run.Check(context.Background(), o, h, checker.ReadInputs(dir))
	if verdict != checker.Valid {
		for _, r := range results {
			t.Logf("%s %s: %s %v", r.Checker, r.Verdict, r.Summary, r.Evidence)
		}
		t.Fatalf("verdict %s on a generated healthy run", verdict)
	}
	ok, illegal, err := checker.BaselineRegister(context.Background(), bytes.NewReader(mustRead(t, filepath.Join(dir, "history.jsonl"))))
	if err != nil || illegal != 0 || ok != 500 {
		t.Fatalf("baseline: %d ok, %d illegal, %v", ok, illegal, err)
	}
}

// TestBaselineFindsAStaleRead: the baseline is a real check, not a
// decoder: a read that returns a value never written makes its entity
// illegal.
func TestBaselineFindsAStaleRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := GenRegister(dir, RegisterOptions{Ops: 2000, Entities: 50, Workers: 8, PerEntity: 2, Seed: 4}); err != nil {
		t.Fatal(err)
	}
	data := string(mustRead(t, filepath.Join(dir, "history.jsonl")))
	i := strings.Index(data, `"kind":"ok","process":0,"f":"read","entity":"register/r`)
	if i < 0 {
		t.Fatal("no ok read of process 0")
	}
	j := i + strings.Index(data[i:], `"value":{"value":`)
	k := j + strings.IndexAny(data[j+len(`"value":{"value":`):], "}") + len(`"value":{"value":`)
	bad := data[:j] + `"value":{"value":987654321` + data[k:]
	_, illegal, err := checker.BaselineRegister(context.Background(), strings.NewReader(bad))
	if err != nil || illegal != 1 {
		t.Fatalf("baseline on a stale read: %d illegal, %v", illegal, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package checker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shardtest/shardtest/history"
)

// TestCheckFileJobs: judging on several goroutines (the streams on the
// pass's workers, linearizable's entities on a pool) gives the results of
// one: every verdict, summary, evidence line, first violation and file
// equal, and the visualizations written the same; an extra observer sees
// every entry once, in order. The violating history has more
// non-linearizable entities than the evidence explains (maxEvidence), so
// which ones are explained depends on the order the verdicts are taken.
func TestCheckFileJobs(t *testing.T) {
	valid := simRun(runOptions{seed: 11, clients: 16, entities: 200, ops: 10_000, step: 1_000_000, faultEvery: 2e9, faultLen: 5e8})
	broken := simRun(runOptions{seed: 12, clients: 16, entities: 200, ops: 10_000, step: 1_000_000, faultEvery: 2e9, faultLen: 5e8})
	corrupted := map[string]bool{}
	for i := range broken.Ops {
		op := &broken.Ops[i]
		if op.Kind != history.OK || !strings.Contains(string(op.Value), `"value"`) || len(corrupted) == 2*maxEvidence {
			continue
		}
		if e := invocationOf(broken.Ops, i).Entity; !corrupted[e] {
			corrupted[e] = true
			op.Value = json.RawMessage(`{"value":123456789}`) // never written
		}
	}
	if len(corrupted) != 2*maxEvidence {
		t.Fatalf("corrupted %d entities, want %d", len(corrupted), 2*maxEvidence)
	}
	cs := func() []Checker {
		return []Checker{Linearizable{}, SingleInstance{}, Liveness{}, Availability{}, Recovered{}, Passivated{Min: 1}}
	}
	for _, tc := range []struct {
		name string
		h    *history.File
	}{{"valid", valid}, {"broken", broken}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "history.jsonl")
			if err := os.WriteFile(path, encode(t, tc.h), 0o644); err != nil {
				t.Fatal(err)
			}
			check := func(jobs int) ([]Result, map[string]string) {
				out := filepath.Join(dir, fmt.Sprintf("out-%d", jobs))
				if err := os.Mkdir(out, 0o755); err != nil {
					t.Fatal(err)
				}
				var seen []int64
				rs, _, err := CheckFile(context.Background(), path, cs(), Inputs{Out: out}, FileOptions{Jobs: jobs,
					Observe: []func(*history.Op){func(op *history.Op) { seen = append(seen, op.Index) }}})
				if err != nil {
					t.Fatal(err)
				}
				if len(seen) != len(tc.h.Ops) || !slices.IsSorted(seen) || seen[0] != 0 || seen[len(seen)-1] != int64(len(seen)-1) {
					t.Fatalf("jobs %d: the observer saw %d entries, not each of %d once in order", jobs, len(seen), len(tc.h.Ops))
				}
				return rs, readTree(t, out)
			}
			one, oneFiles := check(1)
			four, fourFiles := check(4)
			for i := range one {
				if !reflect.DeepEqual(one[i], four[i]) {
					t.Errorf("%s:\njobs 1 %+v\njobs 4 %+v", one[i].Checker, one[i], four[i])
				}
			}
			if !reflect.DeepEqual(oneFiles, fourFiles) {
				t.Errorf("files written: jobs 1 %d, jobs 4 %d, or their contents differ", len(oneFiles), len(fourFiles))
			}
			lin := four[0]
			if tc.name == "valid" {
				if lin.Verdict != Valid {
					t.Fatalf("valid history: %s %s", lin.Verdict, lin.Summary)
				}
				return
			}
			if want := fmt.Sprintf("%d of 200 register entities are not linearizable", len(corrupted)); lin.Verdict != Invalid || !strings.HasPrefix(lin.Summary, want) {
				t.Fatalf("broken history with 4 jobs: %s %q, want invalid %q", lin.Verdict, lin.Summary, want)
			}
			if len(lin.Files) != maxEvidence || lin.FirstViolation == 0 {
				t.Fatalf("broken history with 4 jobs: %d visualizations (want %d), first violation %d", len(lin.Files), maxEvidence, lin.FirstViolation)
			}
		})
	}
}

// invocationOf is the invocation the completion at i completes.
func invocationOf(ops []history.Op, i int) history.Op {
	for j := i - 1; j >= 0; j-- {
		if ops[j].Process == ops[i].Process && ops[j].Kind == history.Invoke {
			return ops[j]
		}
	}
	return history.Op{}
}

// readTree reads every file under dir (none: empty), by relative path.
func readTree(t *testing.T, dir string) map[string]string {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = string(b)
		return err
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

// TestInOrder: results come in order whatever the order work finishes
// in, no more than the window is started ahead of the one being used,
// stopping early stops starting work, and one job is the plain loop.
func TestInOrder(t *testing.T) {
	for _, tc := range []struct{ jobs, n, stopAt int }{
		{1, 50, -1}, {4, 0, -1}, {4, 1, -1}, {4, 200, -1}, {2, 200, 30}, {4, 200, 0}, {1, 50, 10},
	} {
		t.Run(fmt.Sprintf("jobs%d-n%d-stop%d", tc.jobs, tc.n, tc.stopAt), func(t *testing.T) {
			var started, used, maxAhead atomic.Int64
			var got []int
			inOrder(tc.jobs, tc.n, func(i int) int {
				ahead := started.Add(1) - used.Load()
				for m := maxAhead.Load(); ahead > m && !maxAhead.CompareAndSwap(m, ahead); m = maxAhead.Load() {
				}
				if i%7 == 0 {
					for range 1000 * (i % 3) {
						_ = fmt.Sprint(i) // slower work, finishing out of order
					}
				}
				return i * i
			}, func(i, r int) bool {
				if r != i*i {
					t.Errorf("result %d for %d", r, i)
				}
				got = append(got, i)
				used.Add(1)
				return i != tc.stopAt
			})
			want := tc.n
			if tc.stopAt >= 0 && tc.stopAt < tc.n {
				want = tc.stopAt + 1
			}
			if len(got) != want || !slices.IsSorted(got) || want > 0 && got[want-1] != want-1 {
				t.Fatalf("used %v, want 0..%d in order", got, want-1)
			}
			if limit := int64(3*tc.jobs + 1); maxAhead.Load() > limit {
				t.Fatalf("%d started ahead of the one in use, want at most %d", maxAhead.Load(), limit)
			}
			if tc.jobs == 1 && started.Load() != int64(want) {
				t.Fatalf("one job started %d, want %d (the plain loop)", started.Load(), want)
			}
		})
	}
}

// TestFanOutPanic: an observer's panic on a worker is raised again on the
// caller's goroutine, as with one core, and the pass does not hang.
func TestFanOutPanic(t *testing.T) {
	n := 0
	f := newFanOut([]func(*history.Op){func(*history.Op) { n++ }, func(op *history.Op) {
		if op.Index == 1000 {
			panic("observer failed")
		}
	}}, 2)
	for i := range 5000 {
		f.add(&history.Op{Index: int64(i)})
	}
	defer func() {
		if p := recover(); p != "observer failed" {
			t.Fatalf("recovered %v", p)
		}
		if n != 5000 {
			t.Fatalf("the other observer saw %d entries, want 5000", n)
		}
	}()
	f.close()
}

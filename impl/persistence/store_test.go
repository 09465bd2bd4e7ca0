package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol/journal"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAppendReplayBasics(t *testing.T) {
	for _, impl := range journalImpls() {
		t.Run(impl.name, func(t *testing.T) {
			j, store := impl.open(t)
			ctx := context.Background()

			// Interleave two ids so Global has to order across them.
			if got := mustAppend(t, j, "a", 0, journal.NoEpoch, payload("a", 1), payload("a", 2), payload("a", 3)); got != 3 {
				t.Fatalf("first append: last seq %d, want 3", got)
			}
			if got := mustAppend(t, j, "b", 0, journal.NoEpoch, payload("b", 1)); got != 1 {
				t.Fatalf("append b: last seq %d, want 1", got)
			}
			if got := mustAppend(t, j, "a", 3, journal.NoEpoch, payload("a", 4), payload("a", 5)); got != 5 {
				t.Fatalf("second append: last seq %d, want 5", got)
			}
			if got := mustAppend(t, j, "b", 1, journal.NoEpoch, payload("b", 2)); got != 2 {
				t.Fatalf("append b: last seq %d, want 2", got)
			}

			for _, tc := range []struct {
				pid      string
				from     int64
				max      int
				wantSeqs []int64
			}{
				{"a", 0, 0, []int64{1, 2, 3, 4, 5}},
				{"a", -7, 0, []int64{1, 2, 3, 4, 5}},
				{"a", 1, 2, []int64{1, 2}},
				{"a", 3, 2, []int64{3, 4}},
				{"a", 4, 100, []int64{4, 5}},
				{"a", 6, 0, nil},
				{"b", 1, 0, []int64{1, 2}},
				{"never-written", 1, 0, nil},
			} {
				evs, err := j.Replay(ctx, tc.pid, tc.from, tc.max)
				if err != nil {
					t.Fatalf("Replay(%q, %d, %d): %v", tc.pid, tc.from, tc.max, err)
				}
				if evs == nil {
					t.Errorf("Replay(%q, %d, %d) = nil, want non-nil slice", tc.pid, tc.from, tc.max)
				}
				if len(evs) != len(tc.wantSeqs) {
					t.Fatalf("Replay(%q, %d, %d): %d events, want %d", tc.pid, tc.from, tc.max, len(evs), len(tc.wantSeqs))
				}
				for i, ev := range evs {
					if ev.Seq != tc.wantSeqs[i] || ev.PersistenceID != tc.pid || !bytes.Equal(ev.Data, payload(tc.pid, ev.Seq)) {
						t.Errorf("Replay(%q, %d, %d)[%d] = %+v", tc.pid, tc.from, tc.max, i, ev)
					}
					if ev.Written.IsZero() || ev.Epoch != journal.NoEpoch {
						t.Errorf("event %+v: want Written set and no epoch", ev)
					}
				}
			}

			// Global is the commit order: a1..a3, b1, a4, a5, b2.
			wantOrder := []string{"a/1", "a/2", "a/3", "b/1", "a/4", "a/5", "b/2"}
			var all []journal.Event
			for _, pid := range []string{"a", "b"} {
				evs, err := j.Replay(ctx, pid, 1, 0)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, evs...)
			}
			byGlobal := map[uint64]string{}
			var maxGlobal uint64
			for _, ev := range all {
				byGlobal[ev.Global] = string(ev.Data)
				maxGlobal = max(maxGlobal, ev.Global)
			}
			var order []string
			for g := uint64(1); g <= maxGlobal; g++ {
				if d, ok := byGlobal[g]; ok {
					order = append(order, d)
				}
			}
			if strings.Join(order, ",") != strings.Join(wantOrder, ",") {
				t.Errorf("global order %v, want %v", order, wantOrder)
			}

			for pid, want := range map[string]int64{"a": 5, "b": 2, "zzz": 0} {
				if got, err := j.Highest(ctx, pid); err != nil || got != want {
					t.Errorf("Highest(%q) = %d, %v; want %d", pid, got, err, want)
				}
			}
			checkConsistent(t, store)
		})
	}
}

func TestSeqConflict(t *testing.T) {
	for _, impl := range journalImpls() {
		t.Run(impl.name, func(t *testing.T) {
			j, store := impl.open(t)
			mustAppend(t, j, "p", 0, journal.NoEpoch, []byte("1"), []byte("2"))
			for _, expected := range []int64{0, 1, 3, 100} {
				_, err := j.Append(context.Background(), "p", expected, journal.NoEpoch, [][]byte{[]byte("x")})
				if !errors.Is(err, journal.ErrSeqConflict) || !journal.IsDefinite(err) {
					t.Fatalf("Append(expected %d) error %v, want journal.ErrSeqConflict", expected, err)
				}
				if !strings.Contains(err.Error(), "highest is 2") {
					t.Errorf("conflict message %q does not name the highest seq", err)
				}
			}
			if n := eventCount(t, store); n != 2 {
				t.Fatalf("%d events stored after conflicts, want 2", n)
			}
		})
	}
}

// TestConcurrentWriters runs writers that each read the highest seq and
// append after it. Writers racing on one id must conflict, never
// interleave: every acknowledged append sits exactly where it asked to.
func TestConcurrentWriters(t *testing.T) {
	const writers, attempts = 8, 40
	for _, impl := range journalImpls() {
		t.Run(impl.name, func(t *testing.T) {
			j, store := impl.open(t)
			ctx := context.Background()
			type success struct {
				last int64
				data [][]byte
			}
			var mu sync.Mutex
			var successes []success
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for a := range attempts {
						h, err := j.Highest(ctx, "shared")
						if err != nil {
							errs <- err
							return
						}
						data := make([][]byte, 1+rng.IntN(3))
						for i := range data {
							data[i] = []byte(fmt.Sprintf("w%d/a%d/e%d", w, a, i))
						}
						last, err := j.Append(ctx, "shared", h, journal.NoEpoch, data)
						switch {
						case err == nil:
							if last != h+int64(len(data)) {
								errs <- fmt.Errorf("append after %d of %d events returned %d", h, len(data), last)
								return
							}
							mu.Lock()
							successes = append(successes, success{last, data})
							mu.Unlock()
						case errors.Is(err, journal.ErrSeqConflict):
						default:
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}

			evs, err := j.Replay(ctx, "shared", 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			stored := 0
			for _, s := range successes {
				stored += len(s.data)
				first := s.last - int64(len(s.data)) + 1
				for i, d := range s.data {
					idx := first + int64(i) - 1
					if idx >= int64(len(evs)) || !bytes.Equal(evs[idx].Data, d) {
						t.Fatalf("acknowledged event %q not at seq %d", d, first+int64(i))
					}
				}
			}
			if stored != len(evs) {
				t.Fatalf("%d events acknowledged, %d stored", stored, len(evs))
			}
			if len(successes) < 2 {
				t.Fatalf("only %d appends succeeded; the test did not exercise concurrency", len(successes))
			}
			checkConsistent(t, store)
			t.Logf("%d appends succeeded, %d events", len(successes), len(evs))
		})
	}
}

// TestAnySeqConcurrent checks journal.AnySeq hands out unique, increasing numbers
// under concurrency (it is used to allocate ids).
func TestAnySeqConcurrent(t *testing.T) {
	const workers, per = 8, 25
	for _, impl := range journalImpls() {
		t.Run(impl.name, func(t *testing.T) {
			j, store := impl.open(t)
			got := make([][]int64, workers)
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					for i := range per {
						seq, err := j.Append(context.Background(), "alloc", journal.AnySeq, journal.NoEpoch, [][]byte{[]byte(fmt.Sprintf("%d/%d", w, i))})
						if err != nil {
							errs <- err
							return
						}
						got[w] = append(got[w], seq)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			seen := map[int64]bool{}
			for w, seqs := range got {
				for i, s := range seqs {
					if i > 0 && s <= seqs[i-1] {
						t.Errorf("worker %d: seq %d after %d", w, s, seqs[i-1])
					}
					if seen[s] {
						t.Errorf("seq %d allocated twice", s)
					}
					seen[s] = true
				}
			}
			evs, err := j.Replay(context.Background(), "alloc", 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) != workers*per || len(evs) != workers*per {
				t.Fatalf("%d unique seqs, %d events; want %d", len(seen), len(evs), workers*per)
			}
			for w, seqs := range got {
				for i, s := range seqs {
					if want := fmt.Sprintf("%d/%d", w, i); string(evs[s-1].Data) != want {
						t.Errorf("seq %d holds %q, want %q", s, evs[s-1].Data, want)
					}
				}
			}
			checkConsistent(t, store)
		})
	}
}

func TestFencing(t *testing.T) {
	for _, impl := range journalImpls() {
		t.Run(impl.name, func(t *testing.T) {
			j, store := impl.open(t)
			ctx := context.Background()
			mustAppend(t, j, "p", 0, journal.NoEpoch, []byte("unfenced"))

			e1, h, err := j.Fence(ctx, "p")
			if err != nil || e1 != 1 || h != 1 {
				t.Fatalf("Fence = %d, %d, %v; want 1, 1, nil", e1, h, err)
			}
			mustAppend(t, j, "p", 1, e1, []byte("epoch1"))

			e2, h, err := j.Fence(ctx, "p")
			if err != nil || e2 != 2 || h != 2 {
				t.Fatalf("second Fence = %d, %d, %v; want 2, 2, nil", e2, h, err)
			}
			_, err = j.Append(ctx, "p", 2, e1, [][]byte{[]byte("stale")})
			if !errors.Is(err, journal.ErrFenced) || !journal.IsDefinite(err) {
				t.Fatalf("append under stale epoch: %v, want journal.ErrFenced", err)
			}
			// Fencing wins over a sequence conflict too: a stale writer
			// must learn it is stale, not retry with a fresh seq.
			if _, err := j.Append(ctx, "p", 0, e1, [][]byte{[]byte("stale")}); !errors.Is(err, journal.ErrFenced) {
				t.Fatalf("stale epoch with wrong seq: %v, want journal.ErrFenced", err)
			}
			if n := eventCount(t, store); n != 2 {
				t.Fatalf("%d events after refused appends, want 2", n)
			}
			mustAppend(t, j, "p", 2, e2, []byte("epoch2"))
			mustAppend(t, j, "p", 3, e2+1, []byte("epoch3")) // newer than current: allowed
			mustAppend(t, j, "p", 4, journal.NoEpoch, []byte("nofence"))

			evs, err := j.Replay(ctx, "p", 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			wantEpochs := []uint64{0, 1, 2, 3, 0}
			for i, ev := range evs {
				if ev.Epoch != wantEpochs[i] {
					t.Errorf("seq %d epoch %d, want %d", ev.Seq, ev.Epoch, wantEpochs[i])
				}
			}

			// Fencing one id leaves the others alone; a new id starts at 1.
			mustAppend(t, j, "q", 0, 1, []byte("q"))
			if e, h, err := j.Fence(ctx, "new"); err != nil || e != 1 || h != 0 {
				t.Fatalf("Fence(new) = %d, %d, %v; want 1, 0, nil", e, h, err)
			}
		})
	}
}

// TestConcurrentFences checks every fence gets its own epoch.
func TestConcurrentFences(t *testing.T) {
	s, _ := openTestStore(t, true)
	const n = 50
	epochs := make(chan uint64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			e, _, err := s.Fence(context.Background(), "p")
			if err != nil {
				t.Error(err)
			}
			epochs <- e
		})
	}
	wg.Wait()
	close(epochs)
	seen := map[uint64]bool{}
	for e := range epochs {
		if seen[e] || e < 1 || e > n {
			t.Errorf("epoch %d duplicated or out of range", e)
		}
		seen[e] = true
	}
}

// TestReplayAfterRestart writes with fsync on, reopens the file, and expects
// every committed event back byte for byte, directly and over HTTP.
func TestReplayAfterRestart(t *testing.T) {
	s, path := openTestStore(t, false)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	pids := []string{"alpha", "beta", "γάμμα", strings.Repeat("x", journal.MaxPIDBytes)}
	highest := map[string]int64{}
	for range 40 {
		pid := pids[rng.IntN(len(pids))]
		data := make([][]byte, 1+rng.IntN(5))
		for i := range data {
			data[i] = make([]byte, rng.IntN(300)) // includes empty payloads
			for k := range data[i] {
				data[i][k] = byte(rng.UintN(256))
			}
		}
		epoch := uint64(rng.IntN(2)) // mix unfenced and epoch 1 appends
		highest[pid] = mustAppend(t, s, pid, highest[pid], epoch, data...)
	}
	before := map[string][]journal.Event{}
	for _, pid := range pids {
		evs, err := s.Replay(ctx, pid, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		before[pid] = evs
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := Open(path, StoreOptions{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s2.Close()
	checkConsistent(t, s2)
	client, _ := serveStore(t, s2)
	for _, j := range []struct {
		name string
		j    journal.Journal
	}{{"store", s2}, {"http", client}} {
		for _, pid := range pids {
			after, err := j.j.Replay(ctx, pid, 1, 0)
			if err != nil {
				t.Fatalf("%s: Replay(%q): %v", j.name, pid, err)
			}
			if len(after) != len(before[pid]) || int64(len(after)) != highest[pid] {
				t.Fatalf("%s: %q: %d events after restart, %d before", j.name, pid, len(after), len(before[pid]))
			}
			for i := range after {
				if !sameEvents(after[i], before[pid][i]) {
					t.Fatalf("%s: %q seq %d differs after restart:\n%+v\n%+v", j.name, pid, i+1, after[i], before[pid][i])
				}
			}
		}
	}
	// The counter survived the restart: the next event's Global is new.
	mustAppend(t, s2, "alpha", highest["alpha"], journal.NoEpoch, []byte("after"))
	checkConsistent(t, s2)
}

func TestClockStampsWritten(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	s, err := Open(t.TempDir()+"/j.db", StoreOptions{NoSync: true, Clock: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustAppend(t, s, "p", 0, journal.NoEpoch, []byte("x"))
	evs, err := s.Replay(context.Background(), "p", 1, 0)
	if err != nil || len(evs) != 1 || !evs[0].Written.Equal(at) {
		t.Fatalf("Replay = %+v, %v; want Written %v", evs, err, at)
	}
}

// TestInvalidInput checks every validation rule, directly and through the
// client, and that nothing is written for any of them.
func TestInvalidInput(t *testing.T) {
	one := [][]byte{[]byte("x")}
	tooMany := make([][]byte, journal.MaxAppendEvents+1)
	appends := []struct {
		name     string
		pid      string
		expected int64
		data     [][]byte
	}{
		{"empty pid", "", 0, one},
		{"long pid", strings.Repeat("p", journal.MaxPIDBytes+1), 0, one},
		{"non-utf8 pid", "p\xff", 0, one},
		{"nil events", "p", 0, nil},
		{"no events", "p", 0, [][]byte{}},
		{"expected seq -2", "p", -2, one},
		{"expected seq min", "p", -1 << 63, one},
		{"event too large", "p", 0, [][]byte{make([]byte, journal.MaxEventBytes+1)}},
		{"too many events", "p", 0, tooMany},
	}
	for _, impl := range journalImpls() {
		t.Run(impl.name, func(t *testing.T) {
			j, store := impl.open(t)
			ctx := context.Background()
			for _, tc := range appends {
				if _, err := j.Append(ctx, tc.pid, tc.expected, journal.NoEpoch, tc.data); !errors.Is(err, journal.ErrInvalid) {
					t.Errorf("Append %s: %v, want journal.ErrInvalid", tc.name, err)
				}
			}
			if _, err := j.Replay(ctx, "", 1, 0); !errors.Is(err, journal.ErrInvalid) {
				t.Errorf("Replay empty pid: %v", err)
			}
			if _, err := j.Replay(ctx, "p", 1, -1); !errors.Is(err, journal.ErrInvalid) {
				t.Errorf("Replay negative max: %v", err)
			}
			if _, _, err := j.Fence(ctx, ""); !errors.Is(err, journal.ErrInvalid) {
				t.Errorf("Fence empty pid: %v", err)
			}
			if _, err := j.Highest(ctx, ""); !errors.Is(err, journal.ErrInvalid) {
				t.Errorf("Highest empty pid: %v", err)
			}
			if n := eventCount(t, store); n != 0 {
				t.Fatalf("%d events written by invalid calls", n)
			}

			// The limits themselves are allowed.
			mustAppend(t, j, strings.Repeat("p", journal.MaxPIDBytes), 0, journal.NoEpoch, make([]byte, journal.MaxEventBytes))
			mustAppend(t, j, "many", 0, journal.NoEpoch, make([][]byte, journal.MaxAppendEvents)...)
			checkConsistent(t, store)
		})
	}
}

func TestCanceledContextWritesNothing(t *testing.T) {
	s, _ := openTestStore(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Append(ctx, "p", 0, journal.NoEpoch, [][]byte{[]byte("x")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Append with cancelled ctx: %v", err)
	}
	if n := eventCount(t, s); n != 0 {
		t.Fatalf("%d events written", n)
	}
}

func TestOpenLockedFile(t *testing.T) {
	_, path := openTestStore(t, true)
	if _, err := Open(path, StoreOptions{LockTimeout: 100 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second Open of a locked file: %v", err)
	}
}

func TestClosedStore(t *testing.T) {
	s, _ := openTestStore(t, true)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(context.Background(), "p", 0, journal.NoEpoch, [][]byte{[]byte("x")}); err == nil || journal.IsDefinite(err) {
		t.Fatalf("Append on closed store: %v, want an indefinite error", err)
	}
}

func TestFenceOnce(t *testing.T) {
	ctx := context.Background()
	type fence struct {
		token string
		want  uint64
	}
	var many []fence
	for i := range fenceTokensKept + 2 {
		many = append(many, fence{fmt.Sprintf("t%d", i), uint64(i + 1)})
	}
	tests := []struct {
		name   string
		fences []fence
	}{
		{"a repeat gets the same epoch", []fence{{"a", 1}, {"a", 1}, {"b", 2}, {"b", 2}}},
		{"no token always raises", []fence{{"", 1}, {"", 2}, {"a", 3}, {"", 4}}},
		// A late copy of an older fence gets its own, now stale, epoch
		// back: it does not fence the newer writer.
		{"late copy after a newer fence", []fence{{"a", 1}, {"b", 2}, {"a", 1}, {"c", 3}}},
		// Only the latest tokens are kept: an older repeat raises again
		// (safe: it can only fence).
		{"forgotten token", append(slices.Clone(many), fence{"t0", uint64(len(many) + 1)}, fence{"t17", uint64(len(many))})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := openTestStore(t, true)
			for i, f := range tt.fences {
				epoch, _, err := s.FenceOnce(ctx, "p", f.token)
				if err != nil || epoch != f.want {
					t.Fatalf("fence %d (token %q): epoch %d, %v; want %d", i, f.token, epoch, err, f.want)
				}
			}
		})
	}
	s, _ := openTestStore(t, true)
	for _, bad := range []string{"a b", "ä", strings.Repeat("x", 65), "x\x00"} {
		if _, _, err := s.FenceOnce(ctx, "p", bad); !errors.Is(err, journal.ErrInvalid) {
			t.Errorf("token %q: %v, want journal.ErrInvalid", bad, err)
		}
	}
}

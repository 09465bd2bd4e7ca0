package nodes

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/persistence"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/sim"
)

// TestJournalsAgree: the simulation's in-memory journal answers every call
// as the reference journal (bbolt) does — the same sequence numbers,
// epochs, events and kinds of refusal — on random sequences of appends
// (right, stale and wildcard expected sequence numbers; current, old and
// no epochs), fences, replays and bad input.
func TestJournalsAgree(t *testing.T) {
	ctx := context.Background()
	at := time.Unix(1767225600, 0).UTC()
	now := func() time.Time { return at }
	kinds := []error{journal.ErrFenced, journal.ErrSeqConflict, journal.ErrInvalid}
	kindOf := func(err error) string {
		if err == nil {
			return "ok"
		}
		for _, k := range kinds {
			if errors.Is(err, k) {
				return k.Error()
			}
		}
		return "other: " + err.Error()
	}
	for seed := range uint64(20) {
		store, err := persistence.Open(filepath.Join(t.TempDir(), "j.db"), persistence.StoreOptions{NoSync: true, Clock: now})
		if err != nil {
			t.Fatal(err)
		}
		mem := sim.NewJournal(now)
		rng := rand.New(rand.NewPCG(seed, 7))
		pids := []string{"a", "b/c", ""}
		epochs := map[string]uint64{}
		for step := range 300 {
			pid := pids[rng.IntN(len(pids))]
			var a, b any
			var ea, eb error
			switch op := rng.IntN(5); op {
			case 0, 1:
				h, _ := mem.Highest(ctx, pid)
				exp := []int64{h, h - 1, journal.AnySeq, h + 1}[rng.IntN(4)]
				ep := []uint64{epochs[pid], max(epochs[pid], 1) - 1, journal.NoEpoch}[rng.IntN(3)]
				data := make([][]byte, rng.IntN(3))
				for i := range data {
					data[i] = []byte(fmt.Sprintf("e%d-%d", step, i))
				}
				a, ea = store.Append(ctx, pid, exp, ep, data)
				b, eb = mem.Append(ctx, pid, exp, ep, data)
			case 2:
				var ha, hb int64
				var pa, pb uint64
				pa, ha, ea = store.Fence(ctx, pid)
				pb, hb, eb = mem.Fence(ctx, pid)
				a, b = [2]any{pa, ha}, [2]any{pb, hb}
				if ea == nil {
					epochs[pid] = pa
				}
			case 3:
				from, n := int64(rng.IntN(6))-1, rng.IntN(4)-1
				a, ea = store.Replay(ctx, pid, from, n)
				b, eb = mem.Replay(ctx, pid, from, n)
			case 4:
				a, ea = store.Highest(ctx, pid)
				b, eb = mem.Highest(ctx, pid)
			}
			if kindOf(ea) != kindOf(eb) || (ea == nil && !reflect.DeepEqual(inUTC(a), inUTC(b))) {
				t.Fatalf("seed %d step %d pid %q: bbolt %v, %v; memory %v, %v", seed, step, pid, a, ea, b, eb)
			}
		}
		store.Close()
	}
}

// inUTC gives events' Written times one location (bbolt's come back in
// the local one), so that DeepEqual compares instants.
func inUTC(v any) any {
	evs, ok := v.([]journal.Event)
	if !ok {
		return v
	}
	out := make([]journal.Event, len(evs))
	for i, e := range evs {
		e.Written = e.Written.UTC()
		out[i] = e
	}
	return out
}

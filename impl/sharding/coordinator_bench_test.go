package sharding

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/shardtest/shardtest/impl/persistence"
	"github.com/shardtest/shardtest/protocol/journal"
)

// BenchmarkCoordinatorRecovery is what a new coordinator pays before it
// answers (issue 30): fence its journal id and replay its events into the
// allocation table, from the real journal (bbolt behind its HTTP server)
// through the node's journal client, for a table of 100 shards and one of
// 10,000 on three regions. The journal holds what a cluster that allocated
// every shard once wrote: three registrations and one allocation per
// shard (rebalances add two events each; nothing compacts them). Compare
// the two sub-benchmarks' ns/op: their ratio is the figure.
func BenchmarkCoordinatorRecovery(b *testing.B) {
	for _, shards := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) {
			store, err := persistence.Open(filepath.Join(b.TempDir(), "journal.db"), persistence.StoreOptions{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			srv := httptest.NewServer(persistence.NewServer(store, slog.New(slog.DiscardHandler)))
			defer srv.Close()
			j := journal.NewClient(srv.URL, journal.ClientOptions{})
			ctx := context.Background()
			pid := CoordinatorPID("register")
			epoch, _, err := j.Fence(ctx, pid)
			if err != nil {
				b.Fatal(err)
			}
			regions := []string{"n1@a", "n2@b", "n3@c"}
			var evs [][]byte
			add := func(e CoordinatorEvent) {
				d, _ := json.Marshal(e)
				evs = append(evs, d)
			}
			for _, r := range regions {
				add(CoordinatorEvent{Type: EvRegionRegistered, Region: r})
			}
			for s := range shards {
				add(CoordinatorEvent{Type: EvShardHomeAllocated, Region: regions[s%3], Shard: fmt.Sprint(s)})
			}
			var seq int64
			for len(evs) > 0 {
				n := min(len(evs), 500)
				if seq, err = j.Append(ctx, pid, seq, epoch, evs[:n]); err != nil {
					b.Fatal(err)
				}
				evs = evs[n:]
			}
			for b.Loop() {
				st, _, last, err := RecoverCoordinator(ctx, j, "register")
				if err != nil {
					b.Fatal(err)
				}
				if len(st.Shards) != shards || last != seq {
					b.Fatalf("recovered %d shards to seq %d, want %d to %d", len(st.Shards), last, shards, seq)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(shards), "ns/shard")
		})
	}
}

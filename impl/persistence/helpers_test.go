package persistence

import (
	"bytes"
	"context"
	"fmt"
	"github.com/shardtest/shardtest/protocol/journal"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// openTestStore opens a store in a fresh temp dir. fsync is off unless the
// test is about durability: it only slows tests down, and Close flushes
// anyway.
func openTestStore(t testing.TB, noSync bool) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.db")
	s, err := Open(path, StoreOptions{NoSync: noSync})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

// serveStore serves s over a real HTTP server and returns a client for it.
func serveStore(t testing.TB, s journal.Journal) (*journal.Client, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(NewServer(s, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	c := journal.NewClient(srv.URL, journal.ClientOptions{Timeout: 10 * time.Second, Backoff: 10 * time.Millisecond})
	t.Cleanup(c.CloseIdleConnections)
	return c, srv
}

// journalImpl names a way of reaching a fresh journal, so behavioural tests
// run against the Store directly and through HTTP.
type journalImpl struct {
	name string
	open func(t *testing.T) (journal.Journal, *Store)
}

func journalImpls() []journalImpl {
	return []journalImpl{
		{"store", func(t *testing.T) (journal.Journal, *Store) {
			s, _ := openTestStore(t, true)
			return s, s
		}},
		{"http", func(t *testing.T) (journal.Journal, *Store) {
			s, _ := openTestStore(t, true)
			c, _ := serveStore(t, s)
			return c, s
		}},
	}
}

// payload is a recognisable event body.
func payload(pid string, seq int64) []byte {
	return []byte(fmt.Sprintf("%s/%d", pid, seq))
}

// checkConsistent walks the whole file and checks the journal invariants:
// every pid's seqs are 1..n without gaps, Global values are unique, no
// higher than the stored counter, and increase with seq within a pid.
func checkConsistent(t testing.TB, s *Store) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		counter := getUint64(tx.Bucket(bucketMeta), keyGlobal)
		seen := map[uint64]string{}
		return tx.Bucket(bucketEvents).ForEachBucket(func(name []byte) error {
			pid := string(name)
			c := tx.Bucket(bucketEvents).Bucket(name).Cursor()
			want := int64(1)
			var lastGlobal uint64
			for k, v := c.First(); k != nil; k, v = c.Next() {
				ev, err := decodeRecord(pid, k, v)
				if err != nil {
					return err
				}
				if ev.Seq != want {
					return fmt.Errorf("pid %q: seq %d where %d expected (gap)", pid, ev.Seq, want)
				}
				if ev.Global <= lastGlobal || ev.Global > counter {
					return fmt.Errorf("pid %q seq %d: global %d (previous %d, counter %d)", pid, ev.Seq, ev.Global, lastGlobal, counter)
				}
				if other, dup := seen[ev.Global]; dup {
					return fmt.Errorf("global %d used by %q and %q", ev.Global, other, pid)
				}
				seen[ev.Global] = pid
				lastGlobal = ev.Global
				want++
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("journal inconsistent: %v", err)
	}
}

// eventCount is the number of events stored in the whole file.
func eventCount(t testing.TB, s *Store) int {
	t.Helper()
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketEvents).ForEachBucket(func(name []byte) error {
			n += tx.Bucket(bucketEvents).Bucket(name).Stats().KeyN
			return nil
		})
	})
	if err != nil {
		t.Fatalf("count events: %v", err)
	}
	return n
}

// mustAppend appends or fails the test.
func mustAppend(t testing.TB, j journal.Journal, pid string, expected int64, epoch uint64, data ...[]byte) int64 {
	t.Helper()
	last, err := j.Append(context.Background(), pid, expected, epoch, data)
	if err != nil {
		t.Fatalf("Append(%q, %d, %d, %d events): %v", pid, expected, epoch, len(data), err)
	}
	return last
}

// sameEvents compares everything a replay must reproduce exactly.
func sameEvents(a, b journal.Event) bool {
	return a.PersistenceID == b.PersistenceID && a.Seq == b.Seq && a.Global == b.Global &&
		a.Epoch == b.Epoch && a.Written.Equal(b.Written) && bytes.Equal(a.Data, b.Data)
}

package persistence

import (
	"context"
	"encoding/binary"
	"github.com/shardtest/shardtest/protocol/journal"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// baselineOps is how many raw puts BenchmarkAppendFsync times up front to
// get the baseline rate it compares against. Small, because every op is an
// fsync and fsync may be slow here.
const baselineOps = 200

// benchPayloadSize is the size of a typical small event.
const benchPayloadSize = 128

// BenchmarkAppendFsync measures durable (fsynced) appends per second:
// a bare bbolt put as the ceiling, the Store, and the Store over HTTP. The
// non-baseline cases also report x-of-raw, their rate as a fraction of the
// raw rate measured in the same run, so results compare across machines.
func BenchmarkAppendFsync(b *testing.B) {
	baseline := rawPutRate(b, baselineOps)
	b.Logf("baseline: %.0f raw fsynced puts/s over %d ops", baseline, baselineOps)

	b.Run("raw-bbolt-put", func(b *testing.B) {
		db, bucket := openRawDB(b)
		b.ResetTimer()
		for i := range b.N {
			if err := rawPut(db, bucket, uint64(i+1)); err != nil {
				b.Fatal(err)
			}
		}
		reportRate(b, 0)
	})

	b.Run("store-append", func(b *testing.B) {
		s, _ := openTestStore(b, false)
		benchAppends(b, s, baseline)
	})

	b.Run("http-client-append", func(b *testing.B) {
		s, _ := openTestStore(b, false)
		c, _ := serveStore(b, s)
		benchAppends(b, c, baseline)
	})
}

// benchAppends appends one event per op after the last one, as an
// event-sourced writer would.
func benchAppends(b *testing.B, j journal.Journal, baseline float64) {
	ctx := context.Background()
	data := [][]byte{make([]byte, benchPayloadSize)}
	b.ResetTimer()
	for i := range b.N {
		if _, err := j.Append(ctx, "bench", int64(i), journal.NoEpoch, data); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, baseline)
}

// reportRate reports ops/s and, given a baseline, the rate relative to it.
func reportRate(b *testing.B, baseline float64) {
	b.StopTimer()
	secs := b.Elapsed().Seconds()
	if secs <= 0 {
		return
	}
	rate := float64(b.N) / secs
	b.ReportMetric(rate, "appends/s")
	if baseline > 0 {
		b.ReportMetric(rate/baseline, "x-of-raw")
	}
}

// rawPutRate times n fsynced bare puts and returns puts per second.
func rawPutRate(b *testing.B, n int) float64 {
	b.Helper()
	db, bucket := openRawDB(b)
	start := time.Now()
	for i := range n {
		if err := rawPut(db, bucket, uint64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// openRawDB opens a bare bbolt file with fsync on (bbolt's default).
func openRawDB(b *testing.B) (*bolt.DB, []byte) {
	b.Helper()
	db, err := bolt.Open(filepath.Join(b.TempDir(), "raw.db"), 0o600, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	bucket := []byte("raw")
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return db, bucket
}

// rawPut is the baseline op: one write transaction with one put.
func rawPut(db *bolt.DB, bucket []byte, key uint64) error {
	return db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put(binary.BigEndian.AppendUint64(nil, key), make([]byte, benchPayloadSize))
	})
}

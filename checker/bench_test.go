package checker

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/shardtest/shardtest/harness/history"
)

// decodeTime is how long history.Read takes on data (the best of two).
func decodeTime(b *testing.B, data []byte) time.Duration {
	best := time.Duration(1<<63 - 1)
	for range 2 {
		start := time.Now()
		if _, err := history.Read(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return best
}

// benchCheck runs c on h b.N times and reports the time relative to
// decoding h from JSON lines (x-decode).
func benchCheck(b *testing.B, c Checker, h *history.File) {
	data := encode(b, h)
	dec := decodeTime(b, data)
	b.ReportAllocs()
	b.ResetTimer()
	var r Result
	for range b.N {
		r = c.Check(context.Background(), h, "")
	}
	b.StopTimer()
	if r.Verdict != Valid {
		b.Fatalf("%s: %s", r.Verdict, r.Summary)
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(float64(len(h.Ops)), "ops")
	b.ReportMetric(float64(dec.Nanoseconds()), "decode-ns")
	b.ReportMetric(per/float64(dec.Nanoseconds()), "x-decode")
}

// BenchmarkUniqueIDs: 1,000,000 ops (invocations and completions) of 20
// clients.
func BenchmarkUniqueIDs(b *testing.B) {
	benchCheck(b, UniqueIDs{}, simIDGen(1, 20, 500_000))
}

// BenchmarkLinearizable: 100,000 register ops over 1,000 entities, 20
// clients, 1 % unknown and 1 % failed outcomes.
func BenchmarkLinearizable(b *testing.B) {
	benchCheck(b, Linearizable{}, simRegister(simOptions{seed: 1, clients: 20, entities: 1000, ops: 100_000, infoRate: 0.01, failRate: 0.01}))
}

// simBenchRun: about 1,000,000 entries (500,000 invocations and their
// completions, nemesis entries, phases) of 20 clients over 1,000 register
// entities and the singleton, a fault every 20 s lasting 5 s, each fault
// moving every entity and the singleton to a new incarnation.
func simBenchRun() *history.File {
	return simRun(runOptions{seed: 1, clients: 20, entities: 1000, ops: 500_000, step: 200_000, faultEvery: 20e9, faultLen: 5e9})
}

// BenchmarkSingleInstance: simBenchRun.
func BenchmarkSingleInstance(b *testing.B) {
	benchCheck(b, SingleInstance{}, simBenchRun())
}

// BenchmarkAvailability: simBenchRun, without writing the chart.
func BenchmarkAvailability(b *testing.B) {
	benchCheck(b, Availability{}, simBenchRun())
}

package checker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
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
		r = c.Check(context.Background(), h, Inputs{})
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

// simAppend: about 1,000,000 entries of 20 senders over 1,000 logs: each
// sender appends or tells {client, seq} through one of three nodes, every
// message lands in its log in send order, and a final read of every log.
func simAppend(clients, logs, invocations int) *history.File {
	b := &hb{}
	entries := make([][]string, logs)
	seq := make([]int, clients)
	t := int64(0)
	for i := 0; i < invocations; i++ {
		p := i % clients
		l := (i * 7919) % logs
		seq[p]++
		f := "append"
		if i%3 == 0 {
			f = "tell"
		}
		entry := fmt.Sprintf(`{"client":"w%d","seq":%d}`, p, seq[p])
		ent := fmt.Sprintf("log/l%d", l)
		t += 10
		b.inv(t, p, f, ent, entry)
		entries[l] = append(entries[l], entry)
		t += 10
		b.ok(t, p, `{"length":1}`)
		node := fmt.Sprintf("n%d", i%3+1)
		b.ops[len(b.ops)-1].Reply = &history.Reply{Node: node, Incarnation: "i" + node}
	}
	for l := range logs {
		t += 10
		b.inv(t, clients, "read", fmt.Sprintf("log/l%d", l), "")
		t += 10
		b.ok(t, clients, `{"entries":[`+strings.Join(entries[l], ",")+`]}`)
	}
	return b.file()
}

// BenchmarkSenderOrder: simAppend, 500,000 messages.
func BenchmarkSenderOrder(b *testing.B) {
	benchCheck(b, SenderOrder{}, simAppend(20, 1000, 500_000))
}

// BenchmarkAppendLog: simAppend, 500,000 messages.
func BenchmarkAppendLog(b *testing.B) {
	benchCheck(b, AppendLog{}, simAppend(20, 1000, 500_000))
}

// BenchmarkNodeEvents: 1,000,000 node events (1,000 shards of one entity
// type, each handed between 3 nodes 500 times), checked by hand-off and singleton-events, against
// decoding the events file.
func BenchmarkNodeEvents(b *testing.B) {
	var evs []history.NodeEvent
	t := int64(0)
	// As the nodes log them, each with its node's clock.
	logged := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	for round := 0; len(evs) < 1_000_000; round++ {
		for s := range 1000 {
			node := fmt.Sprintf("n%d", (round+s)%3+1)
			t += 1000
			evs = append(evs, history.NodeEvent{Node: node, Lo: t, Hi: t + 10, Event: protocol.Event{Incarnation: node, Seq: uint64(len(evs) + 1), Time: logged.Add(time.Duration(t)),
				Type: "shard-started", EntityType: "register", Shard: fmt.Sprint(s)}})
			t += 1000
			evs = append(evs, history.NodeEvent{Node: node, Lo: t, Hi: t + 10, Event: protocol.Event{Incarnation: node, Seq: uint64(len(evs) + 1), Time: logged.Add(time.Duration(t)),
				Type: "shard-stopped", EntityType: "register", Shard: fmt.Sprint(s)}})
		}
	}
	dir := b.TempDir()
	w, err := history.CreateEvents(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	w.Write(evs...)
	w.Close()
	// The yardstick: decoding the file with encoding/json, line by line
	// (history.ReadEventsFile, which the checkers use, has a fast path).
	dec := time.Duration(1<<63 - 1)
	for range 2 {
		start := time.Now()
		if n := decodeEventsJSON(b, filepath.Join(dir, "events.jsonl")); n != len(evs) {
			b.Fatalf("decoded %d events of %d", n, len(evs))
		}
		dec = min(dec, time.Since(start))
	}
	for _, c := range []Checker{HandOff{}, SingletonEvents{}} {
		b.Run(c.Name(), func(b *testing.B) {
			var r Result
			for range b.N {
				r = c.Check(context.Background(), nil, ReadInputs(dir))
			}
			if r.Verdict == Invalid {
				b.Fatalf("%s: %s", r.Verdict, r.Summary)
			}
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(len(evs)), "events")
			b.ReportMetric(per/float64(dec.Nanoseconds()), "x-decode")
		})
	}
}

// decodeEventsJSON decodes a node-events file with encoding/json, line by
// line, keeping every event, and returns how many.
func decodeEventsJSON(b *testing.B, path string) int {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var evs []history.NodeEvent
	for first := true; sc.Scan(); first = false {
		if first {
			continue // the header
		}
		var e history.NodeEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			b.Fatal(err)
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return len(evs)
}

// BenchmarkTooConcurrent: an entity with 16 ops in flight at once (15 with
// unknown outcomes, all of whose values a read observed, so none can be
// dropped) beside 1,000 ordinary entities. Porcupine's cost grows
// exponentially with the ops in flight, and its timeout does not bound its
// memory, so the checker must say unknown for that entity without trying:
// the time and bytes per check stay those of the ordinary entities.
func BenchmarkTooConcurrent(b *testing.B) {
	h := &hb{}
	ra := "register/hot"
	h.inv(0, 1000, "write", ra, `{"value":0}`).ok(1, 1000, `{"value":0}`)
	for p := range 15 {
		h.inv(int64(10+p), p, "write", ra, `{"value":7}`).info(int64(40+p), p)
	}
	h.inv(60, 1000, "read", ra, "").ok(61, 1000, `{"value":7}`)
	for e := range 1000 {
		id := fmt.Sprintf("register/e%d", e)
		h.inv(int64(100+4*e), 2000+e, "write", id, `{"value":1}`).ok(int64(101+4*e), 2000+e, `{"value":1}`)
		h.inv(int64(102+4*e), 2000+e, "read", id, "").ok(int64(103+4*e), 2000+e, `{"value":1}`)
	}
	f := h.file()
	b.ReportAllocs()
	var r Result
	for b.Loop() {
		r = Linearizable{}.Check(context.Background(), f, Inputs{})
	}
	if r.Verdict != Unknown || !strings.Contains(r.Summary, "1 too concurrent") {
		b.Fatalf("%s: %s", r.Verdict, r.Summary)
	}
}

package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

func TestWriteRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	w, err := Create(path, "t", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				w.Write(Op{Kind: Invoke, Process: p, F: "read", Entity: "register/k"})
				w.Write(Op{Kind: OK, Process: p, F: "read", Value: json.RawMessage(`{"value":1}`), Reply: &Reply{Node: "n1"}})
			}
		}()
	}
	wg.Wait()
	w.Write(Op{Kind: Nemesis, Process: -1, F: "partition"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.Truncated || len(h.Ops) != 801 || h.Header.Test != "t" {
		t.Fatalf("read %d ops (truncated %v, header %+v)", len(h.Ops), h.Truncated, h.Header)
	}
	s := h.Summarize()
	if s.Invocations != 400 || s.OK != 400 || s.Nemesis != 1 || s.Open != 0 {
		t.Fatalf("summary %+v", s)
	}
	for i := 1; i < len(h.Ops); i++ {
		if h.Ops[i].Time < h.Ops[i-1].Time {
			t.Fatalf("times go backwards at %d", i)
		}
	}
}

// A harness killed mid-write leaves a cut-off last line: the history still
// reads, without it, and says so; open invocations are counted.
func TestTruncatedHistory(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteString(`{"format":"shardtest-history","version":1,"test":"t"}` + "\n")
	buf.WriteString(`{"index":0,"time":5,"kind":"invoke","process":0,"f":"read"}` + "\n")
	buf.WriteString(`{"index":1,"time":9,"kind":"ok","process":0,"f":"read"}` + "\n")
	buf.WriteString(`{"index":2,"time":12,"kind":"invoke","process":1,"f":"wr`)
	h, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Truncated || len(h.Ops) != 2 {
		t.Fatalf("truncated=%v ops=%d", h.Truncated, len(h.Ops))
	}
	h2, _ := Read(strings.NewReader(`{"format":"shardtest-history","version":1}` + "\n" + `{"index":0,"kind":"invoke","process":3,"f":"read"}` + "\n"))
	if s := h2.Summarize(); s.Open != 1 {
		t.Fatalf("open = %d, want 1", s.Open)
	}
}

func TestBadHistories(t *testing.T) {
	tests := map[string]string{
		"empty":            ``,
		"no header":        `{"index":0,"kind":"invoke"}` + "\n",
		"other version":    `{"format":"shardtest-history","version":99}` + "\n",
		"garbage mid-file": `{"format":"shardtest-history","version":1}` + "\n" + `nope` + "\n" + `{"index":0}` + "\n",
		"index gap":        `{"format":"shardtest-history","version":1}` + "\n" + `{"index":1,"kind":"ok"}` + "\n",
	}
	for name, in := range tests {
		if _, err := Read(strings.NewReader(in)); err == nil {
			t.Errorf("%s: read without error", name)
		}
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file read without error")
	}
	path := filepath.Join(t.TempDir(), "exists")
	os.WriteFile(path, nil, 0o644)
	if _, err := Create(path, "t", time.Now()); err == nil {
		t.Error("Create overwrote an existing history")
	}
}

func TestEventsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	w, err := CreateEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	logged := time.Date(2026, 11, 29, 18, 0, 1, 500_000_000, time.UTC)
	want := []NodeEvent{
		{Node: "n1", Lo: 1, Hi: 2, Event: protocol.Event{Seq: 1, Time: logged, Incarnation: "a", Type: "singleton-started", Singleton: "id-generator"}},
		{Node: "n2", Lo: 3, Hi: 9, Event: protocol.Event{Seq: 7, Time: logged.Add(time.Millisecond), Incarnation: "b", Type: "shard-started", EntityType: "register", Shard: "4"}},
	}
	if err := w.Write(want...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, err := ReadEventsFile(path)
	if err != nil || !reflect.DeepEqual(got.Events, want) || got.Truncated {
		t.Fatalf("got %+v %v, want %+v", got, err, want)
	}
	// One flat object per line, the node's time kept, and on the
	// decoder's fast path.
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 || lines[1] != `{"node":"n1","lo":1,"hi":2,"seq":1,"time":"2026-11-29T18:00:01.5Z","incarnation":"a","type":"singleton-started","singleton":"id-generator"}` {
		t.Fatalf("file:\n%s", data)
	}
	for _, line := range lines[1:] {
		var e NodeEvent
		if !newDecoder().fastEvent([]byte(line), &e) {
			t.Errorf("%s left to encoding/json", line)
		}
	}
	// A file written before the node's time was kept still reads.
	old := `{"format":"shardtest-node-events","version":1}` + "\n" + `{"node":"n1","lo":1,"hi":2,"seq":1,"incarnation":"a","type":"member-up"}` + "\n"
	if got, err := ReadEvents(strings.NewReader(old)); err != nil || len(got.Events) != 1 || !got.Events[0].Time.IsZero() || got.Events[0].Type != "member-up" {
		t.Errorf("file without times: %+v %v", got, err)
	}
	if _, err := ReadEventsFile(filepath.Join(t.TempDir(), "none")); !errors.Is(err, ErrNoEvents) {
		t.Errorf("missing file: %v, want ErrNoEvents", err)
	}
	for name, text := range map[string]string{
		"not events":     `{"format":"shardtest-history","version":1}` + "\n",
		"bad window":     `{"format":"shardtest-node-events","version":1}` + "\n" + `{"node":"n1","lo":5,"hi":1}` + "\n",
		"future version": `{"format":"shardtest-node-events","version":9}` + "\n",
		"empty":          "",
	} {
		if _, err := ReadEvents(strings.NewReader(text)); err == nil {
			t.Errorf("%s: read without error", name)
		}
	}
	cut := `{"format":"shardtest-node-events","version":1}` + "\n" + `{"node":"n1","lo":1,"hi":2}` + "\n" + `{"node":"n1","l`
	if got, err := ReadEvents(strings.NewReader(cut)); err != nil || !got.Truncated || len(got.Events) != 1 {
		t.Errorf("cut-off file: %+v %v", got, err)
	}
}

// FuzzRead throws arbitrary bytes at the history, node-events and
// status-samples readers: they never panic, and whatever they accept reads
// the same when written again (a stored run is never misread).
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"format":"shardtest-history","version":1,"test":"t","started":"2026-11-29T20:15:52.684Z"}` + "\n" +
		`{"index":0,"time":1,"kind":"phase","process":-1,"f":"main"}` + "\n" +
		`{"index":1,"time":2,"kind":"invoke","process":0,"f":"read","entity":"register/r1","node":"n1"}` + "\n" +
		`{"index":2,"time":3,"kind":"ok","process":0,"f":"read","entity":"register/r1","node":"n1","value":{"value":null},"reply":{"node":"n1","status":0}}` + "\n"))
	f.Add([]byte(`{"format":"shardtest-history","version":1}` + "\n" + `{"index":0,"time":1,"kind":"nemesis","process":-1,"f":"kill:one","value":{"action":"inject","began":0,"failed":true}}`))
	f.Add([]byte(`{"format":"shardtest-node-events","version":1}` + "\n" + `{"node":"n1","lo":1,"hi":2,"seq":1,"incarnation":"a","type":"member-up"}` + "\n"))
	f.Add([]byte(`{"format":"shardtest-status-samples","version":1}` + "\n" + `{"node":"n1","lo":1,"hi":2,"member":"n1@a","entities":[{"type":"register","id":"r","incarnation":"x"}]}` + "\n"))
	f.Add([]byte("\x00\xff{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if h, err := Read(bytes.NewReader(data)); err == nil {
			for i := range h.Ops {
				ReadNemesis(h.Ops, i) // must not panic
			}
			Faults(h.Ops)
			h.Ended()
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.Encode(h.Header)
			for _, op := range h.Ops {
				enc.Encode(op)
			}
			again, err := Read(&buf)
			if err != nil || len(again.Ops) != len(h.Ops) {
				t.Fatalf("a history read back does not read again: %v (%d ops, was %d)", err, len(again.Ops), len(h.Ops))
			}
		}
		ReadEvents(bytes.NewReader(data))
		ReadStatus(bytes.NewReader(data))
	})
}

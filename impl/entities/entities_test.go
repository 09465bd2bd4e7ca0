package entities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/persistence"
	"github.com/shardtest/shardtest/impl/sharding"
)

func store(t *testing.T) *persistence.Store {
	s, err := persistence.Open(filepath.Join(t.TempDir(), "j.db"), persistence.StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func start(t *testing.T, f sharding.EntityFactory, j journal.Journal, id string) sharding.Entity {
	t.Helper()
	e, err := f(context.Background(), sharding.EntityContext{EntityID: id, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func call(t *testing.T, e sharding.Entity, op, payload string) (map[string]any, error) {
	t.Helper()
	res, err := e.Handle(context.Background(), sharding.Message{Op: op, Payload: json.RawMessage(payload)})
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(res, &m); err != nil {
		t.Fatalf("reply %s: %v", res, err)
	}
	return m, nil
}

func TestRegister(t *testing.T) {
	j := store(t)
	f := NewRegister(Options{})
	r := start(t, f, j, "k")
	steps := []struct {
		op, payload string
		want        map[string]any
	}{
		{"read", ``, map[string]any{"value": nil}},
		{"cas", `{"expect":1,"value":2}`, map[string]any{"ok": false, "value": nil}},
		{"cas", `{"expect":null,"value":2}`, map[string]any{"ok": true, "value": 2.0}},
		{"write", `{"value":5}`, map[string]any{"value": 5.0}},
		{"cas", `{"expect":2,"value":7}`, map[string]any{"ok": false, "value": 5.0}},
		{"cas", `{"expect":5,"value":7}`, map[string]any{"ok": true, "value": 7.0}},
		{"read", `{}`, map[string]any{"value": 7.0}},
	}
	for _, s := range steps {
		got, err := call(t, r, s.op, s.payload)
		if err != nil {
			t.Fatalf("%s %s: %v", s.op, s.payload, err)
		}
		for k, v := range s.want {
			if got[k] != v {
				t.Fatalf("%s %s: %v, want %v", s.op, s.payload, got, s.want)
			}
		}
	}
	// A new incarnation replays the events and fences the old one.
	r2 := start(t, f, j, "k")
	if got, _ := call(t, r2, "read", ""); got["value"] != 7.0 {
		t.Fatalf("recovered value %v, want 7", got["value"])
	}
	if _, err := call(t, r, "write", `{"value":9}`); !errors.Is(err, ErrStale) || !errors.Is(err, sharding.ErrEntityFailed) || !IsDefinite(err) {
		t.Fatalf("stale incarnation's write: %v, want ErrStale", err)
	}
	if got, err := call(t, r2, "write", `{"value":9}`); err != nil || got["value"] != 9.0 {
		t.Fatalf("new incarnation's write: %v %v", got, err)
	}
}

func TestBadRequests(t *testing.T) {
	j := store(t)
	r := start(t, NewRegister(Options{}), j, "k")
	l := start(t, NewLog(Options{}), j, "k")
	tests := []struct {
		e           sharding.Entity
		op, payload string
	}{
		{r, "delete", ``},
		{r, "write", `{}`},
		{r, "write", `{"value":"x"}`},
		{r, "cas", `{"expect":1}`},
		{r, "cas", `{"value":1}`}, // a missing expect is not null (never written)
		{r, "read", `{"value":1}`},
		{r, "read", `[`},
		{l, "append", `{}`},
		{l, "append", `{"client":1}`},
		{l, "truncate", ``},
	}
	for _, tt := range tests {
		if _, err := call(t, tt.e, tt.op, tt.payload); !errors.Is(err, ErrBadRequest) || !IsDefinite(err) {
			t.Errorf("%s %s: %v, want ErrBadRequest", tt.op, tt.payload, err)
		}
	}
	if h, _ := j.Highest(context.Background(), "entity/register/k"); h != 0 {
		t.Fatalf("bad requests wrote %d events", h)
	}
}

func TestLogRecovers(t *testing.T) {
	j := store(t)
	f := NewLog(Options{})
	l := start(t, f, j, "x")
	for i := range 5 {
		got, err := call(t, l, "append", `{"client":"c1","seq":`+string(rune('1'+i))+`}`)
		if err != nil || got["length"] != float64(i+1) {
			t.Fatalf("append %d: %v %v", i, got, err)
		}
	}
	l2 := start(t, f, j, "x")
	got, _ := call(t, l2, "read", "")
	entries := got["entries"].([]any)
	if len(entries) != 5 || entries[4].(map[string]any)["seq"] != 5.0 {
		t.Fatalf("recovered log %v", entries)
	}
}

// The SkipReplay bug really serves stale state.
func TestSkipReplayBugServesStaleState(t *testing.T) {
	j := store(t)
	good := start(t, NewRegister(Options{}), j, "k")
	if _, err := call(t, good, "write", `{"value":3}`); err != nil {
		t.Fatal(err)
	}
	buggy := start(t, NewRegister(Options{SkipReplay: true}), j, "k")
	if got, _ := call(t, buggy, "read", ""); got["value"] != nil {
		t.Fatalf("SkipReplay read %v; the bug must serve the empty state", got["value"])
	}
	if got, _ := call(t, start(t, NewRegister(Options{}), j, "k"), "read", ""); got["value"] != 3.0 {
		t.Fatalf("correct incarnation read %v, want 3", got["value"])
	}
}

// flaky fails appends with an unknown outcome while down, having written
// them anyway (the worst case: the write happened, the answer was lost).
type flaky struct {
	journal.Journal
	down atomic.Bool
}

func (f *flaky) Append(ctx context.Context, pid string, exp int64, epoch uint64, data [][]byte) (int64, error) {
	last, err := f.Journal.Append(ctx, pid, exp, epoch, data)
	if f.down.Load() {
		return 0, journal.ErrUnavailable
	}
	return last, err
}

func TestUnknownOutcomeResyncs(t *testing.T) {
	j := &flaky{Journal: store(t)}
	r := start(t, NewRegister(Options{}), j, "k")
	j.down.Store(true)
	// The journal stays silent for longer than the caller waits.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := r.Handle(ctx, sharding.Message{Op: "write", Payload: json.RawMessage(`{"value":4}`)}); !errors.Is(err, ErrUnknown) || IsDefinite(err) {
		t.Fatalf("write with lost answer: %v, want ErrUnknown", err)
	}
	j.down.Store(false)
	// The next write first re-reads what the lost one persisted.
	got, err := call(t, r, "cas", `{"expect":4,"value":6}`)
	if err != nil || got["ok"] != true {
		t.Fatalf("cas after resync: %v %v; the lost write did persist 4", got, err)
	}
}

// lossy loses the answers of the next `lose` appends: the request is
// stored or not (stored), then meanwhile() runs (another incarnation may
// act), and the caller hears "unavailable".
type lossy struct {
	journal.Journal
	mu        sync.Mutex
	lose      int
	stored    bool
	meanwhile func()
	// lost are the appends whose requests were lost unstored, to be
	// delivered late by the test.
	lost []func() error
}

func (l *lossy) Append(ctx context.Context, pid string, exp int64, epoch uint64, data [][]byte) (int64, error) {
	l.mu.Lock()
	lose := l.lose > 0
	if lose {
		l.lose--
	}
	l.mu.Unlock()
	if !lose {
		return l.Journal.Append(ctx, pid, exp, epoch, data)
	}
	if l.stored {
		if _, err := l.Journal.Append(ctx, pid, exp, epoch, data); err != nil {
			return 0, err
		}
	} else {
		l.lost = append(l.lost, func() error {
			_, err := l.Journal.Append(context.Background(), pid, exp, epoch, data)
			return err
		})
	}
	if l.meanwhile != nil {
		l.meanwhile()
	}
	return 0, fmt.Errorf("%w: answer lost", journal.ErrUnavailable)
}

// TestUnknownAppendIsSettled: a write whose journal answer is lost is
// settled while the caller still waits, by repeating the append under the
// same expected sequence number, so it is never done twice and never
// reported done when it was not.
func TestUnknownAppendIsSettled(t *testing.T) {
	cases := []struct {
		name string
		// lose: answers lost in a row; stored: whether those requests
		// were stored.
		lose   int
		stored bool
		// newer: another incarnation fences the id (and, with
		// newerWrites, writes 8) while the answer is lost.
		newer, newerWrites bool
		wantErr            error // nil: the write succeeded
		want               float64
	}{
		{name: "stored, answer lost", lose: 1, stored: true, want: 4},
		{name: "stored, answers lost three times", lose: 3, stored: true, want: 4},
		{name: "request lost", lose: 1, want: 4},
		{name: "request lost three times", lose: 3, want: 4},
		{name: "stored, then a newer incarnation fenced", lose: 1, stored: true, newer: true, want: 4},
		{name: "request lost, a newer incarnation fenced", lose: 1, newer: true, wantErr: ErrStale, want: 1},
		{name: "request lost, a newer incarnation wrote", lose: 1, newer: true, newerWrites: true, wantErr: ErrStale, want: 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := store(t)
			j := &lossy{Journal: s}
			f := NewRegister(Options{})
			r := start(t, f, j, "k")
			if _, err := call(t, r, "write", `{"value":1}`); err != nil {
				t.Fatal(err)
			}
			j.lose, j.stored = c.lose, c.stored
			if c.newer {
				j.meanwhile = func() {
					j.meanwhile = nil
					r2 := start(t, f, s, "k")
					if c.newerWrites {
						if _, err := call(t, r2, "write", `{"value":8}`); err != nil {
							t.Errorf("newer incarnation's write: %v", err)
						}
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := r.Handle(ctx, sharding.Message{Op: "write", Payload: json.RawMessage(`{"value":4}`)})
			switch {
			case c.wantErr == nil && err != nil:
				t.Fatalf("write: %v, want success once settled", err)
			case c.wantErr != nil && (!errors.Is(err, c.wantErr) || !IsDefinite(err)):
				t.Fatalf("write: %v, want definite %v", err, c.wantErr)
			}
			// Requests lost on the way arrive late: never stored twice.
			for _, late := range j.lost {
				if err := late(); !journal.IsDefinite(err) {
					t.Fatalf("late delivery of a lost append: %v, want refused", err)
				}
			}
			evs, err := s.Replay(context.Background(), "entity/register/k", 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			wantEvents := 1
			if c.wantErr == nil || c.newerWrites {
				wantEvents = 2
			}
			if len(evs) != wantEvents {
				t.Fatalf("journal holds %d events, want %d", len(evs), wantEvents)
			}
			if got, _ := call(t, start(t, f, s, "k"), "read", ""); got["value"] != c.want {
				t.Fatalf("recovered value %v, want %v", got["value"], c.want)
			}
		})
	}
}

// fakeLogSend appends to an in-test log, failing while fail > 0.
type fakeLogSend struct {
	mu    sync.Mutex
	fail  int
	got   []protocol.LogEntry
	calls int
}

func (f *fakeLogSend) send(ctx context.Context, typ string, msg sharding.Message) (sharding.Reply, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail > 0 {
		f.fail--
		return sharding.Reply{}, errors.New("lost")
	}
	var req protocol.LogAppend
	json.Unmarshal(msg.Payload, &req)
	f.got = append(f.got, req.LogEntry)
	return sharding.Reply{}, nil
}

func (f *fakeLogSend) entries() []protocol.LogEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.LogEntry(nil), f.got...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSenderRedeliversUntilConfirmed(t *testing.T) {
	j := store(t)
	f := &fakeLogSend{fail: 3}
	factory := NewSender(SenderOptions{RedeliverInterval: 20 * time.Millisecond}, f.send)
	s := start(t, factory, j, "s")
	defer s.Stop(context.Background())
	for seq := 1; seq <= 3; seq++ {
		if _, err := call(t, s, "send", `{"to":"L","client":"c","seq":`+strconv.Itoa(seq)+`}`); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all confirmed", func() bool {
		got, _ := call(t, s, "pending", "")
		return got["unconfirmed"] == 0.0
	})
	got := f.entries()
	if len(got) != 3 || got[0].Seq != 1 || got[2].Seq != 3 {
		t.Fatalf("delivered %v, want seqs 1,2,3 in order", got)
	}
}

// A sender that crashes with unconfirmed messages: its next incarnation
// replays them and delivers them.
func TestSenderResendsAfterCrash(t *testing.T) {
	j := store(t)
	dead := &fakeLogSend{fail: 1 << 30}
	old := start(t, NewSender(SenderOptions{RedeliverInterval: 20 * time.Millisecond}, dead.send), j, "s")
	for seq := 1; seq <= 2; seq++ {
		if _, err := call(t, old, "send", `{"to":"L","client":"c","seq":`+strconv.Itoa(seq)+`}`); err != nil {
			t.Fatal(err)
		}
	}
	old.Stop(context.Background()) // the node crashed; nothing was confirmed
	live := &fakeLogSend{}
	s := start(t, NewSender(SenderOptions{RedeliverInterval: 20 * time.Millisecond}, live.send), j, "s")
	defer s.Stop(context.Background())
	got, err := call(t, s, "flush", "")
	if err != nil || got["unconfirmed"] != 0.0 {
		t.Fatalf("flush: %v %v", got, err)
	}
	if e := live.entries(); len(e) != 2 || e[0].Seq != 1 || e[1].Seq != 2 {
		t.Fatalf("resent %v, want seqs 1 and 2", e)
	}
}

func TestLogDeduplicates(t *testing.T) {
	j := store(t)
	l := start(t, NewLog(Options{}), j, "L")
	for _, dup := range []bool{false, true, true} {
		got, err := call(t, l, "append", `{"client":"c","seq":1,"dedup":true}`)
		if err != nil || (got["duplicate"] == true) != dup {
			t.Fatalf("append: %v %v, want duplicate=%v", got, err, dup)
		}
	}
	if got, _ := call(t, l, "append", `{"client":"c","seq":1}`); got["length"] != 2.0 {
		t.Fatalf("append without dedup must append: %v", got)
	}
}

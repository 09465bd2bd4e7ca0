package run

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardtest/shardtest/history"
)

// fakeEventLog serves GET /v1/events like a node whose process can be
// restarted (its log starts again at seq 1 under a new incarnation).
type fakeEventLog struct {
	mu     sync.Mutex
	inc    string
	events []map[string]any
}

func (f *fakeEventLog) add(typ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, map[string]any{"seq": len(f.events) + 1, "incarnation": f.inc, "type": typ,
		"time": time.Now().Format(time.RFC3339Nano)})
}

func (f *fakeEventLog) restart(inc string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inc, f.events = inc, nil
}

func (f *fakeEventLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.Atoi(r.URL.Query().Get("after"))
	f.mu.Lock()
	var out []map[string]any
	for _, e := range f.events {
		if e["seq"].(int) > after {
			out = append(out, e)
		}
	}
	reply := map[string]any{"served_by": map[string]string{"node": "n1", "incarnation": f.inc}, "events": out, "last": len(f.events)}
	f.mu.Unlock()
	if len(out) == 0 {
		time.Sleep(20 * time.Millisecond) // a short long poll
	}
	json.NewEncoder(w).Encode(reply)
}

// The collector writes every event once, each inside a window that
// contains the moment it was logged, across a restart of the node.
func TestCollectEvents(t *testing.T) {
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	log := &fakeEventLog{inc: "a"}
	srv := httptest.NewServer(log)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	w, err := history.CreateEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		nodes := func() []Node { return []Node{{Name: "n1", HTTPAddr: srv.Listener.Addr().String()}} }
		collectEvents(ctx, w, now, nodes, func(string, error) {})
	}()
	type when struct{ before, after int64 }
	logged := map[string]when{} // type → around when it was logged
	add := func(typ string) {
		before := now()
		log.add(typ)
		logged[typ] = when{before, now()}
		time.Sleep(30 * time.Millisecond)
	}
	add("node-started")
	add("member-up")
	add("singleton-started")
	log.restart("b")
	add("node-started-again")
	add("singleton-started-again")
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	w.Close()
	evs, err := history.ReadEventsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Events) != len(logged) {
		t.Fatalf("%d events written, want %d: %+v", len(evs.Events), len(logged), evs.Events)
	}
	for _, e := range evs.Events {
		at, ok := logged[e.Type]
		if !ok {
			t.Errorf("unexpected event %+v", e)
			continue
		}
		delete(logged, e.Type)
		// The window must contain the moment it was logged.
		if e.Lo > at.after || e.Hi < at.before {
			t.Errorf("%s logged in [%d, %d], outside its window [%d, %d]", e.Type, at.before, at.after, e.Lo, e.Hi)
		}
		// The node's own time is kept as it logged it (here the node's
		// clock is the test's).
		if e.Time.Before(start.Add(-time.Millisecond)) || e.Time.After(time.Now()) {
			t.Errorf("%s: node time %v, not when it was logged", e.Type, e.Time)
		}
	}
}

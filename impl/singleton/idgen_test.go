package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"sync"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
)

const idPID = "id-generator"

func nextID(t *testing.T, inst Instance) (int64, error) {
	t.Helper()
	res, err := inst.Handle(context.Background(), Request{Op: OpNextID})
	if err != nil {
		return 0, err
	}
	var r IDReply
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatalf("reply %s: %v", res, err)
	}
	return r.ID, nil
}

func mustNextID(t *testing.T, inst Instance) int64 {
	t.Helper()
	id, err := nextID(t, inst)
	if err != nil {
		t.Fatalf("next-id: %v", err)
	}
	return id
}

func startIDGen(t *testing.T, f Factory) Instance {
	t.Helper()
	inst, err := f(context.Background())
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return inst
}

func TestIDGeneratorSequenceAndFencing(t *testing.T) {
	j := newFakeJournal()
	a := startIDGen(t, IDGenerator(j, idPID))
	for want := int64(1); want <= 3; want++ {
		if got := mustNextID(t, a); got != want {
			t.Fatalf("id %d, want %d", got, want)
		}
	}
	// A new instance (after a failover) recovers and fences the old one.
	b := startIDGen(t, IDGenerator(j, idPID))
	_, err := nextID(t, a)
	if !errors.Is(err, ErrInstanceFailed) || !errors.Is(err, journal.ErrFenced) || !IsDefinite(err) {
		t.Fatalf("stale instance: %v, want a definite ErrInstanceFailed wrapping ErrFenced", err)
	}
	if got := mustNextID(t, b); got != 4 {
		t.Fatalf("new instance id %d, want 4", got)
	}
	if _, err := a.Handle(context.Background(), Request{Op: "reset"}); !errors.Is(err, ErrBadRequest) || !IsDefinite(err) {
		t.Errorf("unknown op: %v", err)
	}
	// The journal holds every id once, in order.
	evs, _ := j.Replay(context.Background(), idPID, 1, 0)
	for i, e := range evs {
		var ie idEvent
		if err := json.Unmarshal(e.Data, &ie); err != nil || ie.ID != e.Seq || e.Seq != int64(i+1) {
			t.Errorf("event %d: seq %d data %s", i, e.Seq, e.Data)
		}
	}
	if len(evs) != 4 {
		t.Errorf("%d events, want 4", len(evs))
	}
}

func TestIDGeneratorUnknownOutcome(t *testing.T) {
	tests := []struct {
		name        string
		applyAnyway bool // the append was written but its answer lost
		wantNext    int64
	}{
		{"append lost", false, 2},
		{"answer lost", true, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newFakeJournal()
			g := startIDGen(t, IDGenerator(j, idPID))
			if id := mustNextID(t, g); id != 1 {
				t.Fatalf("id %d", id)
			}
			j.setUnavailable(true, tt.applyAnyway)
			_, err := nextID(t, g)
			if !errors.Is(err, ErrUnknownOutcome) || IsDefinite(err) || isInstanceFailure(err) {
				t.Fatalf("unavailable journal: %v, want an unknown outcome", err)
			}
			// Re-reading fails too: nothing was done, definitely.
			j.setUnavailable(true, false)
			_, err = nextID(t, g)
			if !errors.Is(err, ErrUnavailable) || !IsDefinite(err) {
				t.Fatalf("re-read while unavailable: %v, want definite ErrUnavailable", err)
			}
			j.setUnavailable(false, false)
			if id := mustNextID(t, g); id != tt.wantNext {
				t.Fatalf("id after recovery %d, want %d", id, tt.wantNext)
			}
		})
	}
}

func TestIDGeneratorStartFailsWhenJournalUnavailable(t *testing.T) {
	j := newFakeJournal()
	j.setUnavailable(true, false)
	if _, err := IDGenerator(j, idPID)(context.Background()); !errors.Is(err, journal.ErrUnavailable) {
		t.Fatalf("start: %v", err)
	}
}

func TestIDGeneratorNoFencingBug(t *testing.T) {
	// Two instances alive at once (a split brain): with fencing the older
	// one fails; with the NoFencing bug both hand out the same ids.
	tests := []struct {
		name      string
		opts      IDGeneratorOptions
		wantDupes bool
	}{
		{"fenced", IDGeneratorOptions{}, false},
		{"no fencing bug", IDGeneratorOptions{NoFencing: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := newFakeJournal()
			a := startIDGen(t, IDGeneratorWith(j, idPID, tt.opts))
			b := startIDGen(t, IDGeneratorWith(j, idPID, tt.opts))
			seen := map[int64]int{}
			dupes := 0
			for range 3 {
				for _, inst := range []Instance{a, b} {
					id, err := nextID(t, inst)
					if err != nil {
						continue
					}
					seen[id]++
					if seen[id] > 1 {
						dupes++
					}
				}
			}
			if (dupes > 0) != tt.wantDupes {
				t.Fatalf("%d duplicate ids (%v), want duplicates: %v", dupes, seen, tt.wantDupes)
			}
		})
	}
}

// TestIDGeneratorAcrossHandOver: ids from a proxy stay unique and increasing
// while the singleton moves by graceful hand-over and by downing.
func TestIDGeneratorAcrossHandOver(t *testing.T) {
	j := newFakeJournal()
	cfg := testConfig()
	cfg.Name = "id-generator"
	cfg.DownRemovalMargin = 100 * time.Millisecond
	c := newCluster(t, 3, cfg, func(string) Factory { return IDGenerator(j, idPID) })
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	up := allUp("n1", "n2", "n3")
	c.setAll(up)
	c.start()
	p, err := NewProxy(ProxyConfig{Name: cfg.Name, RetryInterval: 10 * time.Millisecond},
		ProxyDeps{Membership: n3.mem, Peers: n3.peers, Clock: c.clock, Events: n3.ev, Local: n3.mgr})
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu      sync.Mutex
		ids     []int64
		unknown int
	)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ids)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := p.Call(ctx, Request{Op: OpNextID})
			cancel()
			mu.Lock()
			if err != nil {
				if !IsDefinite(err) {
					unknown++
				}
				t.Logf("next-id: %v", err)
			} else {
				var r IDReply
				_ = json.Unmarshal(res, &r)
				ids = append(ids, r.ID)
			}
			mu.Unlock()
		}
	}()

	eventually(t, wait, func() bool { return count() >= 20 }, "ids from n1")
	c.awaitSteady()
	c.setAll(up.with("n1", cluster.StatusLeaving)) // graceful hand-over to n2
	eventually(t, wait, func() bool { return running(n2) }, "n2 runs")
	at := count()
	eventually(t, wait, func() bool { return count() >= at+20 }, "ids from n2")
	c.setView("n2", up.with("n1", cluster.StatusRemoved).with("n2", cluster.StatusDown)) // n2 downed
	c.setView("n3", up.with("n1", cluster.StatusRemoved).with("n2", cluster.StatusDown))
	eventually(t, wait, func() bool { return running(n3) }, "n3 runs")
	at = count()
	eventually(t, wait, func() bool { return count() >= at+20 }, "ids from n3")
	close(stop)
	<-done

	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids not increasing at %d: %v", i, ids)
		}
	}
	if unknown > 0 {
		t.Errorf("%d requests with unknown outcome", unknown)
	}
	if n1.mgr.Status().Started != 1 || n2.mgr.Status().Started != 1 || n3.mgr.Status().Started != 1 {
		t.Errorf("starts: %d %d %d", n1.mgr.Status().Started, n2.mgr.Status().Started, n3.mgr.Status().Started)
	}
	h, _ := j.Highest(context.Background(), idPID)
	if last := ids[len(ids)-1]; last != h {
		t.Errorf("last id %d, journal highest %d", last, h)
	}
}

func TestIDGeneratorFencedInstanceRestarts(t *testing.T) {
	j := newFakeJournal()
	cfg := testConfig()
	cfg.Name = "id-generator"
	c := newCluster(t, 1, cfg, func(string) Factory { return IDGenerator(j, idPID) })
	n1 := c.node("n1")
	c.setAll(allUp("n1"))
	c.start()
	eventually(t, wait, func() bool { return running(n1) }, "runs")
	ask := func() (int64, error) {
		res, err := n1.mgr.Handle(context.Background(), Request{Op: OpNextID})
		if err != nil {
			return 0, err
		}
		var r IDReply
		return r.ID, json.Unmarshal(res, &r)
	}
	if id, err := ask(); err != nil || id != 1 {
		t.Fatalf("first id %d, %v", id, err)
	}
	// Another writer takes the id over (a stale-instance scenario).
	if _, _, err := j.Fence(context.Background(), idPID); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(); !errors.Is(err, ErrInstanceFailed) || !IsDefinite(err) {
		t.Fatalf("fenced instance: %v", err)
	}
	eventually(t, wait, func() bool { return n1.mgr.Status().Started == 2 && running(n1) }, "restarted")
	if id, err := ask(); err != nil || id != 2 {
		t.Fatalf("id after restart %d, %v", id, err)
	}
	if len(eventsOf(n1.ev, protocol.EventSingletonFailed)) != 1 {
		t.Error("no SingletonFailed event")
	}
}

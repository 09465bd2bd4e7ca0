package node

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/persistence"
)

// switchableJournal is a real journal server (bbolt behind HTTP) whose
// network can be cut: while down, every connection is dropped unanswered.
type switchableJournal struct {
	down atomic.Bool
	srv  *httptest.Server
}

func newSwitchableJournal(t testing.TB) *switchableJournal {
	store, err := persistence.Open(filepath.Join(t.TempDir(), "j.db"), persistence.StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	j := &switchableJournal{}
	api := persistence.NewServer(store, testLogger(t))
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if j.down.Load() {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

// Nodes survive the journal being unreachable for a while: requests that
// need it fail (definitely or with an unknown outcome, never with a wrong
// id), membership stays intact, and once it is back ids flow again without
// ever repeating.
func TestJournalBrieflyUnreachable(t *testing.T) {
	j := newSwitchableJournal(t)
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Journal = nil
		c.JournalURL = j.srv.URL
		c.RequestTimeout = 2 * time.Second
	})
	oldest := tc.agreedOldest(tc.nodes, 3)
	ids := newIDClient()
	ctx, stop := context.WithCancel(context.Background())
	wg := ids.hammer(ctx, tc)
	time.Sleep(300 * time.Millisecond)

	j.down.Store(true)
	time.Sleep(3 * time.Second)
	ids.mu.Lock()
	okBefore := ids.ok
	ids.mu.Unlock()
	time.Sleep(time.Second)
	ids.mu.Lock()
	okDuring := ids.ok - okBefore
	ids.mu.Unlock()
	if okDuring != 0 {
		t.Fatalf("%d ids handed out while the journal was unreachable", okDuring)
	}
	j.down.Store(false)

	eventually(t, 20*time.Second, func() error {
		ids.mu.Lock()
		defer ids.mu.Unlock()
		if ids.ok <= okBefore {
			return fmt.Errorf("no id since the journal came back")
		}
		return nil
	})
	stop()
	wg.Wait()
	ids.check(t)
	if now := tc.agreedOldest(tc.nodes, 3); now != oldest {
		t.Fatalf("the oldest changed from %s to %s over a journal outage", oldest, now)
	}
	if r := tc.runningSingletons(); len(r) != 1 {
		t.Fatalf("singleton runs on %v after the outage", r)
	}
}

// A node that starts while the journal is unreachable waits as "joining"
// (it cannot get its up-number, so it cannot know its age) and joins once
// the journal answers.
func TestNodeWaitsForJournal(t *testing.T) {
	j := newSwitchableJournal(t)
	j.down.Store(true)
	cfg := fastConfig()
	cfg.Name = "late"
	cfg.GossipPort = 0
	cfg.JournalURL = j.srv.URL
	cfg.Logger = testLogger(t)
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { cancel(); <-done }()

	eventually(t, 10*time.Second, func() error {
		if !hasLogged(n, "journal-unavailable") {
			return fmt.Errorf("no journal-unavailable event yet")
		}
		return nil
	})
	if st := n.Status(); st.Ready || st.Self.Status != "joining" {
		t.Fatalf("ready without the journal: %+v", st.Self)
	}
	if _, err := newIDClient().nextID(n.Addr()); err == nil {
		t.Fatal("next-id succeeded on a node that has not joined")
	}
	j.down.Store(false)
	eventually(t, 15*time.Second, func() error {
		if st := n.Status(); !st.Ready || st.Self.UpNumber < 1 {
			return fmt.Errorf("not ready: %+v", st.Self)
		}
		return nil
	})
}

func hasLogged(n *Node, typ string) bool {
	evs, _ := n.Events().Since(0, 0)
	for _, e := range evs {
		if e.Type == typ {
			return true
		}
	}
	return false
}

package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
)

const wait = 10 * time.Second // generous bound for anything eventual

func TestConfigValidation(t *testing.T) {
	deps := Deps{
		Membership: newFakeMembership(), Peers: peer.NewClient(peer.Self{UID: "g@1", GossipAddr: "g"}, nil), Clock: clock.Real(),
		Factory: func(context.Context) (Instance, error) { return nil, errTest },
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "defaults", cfg: Config{Name: "id-generator"}, check: func(t *testing.T, c Config) {
			if c.RetryInterval != time.Second || c.MaxHandOverRetries != 15 || c.MaxTakeOverRetries != 10 ||
				c.StopTimeout != 10*time.Second || c.DownRemovalMargin != 2*time.Second {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{name: "margin follows interval", cfg: Config{Name: "x", RetryInterval: 100 * time.Millisecond}, check: func(t *testing.T, c Config) {
			if c.DownRemovalMargin != 200*time.Millisecond {
				t.Errorf("margin %v", c.DownRemovalMargin)
			}
		}},
		{name: "negative margin is none", cfg: Config{Name: "x", DownRemovalMargin: -1}, check: func(t *testing.T, c Config) {
			if c.DownRemovalMargin != 0 {
				t.Errorf("margin %v", c.DownRemovalMargin)
			}
		}},
		{name: "take-over default below small hand-over", cfg: Config{Name: "x", MaxHandOverRetries: 5}, check: func(t *testing.T, c Config) {
			if c.MaxTakeOverRetries != 4 {
				t.Errorf("take-over %d", c.MaxTakeOverRetries)
			}
		}},
		{name: "take-over not less", cfg: Config{Name: "x", MaxHandOverRetries: 5, MaxTakeOverRetries: 5}, wantErr: "must be less than MaxHandOverRetries"},
		{name: "hand-over too small", cfg: Config{Name: "x", MaxHandOverRetries: 1}, wantErr: "at least 2"},
		{name: "bad name", cfg: Config{Name: "Id_Gen"}, wantErr: "must match"},
		{name: "empty name", cfg: Config{}, wantErr: "must match"},
		{name: "negative interval", cfg: Config{Name: "x", RetryInterval: -time.Second}, wantErr: "negative"},
		{name: "negative retries", cfg: Config{Name: "x", MaxTakeOverRetries: -1}, wantErr: "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewManager(tt.cfg, deps)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, m.Config())
		})
	}
	if _, err := NewManager(Config{Name: "x"}, Deps{}); err == nil {
		t.Error("missing deps accepted")
	}
}

func TestOldestStartsYoungerDoNot(t *testing.T) {
	rec := newRecorder()
	c := newCluster(t, 3, testConfig(), func(n string) Factory { return rec.factory(n, 0) })
	c.setAll(allUp("n1", "n2", "n3"))
	c.start()
	eventually(t, wait, func() bool { return running(c.node("n1")) }, "n1 runs the singleton")
	for _, n := range []string{"n2", "n3"} {
		eventually(t, wait, func() bool { return c.node(n).mgr.Status().State == StateYounger }, "%s younger", n)
	}
	if got := c.runningNodes(); len(got) != 1 || got[0] != "n1" {
		t.Fatalf("running on %v, want [n1]", got)
	}
	st := c.node("n2").mgr.Status()
	if st.Oldest != c.node("n1").uid() || st.Running || st.Started != 0 {
		t.Errorf("n2 status %+v", st)
	}
	if ev := eventsOf(c.node("n2").ev, protocol.EventOldestChanged); len(ev) == 0 || ev[0].Member != c.node("n1").uid() {
		t.Errorf("n2 OldestChanged events %+v", ev)
	}
	res, err := c.node("n1").mgr.Handle(context.Background(), Request{Op: "echo", Payload: json.RawMessage(`"hi"`)})
	if err != nil || !strings.Contains(string(res), `"n1"`) {
		t.Fatalf("Handle on n1 = %s, %v", res, err)
	}
	if _, err := c.node("n2").mgr.Handle(context.Background(), Request{Op: "echo"}); !errors.Is(err, ErrNotRunning) || !IsDefinite(err) {
		t.Fatalf("Handle on n2 = %v, want definite ErrNotRunning", err)
	}
	if ov := rec.overlapErrors(); len(ov) > 0 {
		t.Fatalf("overlapping instances: %v", ov)
	}
}

// firstEvent returns the first event of typ whose detail starts with prefix.
func firstEvent(t *testing.T, l *kit.EventLog, typ, prefix string) protocol.Event {
	t.Helper()
	for _, e := range eventsOf(l, typ) {
		if strings.HasPrefix(e.Detail, prefix) {
			return e
		}
	}
	t.Fatalf("no %s event with detail %q...", typ, prefix)
	return protocol.Event{}
}

func TestGracefulHandOver(t *testing.T) {
	rec := newRecorder()
	c := newCluster(t, 3, testConfig(), func(n string) Factory { return rec.factory(n, 50*time.Millisecond) })
	up := allUp("n1", "n2", "n3")
	c.setAll(up)
	c.start()
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	eventually(t, wait, func() bool { return running(n1) }, "n1 runs")
	c.awaitSteady()
	if closed(n1.mgr.HandedOver()) {
		t.Fatal("HandedOver closed on a running oldest")
	}

	c.setAll(up.with("n1", cluster.StatusLeaving))
	eventually(t, wait, func() bool { return running(n2) }, "n2 runs after n1 left")
	eventually(t, wait, func() bool { return closed(n1.mgr.HandedOver()) }, "n1 handed over")
	if st := n1.mgr.Status(); st.State != StateEnd || st.Running || !st.HandedOver {
		t.Errorf("n1 status %+v", st)
	}
	if running(n3) || rec.count("n3", "start") != 0 {
		t.Error("n3 started an instance")
	}

	// Order from the test instances.
	var kinds []string
	for _, e := range rec.entries() {
		kinds = append(kinds, e.node+":"+e.kind)
	}
	if got := strings.Join(kinds, " "); got != "n1:start n1:stop n2:start" {
		t.Fatalf("instance order %q", got)
	}
	if ov := rec.overlapErrors(); len(ov) > 0 {
		t.Fatalf("overlapping instances: %v", ov)
	}
	// Order from the event logs.
	stopped := firstEvent(t, n1.ev, protocol.EventSingletonStopped, "")
	started := firstEvent(t, n2.ev, protocol.EventSingletonStarted, "")
	if started.Time.Before(stopped.Time) {
		t.Errorf("n2 started at %v before n1 stopped at %v", started.Time, stopped.Time)
	}
	if stopped.Singleton != "test-singleton" || stopped.Member != n1.uid() || started.Member != n2.uid() {
		t.Errorf("events %+v %+v", stopped, started)
	}
	// The protocol steps on both sides.
	if e := firstEvent(t, n2.ev, protocol.EventHandOverToMe, "sent"); e.Peer != n1.uid() {
		t.Errorf("n2 HandOverToMe peer %q", e.Peer)
	}
	firstEvent(t, n2.ev, protocol.EventHandOverDone, "received")
	if e := firstEvent(t, n1.ev, protocol.EventHandOverToMe, "received"); e.Peer != n2.uid() {
		t.Errorf("n1 HandOverToMe peer %q", e.Peer)
	}
	firstEvent(t, n1.ev, protocol.EventHandOverInProgress, "answered")
	firstEvent(t, n1.ev, protocol.EventHandOverDone, "sent")
	if done := firstEvent(t, n1.ev, protocol.EventHandOverDone, "sent"); done.Seq < stopped.Seq {
		t.Error("n1 told HandOverDone before its instance stopped")
	}
	oc := eventsOf(n2.ev, protocol.EventOldestChanged)
	if len(oc) < 2 || oc[len(oc)-1].Member != n2.uid() {
		t.Errorf("n2 OldestChanged %+v", oc)
	}

	// n1 is removed: nothing changes.
	c.setAll(up.with("n1", cluster.StatusRemoved))
	eventually(t, wait, func() bool { return n2.mgr.Status().Running }, "n2 still runs")
	if rec.count("n2", "start") != 1 || rec.count("n3", "start") != 0 {
		t.Errorf("unexpected starts: %+v", rec.entries())
	}
}

func TestTakeOverAfterDown(t *testing.T) {
	up := allUp("n1", "n2", "n3")
	tests := []struct {
		name   string
		others view // n2's and n3's view after n1 is downed
	}{
		{"downed", up.with("n1", cluster.StatusDown)},
		{"disappeared", up.without("n1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			cfg := testConfig()
			cfg.DownRemovalMargin = 200 * time.Millisecond
			c := newCluster(t, 3, cfg, func(n string) Factory { return rec.factory(n, 0) })
			c.setAll(up)
			c.start()
			n1, n2 := c.node("n1"), c.node("n2")
			eventually(t, wait, func() bool { return running(n1) }, "n1 runs")
			c.awaitSteady()

			c.setView("n1", up.with("n1", cluster.StatusDown)) // n1 learns it is downed
			t0 := time.Now()
			c.setView("n2", tt.others)
			c.setView("n3", tt.others)
			eventually(t, wait, func() bool { return running(n2) }, "n2 takes over")
			started := firstEvent(t, n2.ev, protocol.EventSingletonStarted, "")
			if d := started.Time.Sub(t0); d < cfg.DownRemovalMargin {
				t.Errorf("n2 started %v after seeing n1 downed, want >= %v", d, cfg.DownRemovalMargin)
			}
			eventually(t, wait, func() bool { return closed(n1.mgr.HandedOver()) }, "n1 done")
			if st := n1.mgr.Status(); st.State != StateStopped || st.Running {
				t.Errorf("n1 status %+v", st)
			}
			for _, e := range eventsOf(n2.ev, protocol.EventHandOverToMe) {
				if strings.HasPrefix(e.Detail, "sent") && e.Peer == n1.uid() {
					t.Errorf("n2 asked a downed member to hand over: %+v", e)
				}
			}
			if ov := rec.overlapErrors(); len(ov) > 0 {
				t.Fatalf("overlapping instances: %v", ov)
			}
			if running(c.node("n3")) {
				t.Error("n3 runs")
			}
		})
	}
}

func TestSelfDownedStopsAtOnce(t *testing.T) {
	rec := newRecorder()
	cfg := testConfig()
	c := newCluster(t, 1, cfg, func(n string) Factory { return rec.factory(n, 0) })
	n1 := c.node("n1")
	c.setAll(allUp("n1"))
	c.start()
	eventually(t, wait, func() bool { return running(n1) }, "n1 runs")
	c.awaitSteady()

	// A request in flight and one queued behind it.
	inFlight := make(chan error, 1)
	go func() {
		_, err := n1.mgr.Handle(context.Background(), Request{Op: "block"})
		inFlight <- err
	}()
	eventually(t, wait, func() bool { return len(rec.handled("n1")) == 1 }, "blocking request taken")
	queued := make(chan error, 1)
	go func() {
		_, err := n1.mgr.Handle(context.Background(), Request{Op: "echo"})
		queued <- err
	}()
	eventually(t, wait, func() bool { return len(runnerQueue(n1.mgr)) == 1 }, "request queued")

	c.setAll(allUp("n1").with("n1", cluster.StatusDown))
	select {
	case err := <-queued:
		if !errors.Is(err, ErrNotRunning) || !IsDefinite(err) {
			t.Errorf("queued request: %v, want definite ErrNotRunning", err)
		}
	case <-time.After(wait):
		t.Fatal("queued request not failed")
	}
	if _, err := n1.mgr.Handle(context.Background(), Request{Op: "echo"}); !errors.Is(err, ErrNotRunning) {
		t.Errorf("new request while stopping: %v", err)
	}
	close(rec.gate) // the in-flight request finishes, then Stop
	if err := <-inFlight; err != nil {
		t.Errorf("in-flight request: %v", err)
	}
	eventually(t, wait, func() bool { return rec.count("n1", "stop") == 1 }, "instance stopped")
	eventually(t, wait, func() bool { return closed(n1.mgr.HandedOver()) }, "HandedOver")
	if st := n1.mgr.Status(); st.State != StateStopped || st.Running {
		t.Errorf("status %+v", st)
	}
	// Never again in this manager, even if the view said otherwise.
	c.setAll(allUp("n1"))
	time.Sleep(10 * cfg.RetryInterval)
	if rec.count("n1", "start") != 1 || running(n1) {
		t.Error("downed manager started the singleton again")
	}
}

func runnerQueue(m *Manager) []*envelope {
	m.mu.Lock()
	r := m.run
	m.mu.Unlock()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*envelope(nil), r.queue...)
}

func TestHandOverRetries(t *testing.T) {
	tests := []struct {
		name  string
		final cluster.Status
	}{
		{"removed", cluster.StatusRemoved},
		{"downed", cluster.StatusDown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			cfg := testConfig()
			cfg.MaxHandOverRetries, cfg.MaxTakeOverRetries = 4, 2
			cfg.DownRemovalMargin = 100 * time.Millisecond
			c := newCluster(t, 2, cfg, func(n string) Factory { return rec.factory(n, 0) })
			n1, n2 := c.node("n1"), c.node("n2")
			up := allUp("n1", "n2")
			c.setAll(up)
			c.start()
			eventually(t, wait, func() bool { return running(n1) }, "n1 runs")
			c.awaitSteady()

			// n2 cannot reach n1, and sees it leaving; n1 sees nothing.
			n2.filter.Set(peer.Rules{DropOut: []string{n1.member.GossipAddr}})
			c.setView("n2", up.with("n1", cluster.StatusLeaving))
			eventually(t, wait, func() bool { return len(eventsOf(n2.ev, protocol.EventHandOverGaveUp)) >= 2 },
				"n2 gives up twice")
			e := eventsOf(n2.ev, protocol.EventHandOverGaveUp)[0]
			if e.Peer != n1.uid() {
				t.Errorf("gave-up event %+v", e)
			}
			if sent := len(eventsOf(n2.ev, protocol.EventHandOverToMe)); sent < 2*cfg.MaxHandOverRetries {
				t.Errorf("n2 sent %d HandOverToMe, want >= %d", sent, 2*cfg.MaxHandOverRetries)
			}
			if running(n2) || rec.count("n2", "start") != 0 {
				t.Fatal("n2 started while the previous oldest is leaving and unreachable")
			}

			// n1 goes away for good (it stops first), then n2 learns it.
			c.setView("n1", up.with("n1", tt.final))
			eventually(t, wait, func() bool { return rec.count("n1", "stop") == 1 }, "n1 stopped")
			c.setView("n2", up.with("n1", tt.final))
			eventually(t, wait, func() bool { return running(n2) }, "n2 starts once n1 is %s", tt.final)
			if ov := rec.overlapErrors(); len(ov) > 0 {
				t.Fatalf("overlapping instances: %v", ov)
			}
		})
	}
}

func TestHandOverGivesUpThenStartsWhenPreviousUnknown(t *testing.T) {
	// Hand-over retries run out while the previous oldest has meanwhile
	// been forgotten: the new oldest starts.
	rec := newRecorder()
	cfg := testConfig()
	cfg.MaxHandOverRetries, cfg.MaxTakeOverRetries = 3, 2
	cfg.DownRemovalMargin = -1
	c := newCluster(t, 2, cfg, func(n string) Factory { return rec.factory(n, 0) })
	n1, n2 := c.node("n1"), c.node("n2")
	c.setAll(allUp("n2").with("n1", cluster.StatusLeaving))
	// n1 never runs (its manager is not started); n2 cannot reach it.
	n2.filter.Set(peer.Rules{DropOut: []string{n1.member.GossipAddr}})
	c.startNode(n2)
	eventually(t, wait, func() bool { return len(eventsOf(n2.ev, protocol.EventHandOverGaveUp)) >= 1 }, "gave up")
	c.setView("n2", allUp("n2"))
	eventually(t, wait, func() bool { return running(n2) }, "n2 starts")
}

func TestLeavingOnlyMemberWithRole(t *testing.T) {
	rec := newRecorder()
	cfg := testConfig()
	cfg.Role = "worker"
	c := newCluster(t, 3, cfg, func(n string) Factory { return rec.factory(n, 0) })
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	n1.member.Roles = nil // oldest, but not a worker
	n3.member.Roles = nil
	up := allUp("n1", "n2", "n3")
	c.setAll(up)
	c.start()
	eventually(t, wait, func() bool { return running(n2) }, "n2 (oldest worker) runs")
	c.awaitSteady()
	if running(n1) || running(n3) {
		t.Fatal("a member without the role runs the singleton")
	}
	if n1.mgr.Status().Oldest != n2.uid() {
		t.Errorf("n1 sees oldest %q", n1.mgr.Status().Oldest)
	}
	c.setAll(up.with("n2", cluster.StatusLeaving))
	eventually(t, wait, func() bool { return closed(n2.mgr.HandedOver()) }, "n2 handed over")
	if st := n2.mgr.Status(); st.State != StateEnd || st.Running {
		t.Errorf("n2 status %+v", st)
	}
	if rec.count("n2", "stop") != 1 || rec.count("n1", "start")+rec.count("n3", "start") != 0 {
		t.Errorf("instances %+v", rec.entries())
	}
	// A leaving member that never ran it has handed over at once.
	c.setAll(up.with("n2", cluster.StatusLeaving).with("n3", cluster.StatusLeaving))
	eventually(t, wait, func() bool { return closed(n3.mgr.HandedOver()) }, "n3 handed over")
	if closed(n1.mgr.HandedOver()) {
		t.Error("HandedOver closed on a member that is not leaving")
	}
}

func TestTakeOverFromMe(t *testing.T) {
	// n1 sees itself leaving before anyone else does: it asks n2 to take
	// over, n2 asks n1 to hand over, n2 starts once n1 stopped.
	rec := newRecorder()
	c := newCluster(t, 3, testConfig(), func(n string) Factory { return rec.factory(n, 30*time.Millisecond) })
	n1, n2, n3 := c.node("n1"), c.node("n2"), c.node("n3")
	up := allUp("n1", "n2", "n3")
	c.setAll(up)
	c.start()
	eventually(t, wait, func() bool { return running(n1) }, "n1 runs")
	c.awaitSteady()

	c.setView("n1", up.with("n1", cluster.StatusLeaving))
	eventually(t, wait, func() bool { return running(n2) }, "n2 took over")
	eventually(t, wait, func() bool { return closed(n1.mgr.HandedOver()) }, "n1 handed over")
	if e := firstEvent(t, n2.ev, protocol.EventTakeOverFromMe, "received"); e.Peer != n1.uid() {
		t.Errorf("TakeOverFromMe %+v", e)
	}
	firstEvent(t, n1.ev, protocol.EventTakeOverFromMe, "sent")
	if running(n3) {
		t.Error("n3 runs")
	}
	// The others catch up; n2 keeps it.
	c.setAll(up.with("n1", cluster.StatusLeaving))
	c.setAll(up.with("n1", cluster.StatusRemoved))
	time.Sleep(5 * testConfig().RetryInterval)
	if !running(n2) || rec.count("n2", "start") != 1 || rec.count("n3", "start") != 0 {
		t.Errorf("after catching up: running %v, instances %+v", c.runningNodes(), rec.entries())
	}
	if ov := rec.overlapErrors(); len(ov) > 0 {
		t.Fatalf("overlapping instances: %v", ov)
	}
}

func TestInstanceFailureRestarts(t *testing.T) {
	for _, op := range []string{"fail", "fenced", "panic"} {
		t.Run(op, func(t *testing.T) {
			rec := newRecorder()
			c := newCluster(t, 1, testConfig(), func(n string) Factory { return rec.factory(n, 0) })
			n1 := c.node("n1")
			c.setAll(allUp("n1"))
			c.start()
			eventually(t, wait, func() bool { return running(n1) }, "runs")
			_, err := n1.mgr.Handle(context.Background(), Request{Op: op})
			if !isInstanceFailure(err) {
				t.Fatalf("Handle(%s) = %v, want an instance failure", op, err)
			}
			eventually(t, wait, func() bool { return n1.mgr.Status().Started == 2 && running(n1) }, "restarted")
			failed := firstEvent(t, n1.ev, protocol.EventSingletonFailed, "")
			stops := eventsOf(n1.ev, protocol.EventSingletonStopped)
			starts := eventsOf(n1.ev, protocol.EventSingletonStarted)
			if len(stops) != 1 || len(starts) != 2 || !(failed.Seq < stops[0].Seq && stops[0].Seq < starts[1].Seq) {
				t.Errorf("events: failed %+v stops %+v starts %+v", failed, stops, starts)
			}
			if res, err := n1.mgr.Handle(context.Background(), Request{Op: "echo"}); err != nil || !strings.Contains(string(res), `"n":1`) {
				t.Errorf("fresh instance: %s, %v", res, err)
			}
		})
	}
}

func TestFactoryFailureRetries(t *testing.T) {
	rec := newRecorder()
	fails := make(chan struct{}, 2)
	fails <- struct{}{}
	fails <- struct{}{}
	c := newCluster(t, 1, testConfig(), func(n string) Factory {
		return func(ctx context.Context) (Instance, error) {
			select {
			case <-fails:
				return nil, errTest
			default:
			}
			return rec.factory(n, 0)(ctx)
		}
	})
	n1 := c.node("n1")
	c.setAll(allUp("n1"))
	c.start()
	eventually(t, wait, func() bool { return running(n1) }, "started after failures")
	if n := len(eventsOf(n1.ev, protocol.EventSingletonFailed)); n != 2 {
		t.Errorf("%d SingletonFailed, want 2", n)
	}
	if n1.mgr.Status().Started != 1 {
		t.Errorf("started %d", n1.mgr.Status().Started)
	}
}

func TestStopTimeout(t *testing.T) {
	rec := newRecorder()
	cfg := testConfig()
	cfg.StopTimeout = 150 * time.Millisecond
	block := make(chan struct{})
	defer close(block)
	c := newCluster(t, 1, cfg, func(n string) Factory {
		return func(ctx context.Context) (Instance, error) {
			return rec.newInst(n, 0, block), nil
		}
	})
	n1 := c.node("n1")
	c.setAll(allUp("n1"))
	c.start()
	eventually(t, wait, func() bool { return running(n1) }, "runs")
	t0 := time.Now()
	c.setAll(allUp("n1").with("n1", cluster.StatusLeaving))
	eventually(t, wait, func() bool { return closed(n1.mgr.HandedOver()) }, "given up")
	if d := time.Since(t0); d < cfg.StopTimeout {
		t.Errorf("gave up after %v, want >= %v", d, cfg.StopTimeout)
	}
	if e := firstEvent(t, n1.ev, protocol.EventSingletonStopped, ""); !strings.Contains(e.Detail, "forgotten") {
		t.Errorf("stopped event %+v", e)
	}
	if st := n1.mgr.Status(); st.State != StateEnd || st.Running {
		t.Errorf("status %+v", st)
	}
}

func TestRunShutdownStopsInstance(t *testing.T) {
	rec := newRecorder()
	c := newCluster(t, 1, testConfig(), func(n string) Factory { return rec.factory(n, 0) })
	n1 := c.node("n1")
	c.setAll(allUp("n1"))
	c.start()
	eventually(t, wait, func() bool { return running(n1) }, "runs")
	c.stopNode(n1)
	if rec.count("n1", "stop") != 1 || !closed(n1.mgr.HandedOver()) || running(n1) {
		t.Errorf("after shutdown: instances %+v", rec.entries())
	}
	if err := n1.mgr.Run(context.Background()); err == nil {
		t.Error("second Run accepted")
	}
}

func TestMailbox(t *testing.T) {
	ev := kit.NewEventLog(clock.Real().Now, 0)
	type answer struct {
		op  string
		err error
	}
	type fixture struct {
		r   *runner
		rec *recorder
		out chan answer
	}
	setup := func(t *testing.T) *fixture {
		fx := &fixture{rec: newRecorder(), out: make(chan answer, 10)}
		fx.r = newRunner(context.Background(), 1, "x", "n@1",
			func(context.Context) (Instance, error) { return fx.rec.newInst("n", 0, nil), nil },
			ev, testLogger(t, "n"), func() {})
		go fx.r.loop()
		eventually(t, wait, fx.r.running, "started")
		return fx
	}
	queueLen := func(r *runner) int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.queue)
	}
	// send calls op in the background and waits until it is queued (or,
	// on an idle runner, taken).
	send := func(fx *fixture, ctx context.Context, op string) {
		before, handled := queueLen(fx.r), len(fx.rec.handled("n"))
		go func() {
			_, err := fx.r.call(ctx, Request{Op: op})
			fx.out <- answer{op, err}
		}()
		eventually(t, wait, func() bool {
			return queueLen(fx.r) == before+1 || len(fx.rec.handled("n")) == handled+1
		}, "%s queued", op)
	}

	t.Run("order and graceful termination", func(t *testing.T) {
		fx := setup(t)
		send(fx, context.Background(), "block")
		for _, op := range []string{"echo", "unknown-op", "echo"} {
			send(fx, context.Background(), op)
		}
		fx.r.stop(false) // termination behind the three
		if _, err := fx.r.call(context.Background(), Request{Op: "echo"}); !errors.Is(err, ErrNotRunning) || !IsDefinite(err) {
			t.Errorf("request after termination: %v", err)
		}
		close(fx.rec.gate)
		<-fx.r.done
		if got := strings.Join(fx.rec.handled("n"), ","); got != "block,echo,unknown-op,echo" {
			t.Errorf("handled %q", got)
		}
		for range 4 {
			a := <-fx.out
			if a.op == "unknown-op" {
				if !errors.Is(a.err, ErrBadRequest) || !IsDefinite(a.err) {
					t.Errorf("unknown op: %v", a.err)
				}
			} else if a.err != nil {
				t.Errorf("%s: %v", a.op, a.err)
			}
		}
		if fx.rec.count("n", "stop") != 1 {
			t.Error("Stop not called once")
		}
		if e := firstEvent(t, ev, protocol.EventSingletonStopped, ""); e.Singleton != "x" || e.Member != "n@1" {
			t.Errorf("stopped event %+v", e)
		}
	})

	t.Run("immediate termination fails queued requests", func(t *testing.T) {
		fx := setup(t)
		send(fx, context.Background(), "block")
		send(fx, context.Background(), "echo")
		fx.r.stop(true)
		a := <-fx.out
		if a.op != "echo" || !errors.Is(a.err, ErrNotRunning) || !IsDefinite(a.err) {
			t.Errorf("queued request: %+v", a)
		}
		close(fx.rec.gate)
		if a := <-fx.out; a.err != nil {
			t.Errorf("in-flight request: %+v", a)
		}
		<-fx.r.done
		if got := strings.Join(fx.rec.handled("n"), ","); got != "block" {
			t.Errorf("handled %q", got)
		}
	})

	t.Run("deadlines", func(t *testing.T) {
		fx := setup(t)
		ctxIn, cancelIn := context.WithCancel(context.Background())
		send(fx, ctxIn, "block")
		ctxQ, cancelQ := context.WithCancel(context.Background())
		send(fx, ctxQ, "echo")
		cancelQ() // expires while queued: definite
		a := <-fx.out
		if a.op != "echo" || !errors.Is(a.err, ErrNotRunning) || !IsDefinite(a.err) {
			t.Errorf("expired queued request: %+v", a)
		}
		cancelIn() // expires while being handled: unknown
		a = <-fx.out
		if a.op != "block" || !errors.Is(a.err, ErrUnknownOutcome) || IsDefinite(a.err) {
			t.Errorf("expired in-flight request: %+v", a)
		}
		fx.r.stop(false)
		<-fx.r.done
		if got := strings.Join(fx.rec.handled("n"), ","); got != "block" {
			t.Errorf("handled %q (the expired request must not run)", got)
		}
	})
}

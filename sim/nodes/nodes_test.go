package nodes

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/impl/persistence"
)

// startEvery is how far apart seed's nodes start: at once for even seeds
// (the nodes draw their ages in any order: what found the older-joiner
// bugs, docs/simulation.md), half a second apart for odd ones (in order,
// as the runtimes start them).
func startEvery(seed uint64) time.Duration {
	if seed%2 == 0 {
		return 0
	}
	return 500 * time.Millisecond
}

// newCluster is a simulated cluster of n nodes on a journal of its own in
// dir; trace collects its steps.
func newCluster(t testing.TB, seed uint64, n int, dir string, trace *[]string, events func(history.NodeEvent)) *Cluster {
	t.Helper()
	j, err := persistence.Open(filepath.Join(dir, fmt.Sprintf("journal-%d.db", seed)), persistence.StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	c, err := New(Config{Seed: seed, Nodes: n, Journal: j, StartEvery: startEvery(seed), Events: events, Trace: func(s string) {
		if trace != nil {
			*trace = append(*trace, s)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClusterFormsWithOneSingleton: three nodes started together form one
// cluster, and the oldest runs the one singleton instance.
func TestClusterFormsWithOneSingleton(t *testing.T) {
	dir := t.TempDir()
	for seed := range uint64(20) {
		var trace []string
		c := newCluster(t, seed, 3, dir, &trace, nil)
		c.Run(20 * time.Second)
		if err := settled(c); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, tail(trace))
		}
		if err := oneInstanceOnTheOldest(c); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, tail(trace))
		}
	}
}

// TestFaultsKeepOneSingleton drives each seed through a random schedule of
// faults (partitions of random shape, one-way cuts, loss, kills, pauses,
// graceful leaves), then heals everything and lets the cluster settle. Throughout,
// no two instances of the singleton may live on different members at once;
// in the end the cluster has converged and exactly one instance lives, on
// the oldest member.
func TestFaultsKeepOneSingleton(t *testing.T) {
	seeds := uint64(150)
	if testing.Short() {
		seeds = 30
	}
	dir := t.TempDir()
	for seed := range seeds {
		var trace []string
		var evs history.Events
		c := newCluster(t, seed, 5, dir, &trace, func(e history.NodeEvent) { evs.Events = append(evs.Events, e) })
		schedule, pauses := randomFaults(c, 5*time.Second, 60*time.Second)
		c.Run(150 * time.Second)
		fail := func(err error) {
			t.Fatalf("seed %d (faults: %s): %v\n%s", seed, strings.Join(schedule, "; "), err, tail(trace))
		}
		if err := noOverlap(c.Lives(), pauses); err != nil {
			fail(err)
		}
		// The harness's own checker judges the events the nodes logged, as
		// it judges a real run's.
		if r := (checker.SingletonEvents{}).Check(context.Background(), pauseHistory(pauses), checker.Inputs{Events: &evs}); r.Verdict != checker.Valid {
			fail(fmt.Errorf("singleton-events: %s: %s", r.Verdict, r.Summary))
		}
		if err := settled(c); err != nil {
			fail(err)
		}
		if err := oneInstanceOnTheOldest(c); err != nil {
			fail(err)
		}
	}
}

// TestSameSeedSameEvents: a faulty run's events file is the same, byte
// for byte, each time its seed runs.
func TestSameSeedSameEvents(t *testing.T) {
	dir := t.TempDir()
	sum := func(run int) [32]byte {
		path := filepath.Join(dir, fmt.Sprintf("events-%d.jsonl", run))
		w, err := history.CreateEvents(path)
		if err != nil {
			t.Fatal(err)
		}
		sub := filepath.Join(dir, fmt.Sprint(run))
		if err := os.Mkdir(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		c := newCluster(t, 7, 5, sub, nil, func(e history.NodeEvent) {
			if err := w.Write(e); err != nil {
				t.Fatal(err)
			}
		})
		randomFaults(c, 5*time.Second, 60*time.Second)
		c.Run(100 * time.Second)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 10_000 {
			t.Fatalf("run %d logged only %d bytes of events", run, len(b))
		}
		return sha256.Sum256(b)
	}
	if a, b := sum(1), sum(2); a != b {
		t.Fatalf("the same seed wrote different events: %x vs %x", a, b)
	}
}

// pause is a node's pause, from its start until it resumed.
type pause struct {
	node       string
	from, till time.Duration
}

// randomFaults schedules faults from..until, one at a time, each healed
// before the next, drawn from the cluster's seed; it returns what it
// scheduled, for the failure message, and the pauses.
func randomFaults(c *Cluster, from, until time.Duration) ([]string, []pause) {
	w := c.World
	r := w.Rand()
	names := func() []string {
		var out []string
		for _, n := range c.Nodes() {
			out = append(out, n.Name)
		}
		return out
	}()
	var schedule []string
	var pauses []pause
	pick := func() string { return names[r.IntN(len(names))] }
	for t := from; t < until; {
		last := 3*time.Second + time.Duration(r.Int64N(int64(12*time.Second)))
		at, heal := t, t+last
		var what string
		switch r.IntN(7) {
		case 0: // a partition of random shape
			perm := r.Perm(len(names))
			cut := 1 + r.IntN(len(names)-1)
			var a, b []string
			for i, p := range perm {
				if i < cut {
					a = append(a, names[p])
				} else {
					b = append(b, names[p])
				}
			}
			slices.Sort(a)
			slices.Sort(b)
			what = fmt.Sprintf("partition %v|%v", a, b)
			w.At(at, func() { c.Partition(a, b) })
			w.At(heal, c.Heal)
		case 1: // a node's packets lost one way
			n := pick()
			what = "one-way from " + n
			w.At(at, func() {
				for _, o := range names {
					if o != n {
						c.CutOneWay(n, o)
					}
				}
			})
			w.At(heal, c.Heal)
		case 2:
			what = "loss 30%"
			w.At(at, func() { c.SetLoss(0.3) })
			w.At(heal, c.Heal)
		case 3:
			n := pick()
			what = "kill " + n
			w.At(at, func() { c.Kill(n) })
			w.At(heal, func() { c.Start(n) })
		case 4:
			n := pick()
			what = "leave " + n
			w.At(at, func() { c.Leave(n) })
			// A node that left is started again as a new process.
			w.At(heal, func() {
				if !c.Node(n).Running() {
					c.Start(n)
				}
			})
		case 6:
			n := pick()
			what = "pause " + n
			pauses = append(pauses, pause{node: n, from: at, till: heal})
			w.At(at, func() { c.Pause(n) })
			w.At(heal, func() { c.Resume(n) })
		case 5:
			n := pick()
			what = "kill " + n + ", an operator downs it"
			w.At(at, func() { c.Kill(n) })
			w.At(at+time.Second, func() {
				for _, o := range c.Nodes() {
					if o.Name != n && o.Running() {
						if s, ok := o.Snapshot(); ok {
							for _, ms := range s.Members {
								if ms.Name == n {
									c.Down(o.Name, ms.UID())
								}
							}
						}
						break
					}
				}
			})
			w.At(heal, func() { c.Start(n) })
		}
		schedule = append(schedule, fmt.Sprintf("%v-%v %s", at, heal, what))
		t = heal + time.Second + time.Duration(r.Int64N(int64(3*time.Second)))
	}
	return schedule, pauses
}

// pauseHistory is a history with the pauses' nemesis entries, as the
// harness records them: what the checker needs to excuse a frozen node.
func pauseHistory(pauses []pause) *history.File {
	h := &history.File{}
	for _, p := range pauses {
		for _, e := range []struct {
			at     time.Duration
			action string
		}{{p.from, history.ActionInject}, {p.till, history.ActionHeal}} {
			v, _ := json.Marshal(map[string]any{"action": e.action, "targets": map[string]any{"targets": []string{p.node}}})
			h.Ops = append(h.Ops, history.Op{Time: int64(e.at), Kind: history.Nemesis, Process: -1, F: "pause:one", Value: v})
		}
	}
	return h
}

// noOverlap: no two lives of instances on different members overlap. A
// paused node's instance that is gone within checker.ThawGrace of the
// resume counts as ended when the pause began (it could not act; the
// harness's checker excuses it the same way).
func noOverlap(lives []Life, pauses []pause) error {
	end := func(l Life) time.Duration {
		if l.Till == 0 {
			return 1 << 62
		}
		for _, p := range pauses {
			if p.node == l.Node && l.From < p.from && l.Till > p.from && l.Till <= p.till+checker.ThawGrace {
				return p.from
			}
		}
		return l.Till
	}
	for i, a := range lives {
		for _, b := range lives[i+1:] {
			if a.Member != b.Member && a.From < end(b) && b.From < end(a) {
				return fmt.Errorf("two instances at once: %s #%d %v–%v and %s #%d %v–%v",
					a.Member, a.Num, a.From, a.Till, b.Member, b.Num, b.From, b.Till)
			}
		}
	}
	return nil
}

// settled: the membership converged, every node running.
func settled(c *Cluster) error {
	for _, n := range c.Nodes() {
		if !n.Running() {
			return fmt.Errorf("%s is not running", n.Name)
		}
	}
	if !c.Converged() {
		var views []string
		for _, n := range c.Nodes() {
			s, _ := n.Snapshot()
			var ms []string
			for _, m := range s.Members {
				ms = append(ms, fmt.Sprintf("%s:%s:%v", m.UID(), m.Status, m.Reachable))
			}
			views = append(views, n.Name+" sees "+strings.Join(ms, " "))
		}
		return fmt.Errorf("the membership has not converged:\n%s", strings.Join(views, "\n"))
	}
	return nil
}

// oneInstanceOnTheOldest: exactly one instance lives, on the oldest member
// (as n1 sees it: the membership has converged).
func oneInstanceOnTheOldest(c *Cluster) error {
	s, _ := c.Node("n1").Snapshot()
	o, ok := s.Oldest("")
	if !ok {
		return fmt.Errorf("no oldest member")
	}
	name := o.Name
	var alive []string
	for _, l := range c.Lives() {
		if l.Till == 0 {
			alive = append(alive, l.Node)
		}
	}
	if !slices.Equal(alive, []string{name}) {
		return fmt.Errorf("instances live on %v, want on %s only", alive, name)
	}
	return nil
}

func tail(trace []string) string {
	if len(trace) > 200 {
		trace = trace[len(trace)-200:]
	}
	return strings.Join(trace, "\n")
}

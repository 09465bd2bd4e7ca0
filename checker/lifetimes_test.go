package checker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
)

// ev builds one node event; lo and hi are in milliseconds.
func ev(node, inc string, seq uint64, typ string, lo, hi int64, key string) history.NodeEvent {
	e := history.NodeEvent{Node: node, Lo: lo * 1e6, Hi: hi * 1e6, Event: protocol.Event{Incarnation: inc, Seq: seq, Type: typ}}
	switch {
	case strings.HasPrefix(typ, "singleton"):
		e.Singleton = key
	case strings.HasPrefix(typ, "coordinator"):
		e.EntityType = key
	case strings.HasPrefix(typ, "shard"):
		e.EntityType, e.Shard, _ = strings.Cut(key, "/")
	}
	return e
}

func writeEvents(t *testing.T, evs []history.NodeEvent, cut bool) string {
	t.Helper()
	dir := t.TempDir()
	w, err := history.CreateEvents(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(evs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if cut {
		f, _ := os.OpenFile(filepath.Join(dir, "events.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(`{"node":"n1","lo":1,`)
		f.Close()
	}
	return dir
}

func TestSingletonEvents(t *testing.T) {
	const S = "id-generator"
	tests := []struct {
		name string
		evs  []history.NodeEvent
		cut  bool
		want Verdict
	}{
		{"no events", nil, false, Unknown},
		{"hand-over: stop before start", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n1", "a", 2, "singleton-stopped", 100, 110, S),
			ev("n2", "b", 1, "singleton-started", 105, 120, S),
		}, false, Valid},
		{"windows too wide to prove an overlap", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n1", "a", 2, "singleton-stopped", 100, 200, S),
			ev("n2", "b", 1, "singleton-started", 90, 150, S),
		}, false, Valid},
		{"two alive at once", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n2", "b", 1, "singleton-started", 50, 60, S),
			ev("n1", "a", 2, "singleton-stopped", 100, 110, S),
		}, false, Invalid},
		{"killed (no stop), later events of the member prove it alive", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n2", "b", 1, "singleton-started", 50, 60, S),
			ev("n1", "a", 2, "member-unreachable", 100, 110, ""),
		}, false, Invalid},
		{"killed (no stop, nothing later): no proof", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n2", "b", 1, "singleton-started", 50, 60, S),
		}, false, Valid},
		{"downed: self-downed ends it", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n1", "a", 2, "self-downed", 40, 45, ""),
			ev("n2", "b", 1, "singleton-started", 50, 60, S),
			ev("n1", "a", 3, "member-unreachable", 100, 110, ""),
		}, false, Valid},
		{"different singletons may overlap", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n2", "b", 1, "singleton-started", 50, 60, "other"),
			ev("n1", "a", 2, "singleton-stopped", 100, 110, S),
		}, false, Valid},
		{"two coordinators of one type", []history.NodeEvent{
			ev("n1", "a", 1, "coordinator-started", 0, 10, "register"),
			ev("n3", "c", 7, "coordinator-started", 20, 30, "register"),
			ev("n1", "a", 2, "coordinator-stopped", 100, 110, "register"),
		}, false, Invalid},
		{"the same member restarts its instance", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n1", "a", 2, "singleton-failed", 20, 30, S),
			ev("n1", "a", 3, "singleton-started", 40, 50, S),
			ev("n1", "a", 4, "member-up", 60, 70, ""),
		}, false, Valid},
		{"cut off: what is there is checked", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S),
			ev("n2", "b", 1, "singleton-started", 50, 60, S),
			ev("n1", "a", 2, "singleton-stopped", 100, 110, S),
		}, true, Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.evs != nil || tt.cut {
				dir = writeEvents(t, tt.evs, tt.cut)
			}
			r := SingletonEvents{}.Check(context.Background(), nil, ReadInputs(dir))
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %v", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
			if r.Verdict == Invalid && len(r.Evidence) == 0 {
				t.Error("invalid without evidence")
			}
		})
	}
}

func TestHandOffEvents(t *testing.T) {
	tests := []struct {
		name     string
		evs      []history.NodeEvent
		want     Verdict
		contains string
	}{
		{"hand-off waits for the stop", []history.NodeEvent{
			ev("n1", "a", 1, "shard-started", 0, 10, "register/7"),
			ev("n1", "a", 2, "shard-stopped", 100, 110, "register/7"),
			ev("n2", "b", 1, "shard-started", 120, 130, "register/7"),
			ev("n2", "b", 2, "buffer-dropped", 140, 150, ""),
		}, Valid, "1 buffered messages dropped"},
		{"started before the old region stopped", []history.NodeEvent{
			ev("n1", "a", 1, "shard-started", 0, 10, "register/7"),
			ev("n2", "b", 1, "shard-started", 50, 60, "register/7"),
			ev("n1", "a", 2, "shard-stopped", 100, 110, "register/7"),
		}, Invalid, "shard register/7"},
		{"one entity started in two places", []history.NodeEvent{
			entityEv("n1", "a", 1, "entity-started", 0, 10, ""),
			entityEv("n2", "b", 1, "entity-started", 50, 60, ""),
			entityEv("n1", "a", 2, "entity-stopped", 100, 110, ""),
		}, Invalid, "entity register/r1"},
		{"different shards", []history.NodeEvent{
			ev("n1", "a", 1, "shard-started", 0, 10, "register/7"),
			ev("n2", "b", 1, "shard-started", 50, 60, "register/8"),
			ev("n1", "a", 2, "shard-stopped", 100, 110, "register/7"),
		}, Valid, "no region dropped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := HandOff{}.Check(context.Background(), nil, ReadInputs(writeEvents(t, tt.evs, false)))
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %v", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
			if !strings.Contains(r.Summary+strings.Join(r.Evidence, " "), tt.contains) {
				t.Errorf("result %q %v lacks %q", r.Summary, r.Evidence, tt.contains)
			}
		})
	}
}

// The sweep finds an overlap exactly when some pair of lives on different
// members overlaps, and every pair it reports does.
func TestOverlapsAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for round := range 3000 {
		n := 1 + rng.IntN(8)
		lives := make([]life, n)
		for i := range lives {
			lo := rng.Int64N(100)
			hi := lo + rng.Int64N(10)
			to := hi - 5 + rng.Int64N(40)
			lives[i] = life{key: "k", member: fmt.Sprint("m", rng.IntN(3)), to: to,
				start: &history.NodeEvent{Lo: lo, Hi: hi}}
		}
		brute := false
		for x := range lives {
			for y := x + 1; y < len(lives); y++ {
				if lives[x].member != lives[y].member {
					if _, ok := overlap(&lives[x], &lives[y]); ok {
						brute = true
					}
				}
			}
		}
		got := overlaps(lives)
		if (len(got) > 0) != brute {
			t.Fatalf("round %d: sweep found %d overlaps, brute force %v: %+v", round, len(got), brute, lives)
		}
		for _, pr := range got {
			if _, ok := overlap(pr[0], pr[1]); !ok || pr[0].member == pr[1].member {
				t.Fatalf("round %d: reported a pair that does not overlap", round)
			}
		}
	}
}

// writeSamples adds status.jsonl to dir.
func writeSamples(t *testing.T, dir string, ss []history.StatusSample) {
	t.Helper()
	w, err := history.CreateStatus(filepath.Join(dir, "status.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// entityEv is an entity event of register/r1; lo and hi in milliseconds.
func entityEv(node, inc string, seq uint64, typ string, lo, hi int64, incarnation string) history.NodeEvent {
	return history.NodeEvent{Node: node, Lo: lo * 1e6, Hi: hi * 1e6, Event: protocol.Event{Incarnation: inc, Seq: seq, Type: typ,
		EntityType: "register", Entity: "r1", EntityIncarnation: incarnation}}
}

// listing is a status sample of node (member node@inc) in [lo, hi] ms
// listing register/r1's incarnation and running singletons.
func listing(node, inc string, lo, hi int64, incarnation string, singletons ...history.SampledSingleton) history.StatusSample {
	s := history.StatusSample{Node: node, Member: node + "@" + inc, Lo: lo * 1e6, Hi: hi * 1e6, Singletons: singletons}
	if incarnation != "" {
		s.Entities = []history.SampledEntity{{Type: "register", Shard: "7", ID: "r1", Incarnation: incarnation}}
	}
	return s
}

// A member that goes quiet (its event log stops reaching the harness, or
// it never had one) cannot hide a lasting duplicate: its status samples
// still list the instance, and prove it alive while another runs.
func TestStatusSamplesProveAQuietMembersDuplicate(t *testing.T) {
	const S = "id-generator"
	quiet := []history.NodeEvent{
		// n1 starts r1 as incarnation X, then logs nothing more.
		entityEv("n1", "a", 1, "entity-started", 0, 10, "n1@a/1"),
		// n2 starts r1 as Y at 500 ms and keeps logging.
		entityEv("n2", "b", 1, "entity-started", 500, 510, "n2@b/1"),
		ev("n2", "b", 2, "member-unreachable", 2000, 2010, ""),
	}
	tests := []struct {
		name     string
		checker  Checker
		evs      []history.NodeEvent
		noEvents bool
		samples  []history.StatusSample
		want     Verdict
		contains string
	}{
		{"events alone cannot prove it", HandOff{}, quiet, false, nil, Valid, "0 status samples"},
		{"n1's samples keep listing X while Y runs", HandOff{}, quiet, false, []history.StatusSample{
			listing("n1", "a", 900, 905, "n1@a/1"), listing("n1", "a", 1900, 1905, "n1@a/1"),
		}, Invalid, "n1@a (n1@a/1) started in [0.000 s, 0.010 s], still listed in n1's status sampled in [1.900 s, 1.905 s]"},
		{"samples alone, no events: both incarnations seen twice", HandOff{}, nil, true, []history.StatusSample{
			listing("n1", "a", 100, 105, "n1@a/1"), listing("n2", "b", 150, 155, "n2@b/1"),
			listing("n1", "a", 1100, 1105, "n1@a/1"), listing("n2", "b", 1150, 1155, "n2@b/1"),
		}, Invalid, "no node events were recorded"},
		{"samples alone, one sighting each: no proof", HandOff{}, nil, true, []history.StatusSample{
			listing("n1", "a", 100, 105, "n1@a/1"), listing("n2", "b", 150, 155, "n2@b/1"),
		}, Valid, "2 entity lives"},
		{"a logged stop wins over a lagging sample", HandOff{}, []history.NodeEvent{
			entityEv("n1", "a", 1, "entity-started", 0, 10, "n1@a/1"),
			entityEv("n1", "a", 2, "entity-stopped", 400, 410, "n1@a/1"),
			entityEv("n2", "b", 1, "entity-started", 500, 510, "n2@b/1"),
			ev("n2", "b", 2, "member-unreachable", 2000, 2010, ""),
		}, false, []history.StatusSample{listing("n1", "a", 900, 905, "n1@a/1")}, Valid, "never two instances"},
		{"nothing seen at all: unknown, not valid", HandOff{}, []history.NodeEvent{ev("n1", "a", 1, "member-up", 0, 10, "")}, false, nil, Unknown, "nothing to judge"},
		{"a singleton instance named by samples", SingletonEvents{}, []history.NodeEvent{
			ev("n2", "b", 1, "singleton-started", 500, 510, S), ev("n2", "b", 2, "member-up", 2000, 2010, ""),
		}, false, []history.StatusSample{
			listing("n1", "a", 100, 105, "", history.SampledSingleton{Name: S, Instance: "n1@a#1"}),
			listing("n1", "a", 1500, 1505, "", history.SampledSingleton{Name: S, Instance: "n1@a#1"}),
		}, Invalid, "singleton id-generator"},
		{"running, not named: proves its own window only", SingletonEvents{}, []history.NodeEvent{
			ev("n2", "b", 1, "singleton-started", 500, 510, S), ev("n2", "b", 2, "member-up", 2000, 2010, ""),
		}, false, []history.StatusSample{listing("n1", "a", 1500, 1505, "", history.SampledSingleton{Name: S})}, Invalid, "listed in n1's status sampled in [1.500 s, 1.505 s]"},
		{"running after its own logged stop is not trusted", SingletonEvents{}, []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S), ev("n1", "a", 2, "singleton-stopped", 400, 410, S),
			ev("n2", "b", 1, "singleton-started", 500, 510, S), ev("n2", "b", 2, "member-up", 2000, 2010, ""),
		}, false, []history.StatusSample{listing("n1", "a", 1500, 1505, "", history.SampledSingleton{Name: S})}, Valid, "never two instances"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if !tt.noEvents {
				dir = writeEvents(t, tt.evs, false)
			}
			if tt.samples != nil {
				writeSamples(t, dir, tt.samples)
			}
			r := tt.checker.Check(context.Background(), nil, ReadInputs(dir))
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %v", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
			if !strings.Contains(r.Summary+" "+strings.Join(r.Evidence, " "), tt.contains) {
				t.Errorf("result %q %v lacks %q", r.Summary, r.Evidence, tt.contains)
			}
		})
	}
}

// TestExcuseFrozen: an instance on a node frozen by a pause fault, gone
// within ThawGrace of the thaw, counts as ended when the freeze began (it
// could not act); one that lives on longer after the thaw does not.
func TestExcuseFrozen(t *testing.T) {
	// n1 frozen at 10 s; the heal began at 19.9 s and took effect at 20 s.
	frozen := map[string][]freeze{"n1": {{from: 10 * sec, thawFrom: 19*sec + 9*sec/10, thawTo: 20 * sec}}}
	mk := func(member string, start, to int64) life {
		return life{member: member, start: &history.NodeEvent{Lo: start, Hi: start}, from: start, to: to}
	}
	tests := []struct {
		name string
		l    life
		want int64
	}{
		{"gone just after the thaw", mk("n1@a", 1*sec, 21*sec), 10 * sec},
		{"gone long after the thaw", mk("n1@a", 1*sec, 25*sec), 25 * sec},
		{"gone before the freeze", mk("n1@a", 1*sec, 5*sec), 5 * sec},
		{"started during the freeze (after the thaw's view)", mk("n1@a", 15*sec, 21*sec), 21 * sec},
		{"another node", mk("n2@b", 1*sec, 21*sec), 21 * sec},
	}
	for _, tt := range tests {
		lives := excuseFrozen([]life{tt.l}, frozen)
		if len(lives) != 1 || lives[0].to != tt.want {
			t.Errorf("%s: %+v, want to = %d", tt.name, lives, tt.want)
		}
	}

	// A life known only from status samples, whose window reaches into
	// ThawGrace after the thaw: it may be the thawed process's old view,
	// so it proves nothing and is left out; one sampled later, or on
	// another node, stays.
	sampled := func(member string, lo, hi, to int64) life {
		w := &history.NodeEvent{Lo: lo, Hi: hi, Event: protocol.Event{Type: "status"}}
		return life{member: member, start: w, from: hi, to: to, firstSeen: &history.StatusSample{Lo: lo, Hi: hi}}
	}
	for _, tt := range []struct {
		name string
		l    life
		kept bool
	}{
		{"asked while frozen, answered after the grace", sampled("n1@a", 18*sec, 23*sec, 18*sec), false},
		{"asked and answered within the grace", sampled("n1@a", 20*sec, 21*sec, 20*sec), false},
		{"asked after the grace", sampled("n1@a", 23*sec, 24*sec, 23*sec), true},
		{"sampled again after the grace", sampled("n1@a", 18*sec, 23*sec, 25*sec), true},
		{"answered before the freeze", sampled("n1@a", 5*sec, 9*sec, 5*sec), true},
		{"answered while the heal was under way", sampled("n1@a", 15*sec, 19*sec+95*sec/100, 15*sec), false},
		{"another node", sampled("n2@b", 18*sec, 23*sec, 18*sec), true},
	} {
		lives := excuseFrozen([]life{tt.l}, frozen)
		if (len(lives) == 1) != tt.kept {
			t.Errorf("%s: kept %v, want %v", tt.name, len(lives) == 1, tt.kept)
		}
	}
}

// sampled is a status sample of member node@inc in [at, at+5] ms listing
// coordinators of types and running singletons.
func sampled(node, inc string, at int64, types []string, singletons ...history.SampledSingleton) history.StatusSample {
	return history.StatusSample{Node: node, Member: node + "@" + inc, Lo: at * 1e6, Hi: (at + 5) * 1e6, Coordinators: types, Singletons: singletons}
}

// every is one sample a second from from ms up to to ms.
func every(from, to int64, sample func(at int64) history.StatusSample) []history.StatusSample {
	var out []history.StatusSample
	for at := from; at < to; at += 1000 {
		out = append(out, sample(at))
	}
	return out
}

// The summary counts each life once: a status sample that lists an
// instance already known (logged, or sampled before with no stop between)
// is a sighting of that life, not a new one.
func TestLivesCountedOnce(t *testing.T) {
	const S = "id-generator"
	types := []string{"register", "log", "sender"}
	coords := func(node, inc string) func(int64) history.StatusSample {
		return func(at int64) history.StatusSample { return sampled(node, inc, at, types) }
	}
	coord := func(node, inc string) func(int64) history.StatusSample {
		return func(at int64) history.StatusSample { return sampled(node, inc, at, types[:1]) }
	}
	instance := func(node, inc, id string) func(int64) history.StatusSample {
		return func(at int64) history.StatusSample {
			return sampled(node, inc, at, nil, history.SampledSingleton{Name: S, Instance: id})
		}
	}
	cat := func(ss ...[]history.StatusSample) []history.StatusSample {
		var out []history.StatusSample
		for _, s := range ss {
			out = append(out, s...)
		}
		return out
	}
	tests := []struct {
		name     string
		evs      []history.NodeEvent // nil: no events file
		samples  []history.StatusSample
		contains string
	}{
		{"three coordinators, one life each, sampled 30 times", []history.NodeEvent{
			ev("n1", "a", 1, "coordinator-started", 0, 10, "register"),
			ev("n1", "a", 2, "coordinator-started", 0, 10, "log"),
			ev("n1", "a", 3, "coordinator-started", 0, 10, "sender"),
			ev("n1", "a", 4, "member-up", 30000, 30010, ""),
		}, every(500, 30500, coords("n1", "a")), "4 node events, 30 status samples; 0 singleton lives, 3 coordinator lives"},
		{"a logged singleton whose samples name its instance", []history.NodeEvent{
			ev("n1", "a", 1, "singleton-started", 0, 10, S), ev("n1", "a", 2, "member-up", 30000, 30010, ""),
		}, every(500, 30500, instance("n1", "a", "n1@a#1")), "1 singleton life, 0 coordinator lives"},
		{"no events: one coordinator sampled 30 times", nil, every(500, 30500, coord("n1", "a")),
			"1 coordinator life (1 known only from status samples)"},
		{"a hand-over: one life on each member", []history.NodeEvent{
			ev("n1", "a", 1, "coordinator-started", 0, 10, "register"),
			ev("n1", "a", 2, "coordinator-stopped", 10000, 10010, "register"),
			ev("n2", "b", 1, "coordinator-started", 10100, 10110, "register"),
			ev("n2", "b", 2, "member-up", 30000, 30010, ""),
		}, cat(every(500, 10000, coord("n1", "a")), every(10500, 30500, coord("n2", "b"))), "2 coordinator lives"},
		{"stopped and started again on one member", []history.NodeEvent{
			ev("n1", "a", 1, "coordinator-started", 0, 10, "register"),
			ev("n1", "a", 2, "coordinator-stopped", 10000, 10010, "register"),
			ev("n1", "a", 3, "coordinator-started", 12000, 12010, "register"),
			ev("n1", "a", 4, "member-up", 30000, 30010, ""),
		}, cat(every(500, 10000, coord("n1", "a")), every(12500, 30500, coord("n1", "a"))), "2 coordinator lives"},
		{"sampled before its start was logged: an earlier life", []history.NodeEvent{
			ev("n1", "a", 1, "coordinator-started", 5000, 5010, "register"), ev("n1", "a", 2, "member-up", 30000, 30010, ""),
		}, every(500, 30500, coord("n1", "a")), "2 coordinator lives (1 known only from status samples)"},
		{"a sample taken while it started is that life", []history.NodeEvent{
			ev("n1", "a", 1, "coordinator-started", 5000, 5010, "register"), ev("n1", "a", 2, "member-up", 30000, 30010, ""),
		}, every(4998, 30500, coord("n1", "a")), "1 coordinator life"},
		{"no events: the instance renamed is another life", nil,
			cat(every(500, 5000, instance("n1", "a", "n1@a#1")), every(5500, 10000, instance("n1", "a", "n1@a#2"))),
			"2 singleton lives (2 known only from status samples)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.evs != nil {
				dir = writeEvents(t, tt.evs, false)
			}
			writeSamples(t, dir, tt.samples)
			r := SingletonEvents{}.Check(context.Background(), nil, ReadInputs(dir))
			if r.Verdict != Valid || !strings.Contains(r.Summary, tt.contains) {
				t.Fatalf("%s: %s, want valid with %q", r.Verdict, r.Summary, tt.contains)
			}
		})
	}
}

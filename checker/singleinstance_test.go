package checker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/history"
)

// served adds an ok read of entity on process p, invoked at call and
// completed at ret, served by incarnation inc ("member/n"); inc "" names
// none.
func (b *hb) served(call, ret int64, p int, entity, inc string) *hb {
	b.inv(call, p, "read", entity, "").ok(ret, p, `{"value":null}`)
	if inc != "" {
		r := b.ops[len(b.ops)-1].Reply
		r.HostNode, _, _ = strings.Cut(inc, "/")
		r.EntityIncarnation = inc
	}
	return b
}

// nextID adds an ok next-id on process p served by singleton instance
// inst ("member#n").
func (b *hb) nextID(call, ret int64, p int, inst string) *hb {
	b.inv(call, p, "next-id", "", "").ok(ret, p, `{"id":1}`)
	b.ops[len(b.ops)-1].Reply.Singleton = inst
	return b
}

func TestSingleInstance(t *testing.T) {
	const X, Y, Z = "n1@aa/1", "n2@bb/2", "n3@cc/3"
	cases := []struct {
		name string
		h    *hb
		want Verdict
		ev   string // a substring of the summary or of some evidence line
	}{
		{"empty", &hb{}, Unknown, "nothing to check"},
		{"single op", (&hb{}).served(1, 2, 0, ra, X), Valid, "1 ok ops on 1 keys (entities and the singleton) served by 1 incarnations"},
		{"crashed mid-operation", (&hb{}).inv(1, 0, "read", ra, ""), Unknown, "nothing to check"},
		{"only failed and unknown", (&hb{}).inv(1, 0, "read", ra, "").fail(2, 0).inv(3, 0, "read", ra, "").info(4, 0), Unknown, "nothing to check"},
		{"no entity ops", (&hb{}).inv(1, 0, "cas", "", "").ok(2, 0, ""), Unknown, "nothing to check"},
		{"hand-off", (&hb{}).served(1, 2, 0, ra, X).served(3, 4, 0, ra, X).served(5, 6, 1, ra, Y).served(7, 8, 0, ra, Y), Valid, "served by 2 incarnations or instances: never two alive at once"},
		{"three hand-offs", (&hb{}).served(1, 2, 0, ra, X).served(3, 4, 0, ra, Y).served(5, 6, 1, ra, Z), Valid, ""},
		{"incarnation comes back", (&hb{}).served(1, 2, 0, ra, X).served(3, 4, 1, ra, Y).served(5, 6, 2, ra, X), Invalid,
			"register/a: incarnation n1@aa/1 (hosted by n1@aa) was alive before and after incarnation n2@bb/2 (hosted by n2@bb) served read [#2/#3, process 1, node n2, t=3..4 ok]: it served read [#0/#1, process 0, node n1, t=1..2 ok] before and read [#4/#5, process 2, node n3, t=5..6 ok] after"},
		{"equal times are concurrent (before)", (&hb{}).served(1, 3, 0, ra, X).served(3, 4, 1, ra, Y).served(5, 6, 2, ra, X), Valid, ""},
		{"equal times are concurrent (after)", (&hb{}).served(1, 2, 0, ra, X).served(3, 5, 1, ra, Y).served(5, 6, 2, ra, X), Valid, ""},
		{"overlapping the earlier op", (&hb{}).served(1, 4, 0, ra, X).served(3, 5, 1, ra, Y).served(6, 7, 2, ra, X), Valid, ""},
		{"overlapping the later op", (&hb{}).served(1, 2, 0, ra, X).served(3, 7, 1, ra, Y).served(6, 8, 2, ra, X), Valid, ""},
		{"the op inside is unknown", (&hb{}).served(1, 2, 0, ra, X).inv(3, 1, "write", ra, `{"value":1}`).info(4, 1).served(5, 6, 2, ra, X), Valid, ""},
		{"the op inside never completed", (&hb{}).served(1, 2, 0, ra, X).inv(3, 1, "read", ra, "").served(5, 6, 2, ra, X), Valid, ""},
		{"the op inside failed", (&hb{}).served(1, 2, 0, ra, X).inv(3, 1, "read", ra, "").fail(4, 1).served(5, 6, 2, ra, X), Valid, ""},
		{"the op inside names no incarnation", (&hb{}).served(1, 2, 0, ra, X).served(3, 4, 1, ra, "").served(5, 6, 2, ra, X), Valid, "1 ok entity or next-id ops named no incarnation"},
		{"other entities in between", (&hb{}).served(1, 2, 0, ra, X).served(3, 4, 1, "register/b", Y).served(5, 6, 2, ra, X), Valid, "2 keys"},
		{"same incarnation name on two entities", (&hb{}).served(1, 2, 0, ra, X).served(3, 4, 1, "register/b", X).served(5, 6, 2, "register/b", Y).served(7, 8, 0, ra, X), Valid, ""},
		{"inside a long-lived incarnation's span", (&hb{}).served(1, 2, 0, ra, X).served(3, 4, 1, ra, Y).served(5, 6, 1, ra, Z).served(90, 91, 2, ra, X), Invalid, "2 ops on 1 keys"},
		{"tells prove nothing", (&hb{}).served(1, 2, 0, "log/l", X).
			inv(3, 1, "tell", "log/l", `{"client":"c","seq":1}`).ok(4, 1, `{"accepted":true}`).served(5, 6, 2, "log/l", X), Valid, ""},
		{"singleton hand-over", (&hb{}).nextID(1, 2, 0, "n1@aa#1").nextID(3, 4, 1, "n2@bb#1").nextID(5, 6, 0, "n1@aa#2"), Valid, "3 incarnations or instances"},
		{"singleton instance comes back", (&hb{}).nextID(1, 2, 0, "n1@aa#1").nextID(3, 4, 1, "n2@bb#1").nextID(5, 6, 0, "n1@aa#1"), Invalid,
			"singleton: instance n1@aa#1 (hosted by n1@aa) was alive before and after instance n2@bb#1 (hosted by n2@bb) served next-id"},
		{"completion before its invocation", (&hb{}).served(5, 2, 0, ra, X).served(6, 7, 1, ra, Y), Valid, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := SingleInstance{}.Check(context.Background(), c.h.file(), Inputs{})
			if r.Verdict != c.want || r.Checker != "single-instance" || (c.ev != "" && !strings.Contains(r.Summary, c.ev) && !contains(r.Evidence, c.ev)) {
				t.Fatalf("got %s: %s\n%s\nwant %s with %q", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"), c.want, c.ev)
			}
		})
	}
}

// The sweep must look past the op's own instance: here B's op at [10, 11]
// is inside A's span only, while B's own span is the widest.
func TestSingleInstanceRunnerUp(t *testing.T) {
	const A, B = "n1@aa/1", "n2@bb/2"
	h := (&hb{}).served(1, 2, 0, ra, A).served(3, 4, 1, ra, B).served(10, 11, 1, ra, B).served(50, 51, 0, ra, A).served(100, 101, 1, ra, B).file()
	r := SingleInstance{}.Check(context.Background(), h, Inputs{})
	// Violating: B [3,4] and [10,11] (inside A's 2..50), A [50,51]
	// (inside B's 4..100); one pair of incarnations.
	if r.Verdict != Invalid || !strings.HasPrefix(r.Summary, "3 ops on 1 keys") || len(r.Evidence) != 1 {
		t.Fatalf("%s: %s\n%s", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
	}
}

// The evidence lists maxEvidence pairs and counts the rest.
func TestSingleInstanceEvidenceBound(t *testing.T) {
	b := &hb{}
	for i := range maxEvidence + 5 {
		e := fmt.Sprintf("register/r%02d", i)
		b.served(1, 2, 0, e, "n1@aa/"+e).served(3, 4, 1, e, "n2@bb/"+e).served(5, 6, 2, e, "n1@aa/"+e)
	}
	r := SingleInstance{}.Check(context.Background(), b.file(), Inputs{})
	if r.Verdict != Invalid || len(r.Evidence) != maxEvidence+1 || r.Evidence[maxEvidence] != "... and 5 more pairs of incarnations alive at once" ||
		!strings.HasPrefix(r.Evidence[0], "register/r00:") || !strings.HasPrefix(r.Summary, "25 ops on 25 keys") {
		t.Fatalf("%s: %s\n%s", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
	}
}

func TestSingleInstanceTruncated(t *testing.T) {
	s := `{"format":"shardtest-history","version":1,"test":"t"}
{"index":0,"time":1,"kind":"invoke","process":0,"f":"read","entity":"register/a"}
{"index":1,"time":2,"kind":"ok","process":0,"f":"read","entity":"register/a","value":{"value":null},"reply":{"host_node":"n1@aa","entity_incarnation":"n1@aa/1"}}
{"index":2,"time":3,"kind":"invoke","process":0,"f":"read","entity":"register/a"}
{"index":3,"time":4,"kind":"ok","process":0,"f":"read","entity":"register/a","value":{"val`
	h, err := history.Read(strings.NewReader(s))
	if err != nil || !h.Truncated {
		t.Fatal(err, h)
	}
	r := SingleInstance{}.Check(context.Background(), h, Inputs{})
	if r.Verdict != Valid || !contains(r.Evidence, "cut off") {
		t.Fatalf("%+v", r)
	}
}

// The sweep agrees with the definition, checked pair by pair, on random
// small histories.
func TestSingleInstanceBruteForce(t *testing.T) {
	type op struct {
		call, ret int64
		key, inst int
	}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 9))
		var ops []op
		b := &hb{}
		for p := range 1 + rng.IntN(12) {
			call := int64(rng.IntN(20))
			ret := call + int64(rng.IntN(10))
			o := op{call, ret, rng.IntN(2), rng.IntN(4)}
			ops = append(ops, o)
			b.served(call, ret, p, fmt.Sprintf("register/k%d", o.key), fmt.Sprintf("n%d@x/%d", o.inst, o.inst))
		}
		want := 0
		for _, y := range ops {
			bad := false
			for _, x1 := range ops {
				for _, x2 := range ops {
					if x1.key == y.key && x2.key == y.key && x1.inst == x2.inst && x1.inst != y.inst && x1.ret < y.call && x2.call > y.ret {
						bad = true
					}
				}
			}
			if bad {
				want++
			}
		}
		r := SingleInstance{}.Check(context.Background(), b.file(), Inputs{})
		got := 0
		if r.Verdict == Invalid {
			fmt.Sscanf(r.Summary, "%d ops", &got)
		}
		if got != want || (want == 0) != (r.Verdict == Valid) {
			t.Fatalf("seed %d: %d violating ops, want %d: %s: %s\n%s", seed, got, want, r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
		}
	}
}

func TestSingleInstanceSimulated(t *testing.T) {
	h := simRun(runOptions{seed: 1, clients: 8, entities: 20, ops: 20000, step: 1e6, faultEvery: 3e9, faultLen: 1e9})
	r := SingleInstance{}.Check(context.Background(), h, Inputs{})
	if r.Verdict != Valid {
		t.Fatalf("%s: %s\n%s", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
	}
	// Let a late op of an entity be served by its first incarnation again.
	var first string
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind == history.OK && op.Entity != "" && op.Reply.EntityIncarnation != "" {
			if first == "" {
				first = op.Reply.EntityIncarnation
				_, ent, _ := strings.Cut(first, "/")
				for j := len(h.Ops) - 1; j > i; j-- {
					if o := &h.Ops[j]; o.Kind == history.OK && o.Entity == ent {
						o.Reply.EntityIncarnation = first
						break
					}
				}
				break
			}
		}
	}
	r = SingleInstance{}.Check(context.Background(), h, Inputs{})
	if r.Verdict != Invalid || !contains(r.Evidence, "incarnation "+first+" (hosted by n1@i0) was alive before and after") {
		t.Fatalf("corrupted: %s: %s\n%s", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
	}
}

package checker

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/history"
)

func TestUniqueIDs(t *testing.T) {
	id := func(n int) string { return `{"id":` + itoa(n) + `}` }
	next := func(b *hb, call, ret int64, p, n int) *hb {
		return b.inv(call, p, "next-id", "", "").ok(ret, p, id(n))
	}
	cases := []struct {
		name string
		h    *hb
		want Verdict
		ev   string
	}{
		{"empty", &hb{}, Unknown, "nothing to check"},
		{"no next-id ops", (&hb{}).inv(1, 0, "read", ra, "").ok(2, 0, `{"value":null}`), Unknown, "nothing to check"},
		{"single", next(&hb{}, 1, 2, 0, 7), Valid, "1 ok"},
		{"only unknown", (&hb{}).inv(1, 0, "next-id", "", "").info(2, 0).inv(3, 1, "next-id", "", ""), Unknown, "no ids returned"},
		{"increasing", next(next(next(&hb{}, 1, 2, 0, 1), 3, 4, 1, 2), 5, 6, 0, 10), Valid, "3 ok"},
		{"concurrent in any order", next(next(&hb{}, 1, 5, 0, 2), 2, 6, 1, 1), Valid, ""},
		{"equal times are concurrent", next(next(&hb{}, 1, 5, 0, 2), 5, 6, 1, 1), Valid, ""},
		{"duplicate", next(next(&hb{}, 1, 2, 0, 4), 3, 4, 1, 4), Invalid, "id 4 handed out twice: op #0/#1 (process 0, node n1, invoked t=1, ok t=2) and op #2/#3 (process 1"},
		{"duplicate concurrent", next(next(&hb{}, 1, 5, 0, 4), 2, 6, 1, 4), Invalid, "id 4 handed out twice"},
		{"backwards", next(next(&hb{}, 1, 2, 0, 5), 3, 4, 1, 3), Invalid, "op #0/#1 (process 0, node n1, invoked t=1, ok t=2) completed with id 5 before op #2/#3 (process 1, node n2, invoked t=3, ok t=4) was invoked, which got the smaller id 3"},
		{"backwards after a gap", next(next(next(&hb{}, 1, 2, 0, 9), 3, 4, 1, 10), 5, 6, 2, 8), Invalid, "completed with id 10"},
		{"failed and unknown ignored", next(next((&hb{}).
			inv(1, 0, "next-id", "", "").fail(2, 0).
			inv(3, 0, "next-id", "", "").info(4, 0), 5, 6, 0, 1), 7, 8, 1, 2).
			inv(9, 2, "next-id", "", ""), Valid, "5 next-id ops: 2 ok, 1 failed, 2 unknown"},
		{"unreadable", next(&hb{}, 1, 2, 0, 1).inv(3, 0, "next-id", "", "").ok(4, 0, `{"id":"x"}`), Unknown, "unreadable"},
		{"unreadable and invalid", next(next(&hb{}, 1, 2, 0, 1), 3, 4, 0, 1).inv(5, 0, "next-id", "", "").ok(6, 0, `{}`), Invalid, ""},
		{"spaced json", (&hb{}).inv(1, 0, "next-id", "", "").ok(2, 0, `{ "id" : 3 }`).inv(3, 0, "next-id", "", "").ok(4, 0, `{"id":3}`), Invalid, "id 3 handed out twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := UniqueIDs{}.Check(context.Background(), c.h.file(), Inputs{})
			if r.Verdict != c.want || r.Checker != "unique-ids" || (c.ev != "" && !strings.Contains(r.Summary, c.ev) && !contains(r.Evidence, c.ev)) {
				t.Fatalf("got %s: %s\n%s\nwant %s with %q", r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"), c.want, c.ev)
			}
		})
	}
}

func TestUniqueIDsSingleton(t *testing.T) {
	b := (&hb{}).inv(1, 0, "next-id", "", "").ok(2, 0, `{"id":1}`).inv(3, 1, "next-id", "", "").ok(4, 1, `{"id":1}`)
	b.ops[1].Reply.Singleton = "n1@aa#1"
	b.ops[3].Reply.Singleton = "n2@bb#2"
	r := UniqueIDs{}.Check(context.Background(), b.file(), Inputs{})
	if r.Verdict != Invalid || !contains(r.Evidence, "singleton n1@aa#1") || !contains(r.Evidence, "singleton n2@bb#2") {
		t.Fatalf("%+v", r)
	}
}

func TestUniqueIDsTruncated(t *testing.T) {
	s := `{"format":"shardtest-history","version":1,"test":"t"}
{"index":0,"time":1,"kind":"invoke","process":0,"f":"next-id"}
{"index":1,"time":2,"kind":"ok","process":0,"f":"next-id","value":{"id":1}}
{"index":2,"time":3,"kind":"invoke","process":0,"f":"next-id"}
{"index":3,"time":4,"kind":"ok","process":0,"f":"next-id","value":{"id":`
	h, err := history.Read(strings.NewReader(s))
	if err != nil || !h.Truncated {
		t.Fatal(err, h)
	}
	r := UniqueIDs{}.Check(context.Background(), h, Inputs{})
	if r.Verdict != Valid || !contains(r.Evidence, "cut off") || !strings.Contains(r.Summary, "1 unknown") {
		t.Fatalf("%+v", r)
	}
}

func TestUniqueIDsSimulated(t *testing.T) {
	for seed := range uint64(5) {
		h := simIDGen(seed, 8, 5000)
		r := UniqueIDs{}.Check(context.Background(), h, Inputs{})
		if r.Verdict != Valid {
			t.Fatalf("seed %d: %s: %s\n%s", seed, r.Verdict, r.Summary, strings.Join(r.Evidence, "\n"))
		}
		// Repeat the first id at the end: a duplicate and a step back.
		for i, op := range h.Ops {
			if op.Kind == history.OK {
				last := len(h.Ops) - 1
				for h.Ops[last].Kind != history.OK {
					last--
				}
				h.Ops[last].Value = json.RawMessage(string(h.Ops[i].Value))
				break
			}
		}
		r = UniqueIDs{}.Check(context.Background(), h, Inputs{})
		if r.Verdict != Invalid || !strings.Contains(r.Summary, "1 ids handed out more than once, 1 ops") {
			t.Fatalf("seed %d corrupted: %s: %s", seed, r.Verdict, r.Summary)
		}
	}
}

func TestParseID(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{`{"id":12}`, 12, true}, {`{"id":-3}`, -3, true}, {`{"id": 5}`, 5, true},
		{`{"id":9223372036854775807}`, 9223372036854775807, true},
		{`{"id":1.5}`, 0, false}, {`{"id":null}`, 0, false}, {`{}`, 0, false}, {``, 0, false}, {`{"id":}`, 0, false},
	} {
		got, ok := parseID(json.RawMessage(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %d %v", c.in, got, ok)
		}
	}
}

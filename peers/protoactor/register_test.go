package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

func result(t *testing.T, r protocol.RegisterResult) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustParse(t *testing.T, op, payload string) kit.RegisterOp {
	t.Helper()
	c, err := kit.ParseRegister(op, json.RawMessage(payload))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDecideAndApply(t *testing.T) {
	var s registerState
	if got := result(t, must(s.decide("r1", mustParse(t, "read", "")))); got != `{"value":null}` {
		t.Fatalf("read of a new register: %s", got)
	}
	// A cas expecting a value on a new register fails with no event.
	res, ev := s.decide("r2", mustParse(t, "cas", `{"expect":1,"value":2}`))
	if ev != nil || result(t, res) != `{"ok":false,"value":null}` {
		t.Fatalf("cas 1→2 on a new register: %s, event %v", result(t, res), ev)
	}
	// A cas expecting null succeeds: its event, applied, sets the value.
	res, ev = s.decide("r3", mustParse(t, "cas", `{"expect":null,"value":2}`))
	if ev == nil || *ev != (registerEvent{Request: "r3", Value: 2}) || result(t, res) != `{"ok":true,"value":2}` {
		t.Fatalf("cas null→2: %s, event %v", result(t, res), ev)
	}
	s.apply(1, *ev)
	res, ev = s.decide("r4", mustParse(t, "write", `{"value":9}`))
	if ev == nil || result(t, res) != `{"value":9}` {
		t.Fatalf("write 9: %s, event %v", result(t, res), ev)
	}
	s.apply(2, *ev)
	if s.seq != 2 || *s.value != 9 {
		t.Fatalf("after two events: seq %d value %d", s.seq, *s.value)
	}
	if got := result(t, must(s.decide("r5", mustParse(t, "cas", `{"expect":2,"value":3}`)))); got != `{"ok":false,"value":9}` {
		t.Fatalf("cas 2→3 on 9: %s", got)
	}
}

func must(r protocol.RegisterResult, _ *registerEvent) protocol.RegisterResult { return r }

func TestRetriedRequestsAreAnsweredWithTheirEffect(t *testing.T) {
	var s registerState
	// Replayed events carry their requests.
	for i, e := range []string{`{"req":"a","value":1}`, `{"req":"b","value":2}`} {
		if err := s.applyData(int64(i+1), []byte(e)); err != nil {
			t.Fatal(err)
		}
	}
	// The cas of request a took effect: its retry is answered ok, though
	// the register now holds 2 and a second application would fail.
	res, ok := s.answered("a", mustParse(t, "cas", `{"expect":null,"value":1}`))
	if !ok || result(t, res) != `{"ok":true,"value":1}` {
		t.Fatalf("retried cas: %s %v", result(t, res), ok)
	}
	if res, ok := s.answered("b", mustParse(t, "write", `{"value":2}`)); !ok || result(t, res) != `{"value":2}` {
		t.Fatalf("retried write: %s %v", result(t, res), ok)
	}
	if _, ok := s.answered("c", mustParse(t, "write", `{"value":3}`)); ok {
		t.Fatal("a request never applied was answered")
	}
	if _, ok := s.answered("a", mustParse(t, "read", "")); ok {
		t.Fatal("a read was answered from an event")
	}
	if err := s.applyData(3, []byte(`not json`)); err == nil {
		t.Fatal("a malformed event was applied")
	}
}

func TestRememberedRequestsAreBounded(t *testing.T) {
	var s registerState
	for i := range rememberedRequests + 10 {
		s.apply(int64(i+1), registerEvent{Request: fmt.Sprint("r", i), Value: int64(i)})
	}
	if len(s.applied) != rememberedRequests || len(s.order) != rememberedRequests {
		t.Fatalf("remembers %d requests (order %d), want %d", len(s.applied), len(s.order), rememberedRequests)
	}
	if _, ok := s.applied["r0"]; ok {
		t.Fatal("the oldest request is still remembered")
	}
	if _, ok := s.applied[fmt.Sprint("r", rememberedRequests+9)]; !ok {
		t.Fatal("the newest request is forgotten")
	}
}

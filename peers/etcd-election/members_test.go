package main

import (
	"strings"
	"testing"

	"github.com/shardtest/shardtest/protocol"
)

func cand(name, inc string, rev int64) candidate {
	m := protocol.Member{UID: protocol.UID(name, inc), Name: name, Incarnation: inc}
	c, err := decodeCandidate("k/"+inc, []byte(encodeCandidate(m, "10.0.0.1:7947")), rev)
	if err != nil {
		panic(err)
	}
	return c
}

func TestDecodeCandidate(t *testing.T) {
	tests := []struct {
		name, value, wantErr string
	}{
		{"ok", `{"uid":"n1@a","name":"n1","incarnation":"a","status":"","reachable":false,"forward":"x:1"}`, ""},
		{"uid does not match", `{"uid":"n1@b","name":"n1","incarnation":"a","forward":"x:1"}`, "does not match"},
		{"no uid", `{"name":"n1","incarnation":"a"}`, "does not match"},
		{"not json", `n1`, "election key k"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := decodeCandidate("k", []byte(tt.value), 7)
			if tt.wantErr == "" {
				if err != nil || c.Rev != 7 || c.Forward != "x:1" {
					t.Fatalf("%+v, %v", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// The queue is the membership: members appear up with their key's
// revision as age, the oldest is the queue's head, a key that goes is a
// member downed, and this member is up once its own key is read.
func TestMembershipFollowsTheQueue(t *testing.T) {
	var events []protocol.Event
	m := newMembership(protocol.Member{UID: "n2@b", Name: "n2", Incarnation: "b"}, func(e protocol.Event) { events = append(events, e) })
	if m.status() != protocol.StatusJoining {
		t.Fatalf("status %s before any reading, want joining", m.status())
	}
	m.update([]candidate{cand("n1", "a", 3)})
	if v := m.view(); m.status() != protocol.StatusJoining || len(v.Members) != 2 || v.Members[0].UpNumber != 3 {
		t.Fatalf("after n1's key: status %s, members %+v", m.status(), v.Members)
	}
	m.update([]candidate{cand("n1", "a", 3), cand("n2", "b", 5)})
	v := m.view()
	if m.status() != protocol.StatusUp || v.Self.UpNumber != 5 || len(v.Members) != 2 {
		t.Fatalf("after its own key: status %s, self %+v, members %d", m.status(), v.Self, len(v.Members))
	}
	m.update([]candidate{cand("n2", "b", 5)})
	v = m.view()
	if len(v.Members) != 1 || len(v.Gone) != 1 || v.Gone[0].UID != "n1@a" || v.Gone[0].Status != protocol.StatusDown {
		t.Fatalf("after n1's key went: members %+v gone %+v", v.Members, v.Gone)
	}
	var types []string
	for _, e := range events {
		types = append(types, e.Type+" "+e.Member)
	}
	want := []string{"member-up n1@a", "oldest-changed n1@a", "member-up n2@b", "member-downed n1@a", "oldest-changed n2@b"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Errorf("events %q, want %q", types, want)
	}
	m.setIncarnation("c")
	if v := m.view(); m.status() != protocol.StatusJoining || v.Self.UID != "n2@c" || v.Self.UpNumber != 0 {
		t.Errorf("a new incarnation: status %s self %+v", m.status(), v.Self)
	}
}

package entities

import (
	"slices"
	"testing"

	"github.com/shardtest/shardtest/protocol"
)

// SenderState's decisions: delivery ids follow each other (also after a
// replay that skipped none), a confirmation removes one delivery, and a
// round sends the unconfirmed oldest first.
func TestSenderState(t *testing.T) {
	send := func(to string, seq int64) protocol.SenderSend {
		return protocol.SenderSend{To: to, Client: "c", Seq: seq}
	}
	for _, tc := range []struct {
		name      string
		events    func(s *SenderState) []SenderEvent
		wantRound []int64
		wantNext  int64
		wantErr   bool
	}{
		{name: "nothing sent", events: func(*SenderState) []SenderEvent { return nil }, wantNext: 1},
		{name: "three sent, the middle one confirmed", events: func(s *SenderState) []SenderEvent {
			var evs []SenderEvent
			for i := range 3 {
				e := s.Sent(send("d1", int64(i+1)))
				evs = append(evs, e)
				if err := s.Apply(e); err != nil {
					t.Fatal(err)
				}
			}
			return append(evs, Confirmed(2))
		}, wantRound: []int64{1, 3}, wantNext: 4},
		{name: "all confirmed: ids still move on", events: func(s *SenderState) []SenderEvent {
			e := s.Sent(send("d1", 1))
			if err := s.Apply(e); err != nil {
				t.Fatal(err)
			}
			return []SenderEvent{Confirmed(1)}
		}, wantNext: 2},
		{name: "a replayed log out of order keeps the highest id", events: func(*SenderState) []SenderEvent {
			return []SenderEvent{{Kind: senderSent, DeliveryID: 5, To: "d1"}, {Kind: senderSent, DeliveryID: 2, To: "d2"}}
		}, wantRound: []int64{2, 5}, wantNext: 6},
		{name: "an unknown kind", events: func(*SenderState) []SenderEvent {
			return []SenderEvent{{Kind: "lost", DeliveryID: 1}}
		}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSenderState()
			var err error
			for _, e := range tc.events(s) {
				if err = s.Apply(e); err != nil {
					break
				}
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("apply: %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			var round []int64
			for _, e := range s.Round() {
				round = append(round, e.DeliveryID)
			}
			if !slices.Equal(round, tc.wantRound) {
				t.Fatalf("round %v, want %v", round, tc.wantRound)
			}
			if s.Pending() != len(tc.wantRound) {
				t.Fatalf("pending %d, want %d", s.Pending(), len(tc.wantRound))
			}
			if got := s.Sent(send("d9", 1)).DeliveryID; got != tc.wantNext {
				t.Fatalf("next delivery id %d, want %d", got, tc.wantNext)
			}
		})
	}
}

// Delivery is the log append a round sends: the entry, its dedup, from
// the sender.
func TestDelivery(t *testing.T) {
	m := Delivery(SenderEvent{Kind: senderSent, DeliveryID: 3, To: "d7", Client: "w1-d7", Seq: 4, Dedup: true})
	if m.EntityID != "d7" || m.Op != protocol.OpAppend || m.Sender != "sender" ||
		string(m.Payload) != `{"client":"w1-d7","seq":4,"dedup":true}` {
		t.Fatalf("delivery %+v (payload %s)", m, m.Payload)
	}
}

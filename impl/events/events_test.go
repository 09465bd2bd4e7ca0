package events

import (
	"testing"

	"github.com/shardtest/shardtest/impl/clock"
)

func TestLogSince(t *testing.T) {
	l := NewLog(clock.Real(), 3)
	l.SetIncarnation("a")
	for range 5 {
		l.Append(Event{Type: MemberUp})
	}
	tests := []struct {
		after    uint64
		max      int
		wantSeqs []uint64
	}{
		{0, 0, []uint64{3, 4, 5}}, // the first two were forgotten
		{3, 0, []uint64{4, 5}},
		{3, 1, []uint64{4}},
		{5, 0, nil},
		{99, 0, nil},
		{^uint64(0), 0, nil},
	}
	for _, tt := range tests {
		got, last := l.Since(tt.after, tt.max)
		if last != 5 {
			t.Fatalf("last = %d, want 5", last)
		}
		if len(got) != len(tt.wantSeqs) {
			t.Fatalf("Since(%d,%d) = %d events, want %v", tt.after, tt.max, len(got), tt.wantSeqs)
		}
		for i, e := range got {
			if e.Seq != tt.wantSeqs[i] || e.Incarnation != "a" {
				t.Fatalf("Since(%d,%d)[%d] = %+v, want seq %d", tt.after, tt.max, i, e, tt.wantSeqs[i])
			}
		}
	}
}

func TestChangedWakes(t *testing.T) {
	l := NewLog(clock.Real(), 0)
	ch := l.Changed()
	l.Append(Event{Type: NodeStarted})
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed by Append")
	}
}

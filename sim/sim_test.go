package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Events run in time order; at one instant the seed decides the order.
func TestWorldRunsEventsInTimeOrderAndTiesBySeed(t *testing.T) {
	trace := func(seed uint64) string {
		w := New(seed)
		var got []string
		for i := range 6 {
			w.At(time.Second, func() { got = append(got, fmt.Sprint("a", i)) })
		}
		w.At(500*time.Millisecond, func() { got = append(got, "early") })
		w.After(2*time.Second, func() { got = append(got, "late") })
		cancelled := w.At(time.Second, func() { got = append(got, "cancelled") })
		if !cancelled.Cancel() || cancelled.Cancel() {
			t.Error("Cancel: want true once, then false")
		}
		w.RunUntil(3 * time.Second)
		if w.Now() != 3*time.Second {
			t.Errorf("now %v, want 3s", w.Now())
		}
		return strings.Join(got, " ")
	}
	a, b := trace(1), trace(1)
	if a != b {
		t.Fatalf("seed 1 twice: %q and %q", a, b)
	}
	if !strings.HasPrefix(a, "early ") || !strings.HasSuffix(a, " late") || strings.Contains(a, "cancelled") {
		t.Errorf("order %q: want early first, late last, nothing cancelled", a)
	}
	orders := map[string]bool{}
	for seed := range uint64(20) {
		orders[trace(seed)] = true
	}
	if len(orders) < 5 {
		t.Errorf("20 seeds gave %d orders of six simultaneous events; want the seed to decide the order", len(orders))
	}
}

// An event scheduled in the past runs now, and events scheduled by events
// run in the same pass when due.
func TestWorldEventsScheduleEvents(t *testing.T) {
	w := New(7)
	var at []time.Duration
	var tick func()
	tick = func() {
		at = append(at, w.Now())
		if len(at) < 4 {
			w.After(250*time.Millisecond, tick)
		}
	}
	w.RunUntil(time.Second)
	w.At(0, tick) // in the past: runs at 1s
	w.RunFor(time.Second)
	want := []time.Duration{time.Second, 1250 * time.Millisecond, 1500 * time.Millisecond, 1750 * time.Millisecond}
	if !slices.Equal(at, want) {
		t.Errorf("ticks at %v, want %v", at, want)
	}
}

func TestNetwork(t *testing.T) {
	tests := []struct {
		name  string
		setup func(n *Network)
		// want: what b receives of a's ten datagrams, and a's stream
		want       int
		wantStream bool
	}{
		{"open", func(n *Network) {}, 10, true},
		{"a to b cut", func(n *Network) { n.Cut("a", "b") }, 0, false},
		{"b to a cut: datagrams pass, a stream does not", func(n *Network) { n.Cut("b", "a") }, 10, false},
		{"healed", func(n *Network) { n.Cut("a", "b"); n.Heal("a", "b") }, 10, true},
		{"all lost", func(n *Network) { n.SetLink("a", "b", Link{Loss: 1}) }, 0, false},
		{"closed", func(n *Network) { n.Close("b") }, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := New(3)
			n := NewNetwork(w, Link{Delay: time.Millisecond, Jitter: 5 * time.Millisecond})
			got, stream, failed := 0, false, false
			n.Listen("b", func(from string, msg any) {
				if msg == "stream" {
					stream = true
					return
				}
				got++
			})
			n.Listen("a", func(string, any) {})
			tt.setup(n)
			for range 10 {
				n.Send("a", "b", "datagram")
			}
			n.SendReliable("a", "b", "stream", time.Second, func(error) { failed = true })
			w.RunFor(2 * time.Second)
			if got != tt.want || stream != tt.wantStream || failed == tt.wantStream {
				t.Errorf("b got %d datagrams (want %d), the stream: arrived %v failed %v (want arrived %v)", got, tt.want, stream, failed, tt.wantStream)
			}
		})
	}
}

// Jitter reorders datagrams, the same way for the same seed; a lossy link
// loses about its share.
func TestNetworkReordersAndLosesBySeed(t *testing.T) {
	run := func(seed uint64) ([]int, Stats) {
		w := New(seed)
		n := NewNetwork(w, Link{Delay: time.Millisecond, Jitter: 10 * time.Millisecond, Loss: 0.3})
		var got []int
		n.Listen("b", func(_ string, msg any) { got = append(got, msg.(int)) })
		for i := range 1000 {
			w.At(time.Duration(i)*time.Millisecond, func() { n.Send("a", "b", i) })
		}
		w.RunFor(2 * time.Second)
		return got, n.Stats()
	}
	a, sa := run(5)
	b, _ := run(5)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed delivered differently")
	}
	if slices.IsSorted(a) {
		t.Error("1000 datagrams 1 ms apart with 10 ms of jitter arrived in order")
	}
	if sa.DroppedLost < 200 || sa.DroppedLost > 400 || int(sa.Delivered) != len(a) {
		t.Errorf("stats %+v: want about 300 lost of 1000, delivered = received (%d)", sa, len(a))
	}
}

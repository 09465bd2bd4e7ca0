package clock

import (
	"context"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fired returns what is in c now, without waiting.
func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-c:
		return at, true
	default:
		return time.Time{}, false
	}
}

// Timers fire in deadline order, each at its own deadline, only as the
// clock is moved; ties go in the order they were set.
func TestVirtualTimers(t *testing.T) {
	v := NewVirtual(t0)
	a := v.NewTimer(3 * time.Second)
	b := v.NewTimer(time.Second)
	c := v.NewTimer(time.Second)
	if next, ok := v.Next(); !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("next %v %v", next, ok)
	}
	if _, ok := fired(b.C()); ok {
		t.Fatal("fired before the clock moved")
	}
	if n := v.AdvanceTo(t0.Add(2 * time.Second)); n != 2 {
		t.Fatalf("%d fired by 2 s, want 2", n)
	}
	for _, tm := range []Timer{b, c} {
		if at, ok := fired(tm.C()); !ok || !at.Equal(t0.Add(time.Second)) {
			t.Errorf("fired %v %v, want at 1 s", at, ok)
		}
	}
	if !v.Now().Equal(t0.Add(2 * time.Second)) {
		t.Errorf("now %v", v.Now())
	}
	if !a.Stop() || a.Stop() {
		t.Error("Stop of a pending timer reports true, then false")
	}
	v.Advance(time.Hour)
	if _, ok := fired(a.C()); ok {
		t.Error("a stopped timer fired")
	}
	if a.Reset(time.Second) {
		t.Error("Reset of a stopped timer reports it was pending")
	}
	v.Advance(time.Second)
	if _, ok := fired(a.C()); !ok {
		t.Error("a reset timer did not fire")
	}
}

// A tick nobody takes before the next is dropped; Reset changes the period.
func TestVirtualTicker(t *testing.T) {
	v := NewVirtual(t0)
	k := v.NewTicker(time.Second)
	if n := v.Advance(3 * time.Second); n != 3 {
		t.Fatalf("%d ticks in 3 s", n)
	}
	if at, ok := fired(k.C()); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("the first tick %v %v: the later ones are dropped while it waits", at, ok)
	}
	if _, ok := fired(k.C()); ok {
		t.Fatal("two ticks waited in a channel of one")
	}
	k.Reset(10 * time.Second)
	v.Advance(9 * time.Second)
	if _, ok := fired(k.C()); ok {
		t.Fatal("ticked before the new period")
	}
	v.Advance(time.Second)
	if _, ok := fired(k.C()); !ok {
		t.Fatal("no tick after the new period")
	}
	k.Stop()
	v.Advance(time.Minute)
	if _, ok := fired(k.C()); ok {
		t.Fatal("a stopped ticker ticked")
	}
}

// A skewed clock on virtual time: its timers run at the drifted rate, and
// so does a reset.
func TestAdjustableOnVirtual(t *testing.T) {
	v := NewVirtual(t0)
	c := On(v)
	if err := c.Set(Skew{Drift: 0.25}); err != nil {
		t.Fatal(err)
	}
	tm := c.NewTimer(10 * time.Second) // 8 s of base time
	v.Advance(7 * time.Second)
	if _, ok := fired(tm.C()); ok {
		t.Fatal("fired after 7 s")
	}
	v.Advance(time.Second)
	if _, ok := fired(tm.C()); !ok {
		t.Fatal("a 10 s timer at +25 % did not fire after 8 s of base time")
	}
	tm.Reset(5 * time.Second) // 4 s
	v.Advance(4 * time.Second)
	if _, ok := fired(tm.C()); !ok {
		t.Fatal("the reset timer runs at the base rate")
	}
	if err := c.Sleep(canceled(), time.Hour); err == nil {
		t.Error("Sleep with a done context returned nil")
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

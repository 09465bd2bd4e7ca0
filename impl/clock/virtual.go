package clock

import (
	"container/heap"
	"sync"
	"time"
)

// Virtual is a Base whose time moves only when it is told to: a
// simulation's clock. Its timers fire, in the order of their deadlines
// (ties in the order they were set), as AdvanceTo passes them, each at its
// own deadline: Now reads the deadline while it fires. Nothing else moves
// it, so a run on virtual time is the same run however fast the machine
// is. Like the time package's, a firing goes into the timer's channel of
// one, and a tick nobody has taken when the next comes is dropped. It is
// safe for concurrent use.
type Virtual struct {
	mu     sync.Mutex
	now    time.Time
	timers timerHeap
	// seq orders timers set for the same deadline.
	seq uint64
}

// NewVirtual returns a virtual clock reading start.
func NewVirtual(start time.Time) *Virtual { return &Virtual{now: start} }

// Now implements Base.
func (v *Virtual) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

// NewTimer implements Base.
func (v *Virtual) NewTimer(d time.Duration) Timer {
	t := &virtualTimer{v: v, c: make(chan time.Time, 1), index: -1}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.scheduleLocked(t, d)
	return t
}

// NewTicker implements Base. d must be positive.
func (v *Virtual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	t := &virtualTimer{v: v, c: make(chan time.Time, 1), index: -1, period: d}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.scheduleLocked(t, d)
	return virtualTicker{t}
}

// Next returns the deadline of the next timer to fire, if one is set.
func (v *Virtual) Next() (time.Time, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.timers) == 0 {
		return time.Time{}, false
	}
	return v.timers[0].when, true
}

// AdvanceTo moves the clock to t, firing every timer due by then in order;
// it returns how many fired. A time before Now does not move it back.
func (v *Virtual) AdvanceTo(t time.Time) int {
	fired := 0
	for {
		v.mu.Lock()
		if len(v.timers) == 0 || v.timers[0].when.After(t) {
			if t.After(v.now) {
				v.now = t
			}
			v.mu.Unlock()
			return fired
		}
		tm := v.timers[0]
		if tm.when.After(v.now) {
			v.now = tm.when
		}
		if tm.period > 0 {
			tm.when = tm.when.Add(tm.period)
			tm.seq = v.nextSeq()
			heap.Fix(&v.timers, 0)
		} else {
			heap.Pop(&v.timers)
		}
		at := v.now
		v.mu.Unlock()
		select {
		case tm.c <- at:
		default: // the last firing was not taken: dropped, as in time
		}
		fired++
	}
}

// Advance moves the clock d forward (AdvanceTo).
func (v *Virtual) Advance(d time.Duration) int { return v.AdvanceTo(v.Now().Add(d)) }

func (v *Virtual) nextSeq() uint64 { v.seq++; return v.seq }

func (v *Virtual) scheduleLocked(t *virtualTimer, d time.Duration) {
	t.when = v.now.Add(max(d, 0))
	t.seq = v.nextSeq()
	if t.index >= 0 {
		heap.Fix(&v.timers, t.index)
		return
	}
	heap.Push(&v.timers, t)
}

// stopLocked unsets t; it reports whether t was set.
func (v *Virtual) stopLocked(t *virtualTimer) bool {
	if t.index < 0 {
		return false
	}
	heap.Remove(&v.timers, t.index)
	return true
}

type virtualTimer struct {
	v      *Virtual
	c      chan time.Time
	when   time.Time
	seq    uint64
	period time.Duration // 0: a one-shot timer
	index  int           // in the heap; -1: not set
}

func (t *virtualTimer) C() <-chan time.Time { return t.c }

func (t *virtualTimer) Stop() bool {
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	return t.v.stopLocked(t)
}

func (t *virtualTimer) Reset(d time.Duration) bool {
	t.v.mu.Lock()
	defer t.v.mu.Unlock()
	was := t.index >= 0
	t.v.scheduleLocked(t, d)
	return was
}

type virtualTicker struct{ t *virtualTimer }

func (k virtualTicker) C() <-chan time.Time { return k.t.c }
func (k virtualTicker) Stop()               { k.t.Stop() }
func (k virtualTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	k.t.v.mu.Lock()
	defer k.t.v.mu.Unlock()
	k.t.period = d
	k.t.v.scheduleLocked(k.t, d)
}

// timerHeap orders timers by deadline, then by when they were set.
type timerHeap []*virtualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*virtualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}

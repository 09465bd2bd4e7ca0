// Package sim is the core of a deterministic simulation: virtual time and
// one seeded scheduler that decides every interleaving (world.go), and a
// virtual network between named endpoints with per-direction cuts, loss,
// delay and reordering (network.go). Everything that happens is an event
// the scheduler runs one at a time, on one goroutine; events due at the same
// instant run in an order drawn from the seed, so a seed explores one
// interleaving and replays it exactly. Nothing here reads the machine's
// clock or starts a goroutine.
package sim

import (
	"container/heap"
	"math/rand/v2"
	"time"
)

// World is one simulation: its time, its scheduler and its random source.
// It is not safe for concurrent use: a simulation runs on one goroutine.
type World struct {
	now    time.Duration
	rng    *rand.Rand
	events eventHeap
	seq    uint64
	ran    uint64
}

// New returns a world at time 0 whose every choice comes from seed.
func New(seed uint64) *World {
	return &World{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Now is the virtual time since the simulation began.
func (w *World) Now() time.Duration { return w.now }

// Rand is the world's random source: the only one a simulation may use.
func (w *World) Rand() *rand.Rand { return w.rng }

// Ran counts the events run so far.
func (w *World) Ran() uint64 { return w.ran }

// Event is a scheduled event; Cancel unschedules it.
type Event struct {
	w *World
	e *event
}

// Cancel unschedules the event; it reports whether it was still due.
func (e Event) Cancel() bool {
	if e.e == nil || e.e.index < 0 {
		return false
	}
	heap.Remove(&e.w.events, e.e.index)
	return true
}

// Pending reports whether the event is still due.
func (e Event) Pending() bool { return e.e != nil && e.e.index >= 0 }

// At schedules f at time t (now, if t has passed). Events due at the same
// instant run in an order the seed decides, not the order they were
// scheduled in: each draws a random rank when it is scheduled.
func (w *World) At(t time.Duration, f func()) Event {
	e := &event{at: max(t, w.now), rank: w.rng.Uint64(), seq: w.seq, f: f}
	w.seq++
	heap.Push(&w.events, e)
	return Event{w: w, e: e}
}

// After schedules f d from now.
func (w *World) After(d time.Duration, f func()) Event { return w.At(w.now+max(d, 0), f) }

// Next is the time of the next event, if one is due.
func (w *World) Next() (time.Duration, bool) {
	if len(w.events) == 0 {
		return 0, false
	}
	return w.events[0].at, true
}

// Step runs the next event, moving time to it; it reports whether there
// was one.
func (w *World) Step() bool {
	if len(w.events) == 0 {
		return false
	}
	e := heap.Pop(&w.events).(*event)
	w.now = e.at
	w.ran++
	e.f()
	return true
}

// RunUntil runs every event due up to t, then moves time to t.
func (w *World) RunUntil(t time.Duration) {
	for len(w.events) > 0 && w.events[0].at <= t {
		w.Step()
	}
	w.now = max(w.now, t)
}

// RunFor runs the events of the next d (RunUntil).
func (w *World) RunFor(d time.Duration) { w.RunUntil(w.now + d) }

type event struct {
	at    time.Duration
	rank  uint64 // random: the order among events due at the same instant
	seq   uint64 // breaks a tie of ranks, so the order is total
	f     func()
	index int
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.at != b.at {
		return a.at < b.at
	}
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.seq < b.seq
}
func (h eventHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *eventHeap) Push(x any) {
	e := x.(*event)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}

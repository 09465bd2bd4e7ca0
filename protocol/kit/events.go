package kit

import (
	"sync"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// EventLog is a node's event log (capability events): bounded, safe for
// concurrent use, with consecutive sequence numbers from 1 within one
// process and a channel that wakes long polls.
type EventLog struct {
	now   func() time.Time
	limit int

	mu   sync.Mutex
	inc  string
	next uint64
	// ring holds the last len(ring) <= limit events; ring[head] is the
	// oldest once it is full.
	ring    []protocol.Event
	head    int
	waiters chan struct{}
}

// DefaultEventLimit is how many events an EventLog keeps before it
// forgets the oldest.
const DefaultEventLimit = 100_000

// NewEventLog returns an empty log keeping at most limit events (0: the
// default), stamping each with now (nil: time.Now), which may be a skewed
// clock (events carry the node's own time).
func NewEventLog(now func() time.Time, limit int) *EventLog {
	if now == nil {
		now = time.Now
	}
	if limit <= 0 {
		limit = DefaultEventLimit
	}
	return &EventLog{now: now, limit: limit, next: 1, waiters: make(chan struct{})}
}

// SetIncarnation names the incarnation stamped on events appended from now
// on (those that do not name their own).
func (l *EventLog) SetIncarnation(inc string) {
	l.mu.Lock()
	l.inc = inc
	l.mu.Unlock()
}

// Append stamps e with the next sequence number, the time and (if it has
// none) the incarnation, stores it and returns it as stored.
func (l *EventLog) Append(e protocol.Event) protocol.Event {
	now := l.now()
	l.mu.Lock()
	e.Seq = l.next
	l.next++
	e.Time = now
	if e.Incarnation == "" {
		e.Incarnation = l.inc
	}
	if len(l.ring) < l.limit {
		l.ring = append(l.ring, e)
	} else {
		l.ring[l.head] = e
		l.head = (l.head + 1) % l.limit
	}
	close(l.waiters)
	l.waiters = make(chan struct{})
	l.mu.Unlock()
	return e
}

// Since returns up to max events (0: all) with Seq > after, oldest first,
// and the sequence number of the newest event logged so far.
func (l *EventLog) Since(after uint64, max int) (evs []protocol.Event, last uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last = l.next - 1
	n := len(l.ring)
	if n == 0 || after >= last {
		return nil, last
	}
	first := last - uint64(n) + 1 // the oldest kept
	skip := 0
	if after >= first {
		skip = int(after - first + 1)
	}
	count := n - skip
	if max > 0 && count > max {
		count = max
	}
	evs = make([]protocol.Event, count)
	for i := range count {
		evs[i] = l.ring[(l.head+skip+i)%n]
	}
	return evs, last
}

// Last returns the newest event's sequence number (0: none yet).
func (l *EventLog) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Changed returns a channel closed at the next Append.
func (l *EventLog) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiters
}

package sharding

import (
	"fmt"
	"strings"
)

// Bugs switches deliberate bugs on; the zero value is correct.
//
// Each bug is a real variant of the code path it breaks — the damage it
// does is the damage such a mistake would do — so that the harness's
// checkers can be shown to catch it. Never switch one on outside tests of
// the harness.
type Bugs struct {
	// StartBeforeStopped: in a hand-off the coordinator does not wait for
	// the old owner's ShardStopped: it sends hand-off without awaiting the
	// answer and deallocates the shard at once, so the new home may start
	// entities while the old incarnations still run (two at once).
	StartBeforeStopped bool
	// DropBufferedOnHandOff: messages a region buffered for a shard during
	// its hand-off are thrown away (silently: not counted as
	// buffer-dropped) when the new home is known, instead of delivered;
	// their callers wait for their deadline.
	DropBufferedOnHandOff bool
	// ReorderBuffered: a shard's buffered messages are flushed newest
	// first (the buffer is popped like a stack), reversing each sender's
	// order.
	ReorderBuffered bool
	// NoCoordinatorPersistence: the coordinator keeps its state in memory
	// only (no journal appends); a new coordinator starts empty and
	// allocates anew shards that still run elsewhere.
	NoCoordinatorPersistence bool
	// DropPassivationBuffer: messages held for a passivating entity are
	// thrown away when it has stopped instead of delivered to the new
	// incarnation; their callers wait for their deadline.
	DropPassivationBuffer bool
}

// Stable names of the deliberate bugs (flags, capabilities).
const (
	BugStartBeforeStopped       = "start-before-stopped"
	BugDropBufferedOnHandOff    = "drop-buffered-on-hand-off"
	BugReorderBuffered          = "reorder-buffered"
	BugNoCoordinatorPersistence = "no-coordinator-persistence"
	BugDropPassivationBuffer    = "drop-passivation-buffer"
)

// bugFields maps each name to its switch, in the order BugNames lists them.
var bugFields = []struct {
	name string
	f    func(*Bugs) *bool
}{
	{BugStartBeforeStopped, func(b *Bugs) *bool { return &b.StartBeforeStopped }},
	{BugDropBufferedOnHandOff, func(b *Bugs) *bool { return &b.DropBufferedOnHandOff }},
	{BugReorderBuffered, func(b *Bugs) *bool { return &b.ReorderBuffered }},
	{BugNoCoordinatorPersistence, func(b *Bugs) *bool { return &b.NoCoordinatorPersistence }},
	{BugDropPassivationBuffer, func(b *Bugs) *bool { return &b.DropPassivationBuffer }},
}

// BugNames lists the names of every deliberate bug.
func BugNames() []string {
	out := make([]string, len(bugFields))
	for i, bf := range bugFields {
		out[i] = bf.name
	}
	return out
}

// Names lists the names of the bugs switched on in b (in BugNames order);
// empty for the zero value.
func (b Bugs) Names() []string {
	out := []string{}
	for _, bf := range bugFields {
		if *bf.f(&b) {
			out = append(out, bf.name)
		}
	}
	return out
}

// ParseBug switches on the bug called name in b; an unknown name is an
// error and changes nothing.
func ParseBug(name string, b *Bugs) error {
	for _, bf := range bugFields {
		if bf.name == name {
			*bf.f(b) = true
			return nil
		}
	}
	return fmt.Errorf("sharding: unknown deliberate bug %q (known: %s)", name, strings.Join(BugNames(), ", "))
}

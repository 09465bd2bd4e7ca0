package sim

import (
	"fmt"
	"time"
)

// Link is how one direction between two endpoints treats what is sent:
// Cut drops everything (a firewall rule); Loss drops each datagram with
// that probability; every message takes Delay plus a random part of
// Jitter, so messages sent close together may arrive out of order.
type Link struct {
	Cut    bool
	Loss   float64
	Delay  time.Duration
	Jitter time.Duration
}

// Handler receives what arrives at an endpoint.
type Handler func(from string, msg any)

// Network is a virtual network between named endpoints (addresses). A
// message is a value the receiver owns once sent: a sender must not change
// it afterwards. Datagrams (Send) may be lost; streams (SendReliable) need
// both directions open, as a TCP connection does, and turn loss into delay
// (retransmission) rather than drops.
type Network struct {
	w        *World
	base     Link // every direction without a link of its own
	links    map[[2]string]Link
	handlers map[string]Handler
	stats    Stats
	// streamTail: per direction, when the last message sent over the
	// stream arrives. A stream is one TCP connection, in order: a message
	// never overtakes one sent before it on the same direction (what
	// retransmission delays holds up what follows, head of line).
	streamTail map[[2]string]time.Duration
}

// Stats counts what the network did.
type Stats struct {
	Sent, Delivered         uint64
	DroppedCut, DroppedLost uint64
	// DroppedClosed: nothing listened at the address when it arrived.
	DroppedClosed uint64
}

// RetransmitAfter is how long a stream waits before sending again what a
// lossy link lost.
const RetransmitAfter = 200 * time.Millisecond

// NewNetwork is a network in w where every direction behaves as base.
func NewNetwork(w *World, base Link) *Network {
	return &Network{w: w, base: base, links: map[[2]string]Link{}, handlers: map[string]Handler{}, streamTail: map[[2]string]time.Duration{}}
}

// Listen makes h receive what arrives at addr (replacing any handler).
func (n *Network) Listen(addr string, h Handler) { n.handlers[addr] = h }

// Close stops addr receiving: what arrives there afterwards is dropped (a
// killed process).
func (n *Network) Close(addr string) { delete(n.handlers, addr) }

// Link is the direction from → to as it is now.
func (n *Network) Link(from, to string) Link {
	if l, ok := n.links[[2]string{from, to}]; ok {
		return l
	}
	return n.base
}

// SetLink sets the direction from → to.
func (n *Network) SetLink(from, to string, l Link) { n.links[[2]string{from, to}] = l }

// Cut drops everything from → to until Heal; Heal restores the base link.
func (n *Network) Cut(from, to string) {
	l := n.Link(from, to)
	l.Cut = true
	n.SetLink(from, to, l)
}

// Heal gives from → to the base link again.
func (n *Network) Heal(from, to string) { delete(n.links, [2]string{from, to}) }

// HealAll gives every direction the base link again.
func (n *Network) HealAll() { clear(n.links) }

// Stats is what the network has done so far.
func (n *Network) Stats() Stats { return n.stats }

// Send sends a datagram: dropped if the direction is cut (when sent or
// when it arrives), lost with the link's probability, else delivered after
// the link's delay.
func (n *Network) Send(from, to string, msg any) {
	n.stats.Sent++
	l := n.Link(from, to)
	switch {
	case l.Cut:
		n.stats.DroppedCut++
		return
	case l.Loss > 0 && n.w.rng.Float64() < l.Loss:
		n.stats.DroppedLost++
		return
	}
	n.w.After(n.delay(l), func() { n.arrive(from, to, msg, false) })
}

// SendReliable sends over a stream: it needs both directions open when
// sent and when it arrives (else it is dropped and onFail, if not nil, is
// called when the sender would notice: after timeout, or as soon as the
// refusal comes back if nothing listens at to); a lossy link
// delays it by a retransmission each time it would have lost it. Messages
// over the stream of one direction arrive in the order they were sent.
func (n *Network) SendReliable(from, to string, msg any, timeout time.Duration, onFail func(error)) {
	n.stats.Sent++
	failAfter := func(d time.Duration, why string) {
		if onFail != nil {
			n.w.After(d, func() { onFail(fmt.Errorf("stream %s -> %s: %s", from, to, why)) })
		}
	}
	fail := func(why string) { failAfter(timeout, why) }
	there, back := n.Link(from, to), n.Link(to, from)
	if there.Cut || back.Cut {
		n.stats.DroppedCut++
		fail("i/o timeout (cut)")
		return
	}
	d := n.delay(there)
	for there.Loss > 0 && n.w.rng.Float64() < there.Loss && d < timeout {
		d += RetransmitAfter
	}
	if d >= timeout {
		n.stats.DroppedLost++
		fail("i/o timeout (lost)")
		return
	}
	dir := [2]string{from, to}
	at := max(n.w.now+d, n.streamTail[dir])
	n.streamTail[dir] = at
	n.w.At(at, func() {
		if n.Link(from, to).Cut || n.Link(to, from).Cut {
			n.stats.DroppedCut++
			fail("i/o timeout (cut on the way)")
			return
		}
		if !n.arrive(from, to, msg, true) {
			// Nothing listens there: the refusal comes straight back.
			failAfter(n.delay(n.Link(to, from)), "connection refused")
		}
	})
}

func (n *Network) delay(l Link) time.Duration {
	d := l.Delay
	if l.Jitter > 0 {
		d += time.Duration(n.w.rng.Int64N(int64(l.Jitter)))
	}
	return d
}

// arrive hands msg to to's handler; a datagram whose direction was cut on
// the way is dropped (the receiver's filter drops it on arrival).
func (n *Network) arrive(from, to string, msg any, checked bool) bool {
	if !checked && n.Link(from, to).Cut {
		n.stats.DroppedCut++
		return false
	}
	h := n.handlers[to]
	if h == nil {
		n.stats.DroppedClosed++
		return false
	}
	n.stats.Delivered++
	h(from, msg)
	return true
}

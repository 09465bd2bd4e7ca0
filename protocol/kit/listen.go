package kit

import (
	"cmp"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Limits of a server that must not be held open by a slow or hostile
// client: a request (headers and body: every valid body is tiny) must
// arrive within ReadTimeout, and connections are bounded as Slots says
// (MaxConnections open at once, MaxSilentPerSource silent ones from one
// address). Replies are not bounded: a long poll waits up to 30 s, an
// entity request up to the node's request timeout.
const (
	ReadTimeout        = 30 * time.Second
	MaxConnections     = 4096
	MaxSilentPerSource = 256
	// SilentAfter is how long a connection may say nothing before it
	// counts as silent (Slots.Grace).
	SilentAfter = time.Second
)

// NewServer returns an http.Server for h with ReadHeaderTimeout and
// ReadTimeout set.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: ReadTimeout, IdleTimeout: 2 * time.Minute}
}

// Slots bound a server's connections (Serve). A connection is silent once
// it has gone Grace with no request in progress: it has not sent a whole
// request header yet, or it is idle between requests. Every connection
// accepted is let in, and makes room for itself:
//   - if its source address (IP) then holds more than PerSource silent
//     connections, that source's connection silent longest is closed;
//   - if more than Max connections are then open (more than Max-Reserved,
//     for a source Preferred does not name), the connection silent longest
//     of all is closed; when none is silent, the new one is, at once.
//
// A flood of silent connections, from one address or many, so cannot keep
// a client that speaks waiting: a listener that stopped accepting at Max
// left each new request in the backlog until the header timeout closed a
// flood connection (~10 s), a member's on the peer port too. A burst of
// new connections younger than Grace is let in whole: a harness opens
// hundreds at once from one address, each with its request on the way.
// Reserved keeps the last slots for the Preferred (the peer port's current
// members) even against a flood renewed faster than Grace. Zero fields
// take the defaults (MaxConnections, MaxSilentPerSource, SilentAfter, no
// reservation).
type Slots struct {
	Max       int
	PerSource int
	Grace     time.Duration
	Reserved  int
	// Preferred says whether a source address may take a reserved slot
	// (asked of each new connection when Reserved is set).
	Preferred func(ip netip.Addr) bool
}

// Serve serves srv on l within s, as srv.Serve does. It sets
// srv.ConnState (calling the one set before) to see which connections are
// silent.
func (s Slots) Serve(srv *http.Server, l net.Listener) error {
	s.Max = cmp.Or(max(s.Max, 0), MaxConnections)
	s.PerSource = cmp.Or(max(s.PerSource, 0), MaxSilentPerSource)
	s.Grace = cmp.Or(max(s.Grace, 0), SilentAfter)
	s.Reserved = min(max(s.Reserved, 0), s.Max-1)
	sl := &slotListener{Listener: l, s: s, conns: map[*slotConn]struct{}{}}
	next := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		sl.state(c, st)
		if next != nil {
			next(c, st)
		}
	}
	return srv.Serve(sl)
}

// slotListener is a listener within Slots.
type slotListener struct {
	net.Listener
	s Slots

	mu    sync.Mutex
	conns map[*slotConn]struct{} // open, not yet closed by anyone
}

// slotConn is a connection the listener let in.
type slotConn struct {
	net.Conn
	l  *slotListener
	ip netip.Addr
	// silentSince is when it last fell silent; zero while a request is in
	// progress or once hijacked (a peer stream keeps its own time).
	// Guarded by l.mu.
	silentSince time.Time
}

// Accept returns the next connection let in, closing what makes room.
func (l *slotListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		sc := &slotConn{Conn: c, l: l, ip: sourceIP(c), silentSince: time.Now()}
		closing, ok := l.admit(sc)
		for _, v := range closing {
			v.Conn.Close()
		}
		if ok {
			return sc, nil
		}
		c.Close()
	}
}

// admit lets sc in and returns the connections it displaces (no longer
// counted; the caller closes them), and false if sc itself must go.
func (l *slotListener) admit(sc *slotConn) ([]*slotConn, bool) {
	// Asked before taking the lock: Preferred reads the caller's state,
	// which must not wait on connections.
	preferred := l.s.Reserved > 0 && l.s.Preferred != nil && l.s.Preferred(sc.ip)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	var closing []*slotConn
	if v, n := l.longestSilent(now, sc.ip); n > l.s.PerSource {
		closing = append(closing, v)
		delete(l.conns, v)
	}
	l.conns[sc] = struct{}{}
	limit := l.s.Max
	if !preferred {
		limit = l.s.Max - l.s.Reserved
	}
	if len(l.conns) <= limit {
		return closing, true
	}
	v, _ := l.longestSilent(now, netip.Addr{})
	if v == nil {
		delete(l.conns, sc)
		return closing, false
	}
	delete(l.conns, v)
	return append(closing, v), true
}

// longestSilent returns the connection silent longest (at least Grace)
// and how many are, of those from source (the zero address: of all).
func (l *slotListener) longestSilent(now time.Time, source netip.Addr) (*slotConn, int) {
	var oldest *slotConn
	n := 0
	for c := range l.conns {
		if c.silentSince.IsZero() || now.Sub(c.silentSince) < l.s.Grace || (source.IsValid() && c.ip != source) {
			continue
		}
		n++
		if oldest == nil || c.silentSince.Before(oldest.silentSince) {
			oldest = c
		}
	}
	return oldest, n
}

// state follows the server's view of c: silent when new or idle.
func (l *slotListener) state(c net.Conn, st http.ConnState) {
	sc, ok := c.(*slotConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateNew, http.StateIdle:
		sc.silentSince = time.Now()
	case http.StateActive, http.StateHijacked:
		sc.silentSince = time.Time{}
	}
}

// Close frees c's slot and closes it; whoever holds c (the server, or a
// handler that hijacked it) closes it this way.
func (c *slotConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// sourceIP is the address a connection comes from; connections that are
// not TCP share the zero address.
func sourceIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

package kit

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// Limits of a server that must not be held open by a slow or hostile
// client: a request (headers and body: every valid body is tiny) must
// arrive within ReadTimeout, and at most MaxConnections are open at once
// (the others wait in the listen backlog). Replies are not bounded: a long
// poll waits up to 30 s, an entity request up to the node's request
// timeout.
const (
	ReadTimeout    = 30 * time.Second
	MaxConnections = 4096
)

// NewServer returns an http.Server for h with ReadHeaderTimeout and
// ReadTimeout set.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: ReadTimeout, IdleTimeout: 2 * time.Minute}
}

// LimitListener bounds l to n connections open at once.
func LimitListener(l net.Listener, n int) net.Listener { return netutil.LimitListener(l, n) }

// Package peer carries node-to-node requests (singleton hand-over, proxy
// forwarding, shard traffic) as JSON, on one framed stream per peer
// address (stream_client.go, stream_server.go; plain HTTP to a peer that
// serves no streams), on each member's peer address
// (an address of its cluster-internal IP, which partitions cut like
// gossip, never the public protocol port), through the node's in-process
// packet filter so that a partition set through the admin API cuts these
// paths as well as gossip. Every request names its sender and the member
// it is for, and carries the cluster's secret if one is set; Guard refuses
// what a current member did not send to this very member.
package peer

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// FromHeader names the sender's gossip address on node-to-node requests, so
// the receiver's filter can drop requests from a cut-off peer.
const FromHeader = "X-Shardtest-From"

// ToHeader names the member (its uid) a node-to-node request is meant for:
// required. A restarted member comes back at the same addresses as a new
// incarnation, so a request sent to the old one reaches the new one; the
// receiver refuses what is meant for another incarnation instead of
// acting on it (e.g. hosting a shard the coordinator still places at the
// old incarnation).
const ToHeader = "X-Shardtest-To"

// MemberHeader names the sending member (its uid): the receiver serves
// only current members of its cluster.
const MemberHeader = "X-Shardtest-Member"

// SecretHeader carries the cluster's shared secret, if one is set
// (SHARDTEST_CLUSTER_SECRET): a stranger on the network who can reach a
// member's peer address is refused all the same.
const SecretHeader = "X-Shardtest-Secret"

// Filter is the in-process packet filter. Peers are named by their gossip
// address (host:port). Dropping inbound packets from a peer, or outbound
// packets to it, is directional for datagrams (heartbeats); a TCP stream
// needs both directions, so streams and requests are cut by either rule.
type Filter struct {
	mu      sync.RWMutex
	dropIn  map[string]bool
	dropOut map[string]bool
}

// Rules is the filter's configuration as the admin API shows and sets it.
type Rules struct {
	// DropIn are peers whose packets to this node are dropped.
	DropIn []string `json:"drop_in"`
	// DropOut are peers this node's packets to are dropped.
	DropOut []string `json:"drop_out"`
}

// Set replaces all rules at once.
func (f *Filter) Set(r Rules) {
	in, out := map[string]bool{}, map[string]bool{}
	for _, a := range r.DropIn {
		in[a] = true
	}
	for _, a := range r.DropOut {
		out[a] = true
	}
	f.mu.Lock()
	f.dropIn, f.dropOut = in, out
	f.mu.Unlock()
}

// Rules returns the rules in force, sorted.
func (f *Filter) Rules() Rules {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r := Rules{DropIn: keys(f.dropIn), DropOut: keys(f.dropOut)}
	return r
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// AllowsFrom reports whether a datagram from peer may be received.
func (f *Filter) AllowsFrom(peer string) bool {
	if f == nil {
		return true
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return !f.dropIn[peer]
}

// AllowsTo reports whether a datagram to peer may be sent.
func (f *Filter) AllowsTo(peer string) bool {
	if f == nil {
		return true
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return !f.dropOut[peer]
}

// AllowsStream reports whether a stream (TCP connection, request) with peer
// can work: it needs both directions.
func (f *Filter) AllowsStream(peer string) bool { return f.AllowsFrom(peer) && f.AllowsTo(peer) }

// Middleware drops node-to-node requests from peers the filter cuts: the
// connection is closed without an answer, as a lost reply would look.
func (f *Filter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from := r.Header.Get(FromHeader)
		if from != "" && !f.AllowsStream(from) {
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return
				}
			}
			http.Error(w, "dropped by packet filter", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// RemoteError is a non-2xx answer from a peer: its body is a
// protocol.ErrorBody with a code of protocol.ScopePeer.
type RemoteError struct {
	Status int
	Body   protocol.ErrorBody
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer answered %d %s: %s", e.Status, e.Body.Code, e.Body.Error)
}

// ErrUnreachable: the request could not be delivered or its answer was
// lost (filter, refused connection, timeout). Whether it took effect is
// unknown unless the error also says the connection was never made.
var ErrUnreachable = errors.New("peer unreachable")

// ErrNotSent marks a failed call whose request was certainly never
// written to the peer: no connection or stream to it was had, or the
// sender's own packet filter cut it. It had no effect and may be sent
// again. Every other unreachable call may have reached the peer.
var ErrNotSent = errors.New("request not sent")

// notSent wraps err as unreachable and never sent.
func notSent(addr string, err error) error {
	return fmt.Errorf("%w: %w: %s: %w", ErrUnreachable, ErrNotSent, addr, err)
}

// Target is the member a node-to-node request is for.
type Target struct {
	// UID is the member (name@incarnation), sent as ToHeader.
	UID string
	// GossipAddr names it in the packet filter; Addr is its peer address
	// (host:port), where node-to-node requests go.
	GossipAddr, Addr string
}

// Self is the sending member, as every request names it.
type Self struct {
	// UID is sent as MemberHeader, GossipAddr as FromHeader.
	UID, GossipAddr string
	// Secret is the cluster's shared secret ("": none), sent as
	// SecretHeader.
	Secret string
}

// Client sends node-to-node requests: on one stream per peer address
// (StreamPath), or over plain HTTP to a peer that serves no streams.
type Client struct {
	self   Self
	filter *Filter
	http   *http.Client

	// ctx ends the client's dials when it is closed.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // dials and stream readers

	mu       sync.Mutex
	closed   bool
	streams  map[string]*streamSlot // by peer address
	httpOnly map[string]time.Time   // addresses that refused a stream, until when
}

// NewClient returns a client that sends as self.
func NewClient(self Self, filter *Filter) *Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     clientIdle,
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{
		self: self, filter: filter, http: &http.Client{Transport: tr},
		ctx: ctx, cancel: cancel,
		streams: map[string]*streamSlot{}, httpOnly: map[string]time.Time{},
	}
}

// Close ends every stream (calls still waiting on one fail as
// unreachable) and releases idle connections.
func (c *Client) Close() {
	c.closeStreams()
	c.http.CloseIdleConnections()
}

// Caller makes node-to-node calls: the node's decisions reach other members
// only through it, so the real transport (Client) and a simulated network
// are interchangeable beneath them.
type Caller interface {
	Call(ctx context.Context, to Target, path string, req, resp any) error
}

var _ Caller = (*Client)(nil)

// Call sends req as JSON to path on the member to and decodes a 2xx answer
// into resp (if not nil). A cut peer behaves as on a real network: the
// call waits until ctx is done.
func (c *Client) Call(ctx context.Context, to Target, path string, req, resp any) error {
	gossipAddr, httpAddr := to.GossipAddr, to.Addr
	if !c.filter.AllowsStream(gossipAddr) {
		<-ctx.Done()
		return notSent(gossipAddr, ctx.Err())
	}
	if httpAddr == "" {
		return notSent(to.UID, errors.New("no peer address"))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	// A stream that broke before the request was written carried
	// nothing: the request goes on a new one (once).
	for try := 0; ; try++ {
		s, err := c.streamFor(ctx, httpAddr)
		if errors.Is(err, errHTTPOnly) {
			return c.callHTTP(ctx, to, path, body, resp)
		}
		var refused *RemoteError
		if errors.As(err, &refused) {
			// The peer's guard refused the stream: the answer this
			// request would have had on one (and the next call asks
			// again: the peer may know this member by then).
			return refused
		}
		if err != nil {
			return notSent(httpAddr, err)
		}
		f, err := s.call(ctx, path, to.UID, body)
		var ns *notSentError
		if errors.As(err, &ns) {
			if try == 0 {
				continue
			}
			return notSent(httpAddr, err)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUnreachable, httpAddr, err)
		}
		if f.kind == frameDropped {
			// As a connection closed without an answer: the request
			// may have been lost on the way or its answer on the way
			// back.
			return fmt.Errorf("%w: %s: dropped by its packet filter", ErrUnreachable, httpAddr)
		}
		return decodeAnswer(httpAddr, f.status, f.body, resp)
	}
}

// callHTTP sends the request as an HTTP POST, to a peer that serves no
// streams.
func (c *Client) callHTTP(ctx context.Context, to Target, path string, body []byte, resp any) error {
	httpAddr := to.Addr
	// A request for which no connection was ever obtained was never
	// written.
	var gotConn atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
	})
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(FromHeader, c.self.GossipAddr)
	hr.Header.Set(MemberHeader, c.self.UID)
	hr.Header.Set(ToHeader, to.UID)
	if c.self.Secret != "" {
		hr.Header.Set(SecretHeader, c.self.Secret)
	}
	res, err := c.http.Do(hr)
	if err != nil {
		if !gotConn.Load() {
			return notSent(httpAddr, err)
		}
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, httpAddr, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%w: read answer from %s: %w", ErrUnreachable, httpAddr, err)
	}
	return decodeAnswer(httpAddr, res.StatusCode, data, resp)
}

// decodeAnswer turns a peer's answer (an HTTP status and its JSON body)
// into resp, or into a RemoteError.
func decodeAnswer(httpAddr string, status int, data []byte, resp any) error {
	if status/100 != 2 {
		re := &RemoteError{Status: status}
		if json.Unmarshal(data, &re.Body) != nil || re.Body.Code == "" {
			re.Body = protocol.ErrorBody{Error: string(bytes.TrimSpace(data)), Code: "http-" + fmt.Sprint(status), Outcome: protocol.Unknown}
		}
		return re
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(data, resp); err != nil {
		return fmt.Errorf("decode answer from %s: %w", httpAddr, err)
	}
	return nil
}

// IsDefiniteFailure reports whether err certainly means the peer did not act
// on the request: the peer said so.
func IsDefiniteFailure(err error) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Body.Outcome == protocol.Fail
}

// Unmarshal decodes a peer request's body into v. It refuses a lone
// surrogate escape as the public port does (protocol.CheckSurrogates):
// decoded as U+FFFD, an entity id in a member's delivery would name
// another entity than the one sent.
func Unmarshal(body []byte, v any) error {
	if err := protocol.CheckSurrogates(body); err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// WriteJSON writes v as a JSON answer with status; if v cannot be encoded
// the answer is internal (a 500 with an unknown outcome).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status, data = errorAnswer(0, protocol.ErrorBody{Error: "encode answer: " + err.Error(), Code: protocol.CodeInternal})
	}
	write(w, status, data)
}

// WriteError answers code (protocol.ScopePeer) with msg, with the status
// and outcome protocol's table gives it.
func WriteError(w http.ResponseWriter, code, msg string) {
	WriteErrorBody(w, 0, protocol.ErrorBody{Error: msg, Code: code})
}

// WriteErrorBody answers b; status 0 and an empty outcome are the table's
// for b.Code (protocol.ErrorReply, protocol.ScopePeer). A status of its own
// is for the cases the table's row names besides its usual one.
func WriteErrorBody(w http.ResponseWriter, status int, b protocol.ErrorBody) {
	status, data := errorAnswer(status, b)
	write(w, status, data)
}

// write sends an encoded JSON answer.
func write(w http.ResponseWriter, status int, data []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// errorAnswer is the status and the encoded body of an error answer
// (protocol.ErrorReply on protocol.ScopePeer).
func errorAnswer(status int, b protocol.ErrorBody) (int, []byte) {
	status, b = protocol.ErrorReply(protocol.ScopePeer, status, b)
	data, _ := json.Marshal(b) // an ErrorBody always marshals
	return status, data
}

// Guard admits node-to-node requests only from current members of this
// member's cluster, for this very member, with the cluster's secret: the
// peer address must not let a stranger who reaches it hand over a
// singleton or host a shard (one forged hand-over-to-me stopped the id
// generator cluster-wide; a forged host-shard created a second live
// incarnation of an entity).
type Guard struct {
	// Self is this member's uid now ("": none running).
	Self func() string
	// Member reports whether uid is a current (not final) member of this
	// member's view, and its gossip IP.
	Member func(uid string) (ip string, ok bool)
	// Secret is the cluster's shared secret ("": none required).
	Secret string
}

// Refusal is why the guard did not admit a request: the status and the
// error body to answer it with (always a definite failure).
type Refusal struct {
	Status int
	Body   protocol.ErrorBody
}

// Write answers the refusal.
func (r *Refusal) Write(w http.ResponseWriter) { WriteErrorBody(w, r.Status, r.Body) }

func refuse(status int, code, msg string) *Refusal {
	return &Refusal{Status: status, Body: protocol.ErrorBody{Code: code, Error: msg}}
}

// Admit checks what every request and every stream's upgrade must show
// before anything of it is served: the cluster's secret, a sender that is
// a current member of this member's view, calling from that member's
// address. It returns the sender's uid, or why not. (Which member the
// request is for is checked per request: a stream's requests each name
// theirs.)
func (g *Guard) Admit(h http.Header, remoteAddr string) (string, *Refusal) {
	if g.Secret != "" && subtle.ConstantTimeCompare([]byte(h.Get(SecretHeader)), []byte(g.Secret)) != 1 {
		return "", refuse(http.StatusForbidden, protocol.CodePeerRefused, "wrong or missing cluster secret")
	}
	self := g.Self()
	if self == "" {
		// The table's other status for a refusal: no member here yet.
		return "", refuse(http.StatusServiceUnavailable, protocol.CodePeerRefused, "no member runs here")
	}
	from := h.Get(MemberHeader)
	ip, ok := g.Member(from)
	switch {
	case from == "" || !ok:
		return "", refuse(http.StatusForbidden, protocol.CodePeerRefused, fmt.Sprintf("%q is not a current member of %s's cluster", from, self))
	case ip != "" && !sameHost(remoteAddr, ip):
		return "", refuse(http.StatusForbidden, protocol.CodePeerRefused, fmt.Sprintf("a request as %s from %s, which is not its address", from, remoteAddr))
	}
	return from, nil
}

// Middleware refuses, with a definite failure, a request Admit refuses or
// which is for another member; the handler it admits a request to finds
// the sender, as the guard admitted it, with SenderOf.
func (g *Guard) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from, no := g.Admit(r.Header, r.RemoteAddr)
		if no != nil {
			no.Write(w)
			return
		}
		if to, self := r.Header.Get(ToHeader), g.Self(); to != self {
			WriteError(w, protocol.CodeWrongMember, fmt.Sprintf("the request is for %q; this is %s", to, self))
			return
		}
		next.ServeHTTP(w, r.WithContext(WithSender(r.Context(), from)))
	})
}

// senderKey is the context key of the sender a guard admitted.
type senderKey struct{}

// WithSender returns ctx naming uid as the member a node-to-node request
// comes from. The guard sets it; a handler trusts no other word of who
// sent a request (a body's "from" is checked against it).
func WithSender(ctx context.Context, uid string) context.Context {
	return context.WithValue(ctx, senderKey{}, uid)
}

// SenderOf is the member a node-to-node request comes from, as a guard
// (or NameSender) admitted it; ok is false when none did, and a handler
// then refuses what only a member may ask.
func SenderOf(ctx context.Context) (uid string, ok bool) {
	uid, ok = ctx.Value(senderKey{}).(string)
	return uid, ok && uid != ""
}

// NameSender names the sender of every request by its MemberHeader,
// unchecked: for servers that run the node-to-node handlers without a
// Guard (tests of one package's protocol), never for a peer port.
func NameSender(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(WithSender(r.Context(), r.Header.Get(MemberHeader))))
	})
}

// sameHost reports whether the request's remote address is at ip.
func sameHost(remote, ip string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	a, b := net.ParseIP(host), net.ParseIP(ip)
	return a != nil && b != nil && a.Equal(b)
}

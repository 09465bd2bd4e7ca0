// Package peer carries node-to-node requests (singleton hand-over, proxy
// forwarding, and later shard traffic) over HTTP/JSON, through the node's
// in-process packet filter so that a partition set through the admin API
// cuts these paths as well as gossip.
package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"
)

// FromHeader names the sender's gossip address on node-to-node requests, so
// the receiver's filter can drop requests from a cut-off peer.
const FromHeader = "X-Shardtest-From"

// ToHeader names the member (its uid) a node-to-node request is meant for.
// A restarted member comes back at the same addresses as a new
// incarnation, so a request sent to the old one reaches the new one; the
// receiver refuses what is meant for another incarnation instead of
// acting on it (e.g. hosting a shard the coordinator still places at the
// old incarnation).
const ToHeader = "X-Shardtest-To"

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

// ErrorBody is the JSON error every node endpoint returns with a non-2xx
// status.
type ErrorBody struct {
	Error string `json:"error"`
	// Code is a stable machine-readable reason.
	Code string `json:"code"`
	// Outcome is "fail" (definitely had no effect) or "unknown".
	Outcome string `json:"outcome"`
	// Reason refines Code where the receiver passes on a refusal it got
	// from further in (an entity's rejection code).
	Reason string `json:"reason,omitempty"`
}

// Outcomes of a failed request.
const (
	OutcomeFail    = "fail"
	OutcomeUnknown = "unknown"
)

// RemoteError is a non-2xx answer from a peer.
type RemoteError struct {
	Status int
	Body   ErrorBody
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer answered %d %s: %s", e.Status, e.Body.Code, e.Body.Error)
}

// ErrUnreachable: the request could not be delivered or its answer was
// lost (filter, refused connection, timeout). Whether it took effect is
// unknown unless the error also says the connection was never made.
var ErrUnreachable = errors.New("peer unreachable")

// Client sends node-to-node requests.
type Client struct {
	self   string // this node's gossip address, sent in FromHeader
	filter *Filter
	http   *http.Client
}

// NewClient returns a client for the node whose gossip address is self.
func NewClient(self string, filter *Filter) *Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{self: self, filter: filter, http: &http.Client{Transport: tr}}
}

// Close releases idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Call POSTs req as JSON to http://httpAddr+path on the peer whose gossip
// address is gossipAddr and decodes a 2xx answer into resp (if not nil).
// A cut peer behaves as on a real network: the call waits until ctx is done.
func (c *Client) Call(ctx context.Context, gossipAddr, httpAddr, path string, req, resp any) error {
	return c.CallTo(ctx, "", gossipAddr, httpAddr, path, req, resp)
}

// CallTo is Call for the member whose uid is to (sent as ToHeader; ""
// sends none).
func (c *Client) CallTo(ctx context.Context, to, gossipAddr, httpAddr, path string, req, resp any) error {
	if !c.filter.AllowsStream(gossipAddr) {
		<-ctx.Done()
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, gossipAddr, ctx.Err())
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set(FromHeader, c.self)
	if to != "" {
		hr.Header.Set(ToHeader, to)
	}
	res, err := c.http.Do(hr)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnreachable, httpAddr, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%w: read answer from %s: %w", ErrUnreachable, httpAddr, err)
	}
	if res.StatusCode/100 != 2 {
		re := &RemoteError{Status: res.StatusCode}
		if json.Unmarshal(data, &re.Body) != nil || re.Body.Code == "" {
			re.Body = ErrorBody{Error: string(bytes.TrimSpace(data)), Code: "http-" + fmt.Sprint(res.StatusCode), Outcome: OutcomeUnknown}
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
	return errors.As(err, &re) && re.Body.Outcome == OutcomeFail
}

// WriteJSON writes v as a JSON answer with status; if v cannot be encoded
// the answer is a 500 with an unknown outcome.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data, _ = json.Marshal(ErrorBody{Error: "encode answer: " + err.Error(), Code: "internal", Outcome: OutcomeUnknown})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}

// WriteFail writes a definite failure: the request had no effect.
func WriteFail(w http.ResponseWriter, status int, code, msg string) {
	WriteJSON(w, status, ErrorBody{Error: msg, Code: code, Outcome: OutcomeFail})
}

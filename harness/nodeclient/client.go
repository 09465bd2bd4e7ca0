// Package nodeclient is the harness's client for the node protocol
// (docs/protocol.md). It is written from the protocol document, not from
// the reference node's code: the protocol is the only seam between the
// harness and an implementation under test.
package nodeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Outcome of a request, as the protocol classifies it.
type Outcome string

// Outcomes. Checkers depend on the difference between Fail and Unknown: a
// timeout is never a failure.
const (
	OK      Outcome = "ok"
	Fail    Outcome = "fail"
	Unknown Outcome = "unknown"
)

// ServedBy names the member that served a reply.
type ServedBy struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
}

// Error is a failed request.
type Error struct {
	// Status is the HTTP status (0 if no reply arrived).
	Status   int
	Code     string
	Message  string
	Outcome  Outcome
	ServedBy ServedBy
	Err      error // transport error, if any
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s (outcome %s)", e.Err, e.Outcome)
	}
	return fmt.Sprintf("%d %s: %s (outcome %s)", e.Status, e.Code, e.Message, e.Outcome)
}

func (e *Error) Unwrap() error { return e.Err }

// OutcomeOf classifies err: nil is OK; a protocol error says; anything else
// (no answer) is Unknown.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) && e.Outcome == Fail {
		return Fail
	}
	return Unknown
}

// Member is a member as a node reports it.
type Member struct {
	UID         string `json:"uid"`
	Name        string `json:"name"`
	Incarnation string `json:"incarnation"`
	UpNumber    int64  `json:"up_number"`
	Status      string `json:"status"`
	Reachable   bool   `json:"reachable"`
	GossipAddr  string `json:"gossip_addr"`
	HTTPAddr    string `json:"http_addr"`
}

// Singleton is a singleton's state on a node.
type Singleton struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
}

// Status is GET /v1/status (the fields the harness relies on).
type Status struct {
	ServedBy    ServedBy    `json:"served_by"`
	Protocol    string      `json:"protocol"`
	Self        Member      `json:"self"`
	Ready       bool        `json:"ready"`
	Oldest      string      `json:"oldest"`
	Members     []Member    `json:"members"`
	Unreachable []string    `json:"unreachable"`
	Singletons  []Singleton `json:"singletons"`
	Sharding    []Sharding  `json:"sharding"`
}

// Sharding is one entity type's state on a node (the fields the harness
// relies on).
type Sharding struct {
	Type string `json:"type"`
	// CoordinatorRunning: this node runs the type's shard coordinator.
	CoordinatorRunning bool `json:"coordinator_running"`
	Region             struct {
		// Shards this node's region hosts.
		Shards []struct {
			ID string `json:"id"`
		} `json:"shards"`
	} `json:"region"`
}

// SingletonRunning reports whether the named singleton runs on the node.
func (s Status) SingletonRunning(name string) bool {
	for _, x := range s.Singletons {
		if x.Name == name && x.Running {
			return true
		}
	}
	return false
}

// NextID is POST /v1/singleton/next-id.
type NextID struct {
	ServedBy  ServedBy `json:"served_by"`
	ID        int64    `json:"id"`
	Singleton struct {
		Node        string `json:"node"`
		Incarnation string `json:"incarnation"`
		Instance    int64  `json:"instance"`
	} `json:"singleton"`
}

// Event is one node event.
type Event struct {
	Seq         uint64    `json:"seq"`
	Time        time.Time `json:"time"`
	Incarnation string    `json:"incarnation"`
	Type        string    `json:"type"`
	Member      string    `json:"member,omitempty"`
	Peer        string    `json:"peer,omitempty"`
	Singleton   string    `json:"singleton,omitempty"`
	Detail      string    `json:"detail,omitempty"`

	EntityType        string `json:"entity_type,omitempty"`
	Shard             string `json:"shard,omitempty"`
	Entity            string `json:"entity,omitempty"`
	EntityIncarnation string `json:"entity_incarnation,omitempty"`
}

// EventsReply is GET /v1/events.
type EventsReply struct {
	ServedBy ServedBy `json:"served_by"`
	Events   []Event  `json:"events"`
	Last     uint64   `json:"last"`
}

// WaitEvents returns events after seq, waiting up to wait for one if
// there is none yet (long poll).
func (c *Client) WaitEvents(ctx context.Context, after uint64, limit int, wait time.Duration) (EventsReply, error) {
	var r EventsReply
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}, "wait_ms": {strconv.FormatInt(wait.Milliseconds(), 10)}}
	err := c.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &r)
	return r, err
}

// Client talks to one node.
type Client struct {
	base string
	http *http.Client
}

// New returns a client for the node at addr (host:port).
func New(addr string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: "http://" + addr, http: hc}
}

// Status reads the node's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.do(ctx, http.MethodGet, "/v1/status", nil, &s)
}

// NextID asks the node for an id from the id-generator singleton.
func (c *Client) NextID(ctx context.Context) (NextID, error) {
	var r NextID
	return r, c.do(ctx, http.MethodPost, "/v1/singleton/next-id", struct{}{}, &r)
}

// Leave asks the node to leave gracefully.
func (c *Client) Leave(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/admin/leave", struct{}{}, nil)
}

// Down downs member (a uid, or a node name for its current member) on an
// operator's word (capability "down").
func (c *Client) Down(ctx context.Context, member string) error {
	return c.do(ctx, http.MethodPost, "/v1/admin/down", struct {
		Member string `json:"member"`
	}{member}, nil)
}

// Events returns events after seq, and the newest sequence number.
func (c *Client) Events(ctx context.Context, after uint64, limit int) ([]Event, uint64, error) {
	var r struct {
		Events []Event `json:"events"`
		Last   uint64  `json:"last"`
	}
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}}
	err := c.do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &r)
	return r.Events, r.Last, err
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return &Error{Outcome: Fail, Err: fmt.Errorf("encode request: %w", err)}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return &Error{Outcome: Fail, Err: fmt.Errorf("build request: %w", err)}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return &Error{Outcome: transportOutcome(err), Err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return &Error{Status: res.StatusCode, Outcome: Unknown, Err: fmt.Errorf("read reply: %w", err)}
	}
	if res.StatusCode/100 != 2 {
		e := &Error{Status: res.StatusCode, Outcome: Unknown}
		var eb struct {
			Error    string   `json:"error"`
			Code     string   `json:"code"`
			Outcome  string   `json:"outcome"`
			ServedBy ServedBy `json:"served_by"`
		}
		if json.Unmarshal(data, &eb) == nil {
			e.Code, e.Message, e.ServedBy = eb.Code, eb.Error, eb.ServedBy
			if eb.Outcome == string(Fail) {
				e.Outcome = Fail
			}
		} else {
			e.Message = string(data)
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		// A 2xx whose body we cannot read: the request took effect, but we
		// do not know its result.
		return &Error{Status: res.StatusCode, Outcome: Unknown, Err: fmt.Errorf("decode reply: %w", err)}
	}
	return nil
}

// transportOutcome classifies a request that got no reply. A failed dial
// (connection refused: the node is down) means no byte of the request
// left: it certainly had no effect. Anything later (reset, timeout) may
// have reached the node.
func transportOutcome(err error) Outcome {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return Fail
	}
	return Unknown
}

// EntityRequest is POST /v1/entity.
type EntityRequest struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Op      string          `json:"op"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Sender  string          `json:"sender,omitempty"`
	Mode    string          `json:"mode,omitempty"`
}

// EntityReply is the answer to an ask.
type EntityReply struct {
	ServedBy          ServedBy        `json:"served_by"`
	Type              string          `json:"type"`
	ID                string          `json:"id"`
	Shard             string          `json:"shard"`
	Node              string          `json:"node"`
	EntityIncarnation string          `json:"entity_incarnation"`
	Result            json.RawMessage `json:"result"`
}

// Entity sends one entity operation and waits for its reply.
func (c *Client) Entity(ctx context.Context, req EntityRequest) (EntityReply, error) {
	var r EntityReply
	return r, c.do(ctx, http.MethodPost, "/v1/entity", req, &r)
}

// Tell sends a fire-and-forget entity message; nil means the node accepted
// it (delivery is at most once).
func (c *Client) Tell(ctx context.Context, req EntityRequest) (ServedBy, error) {
	req.Mode = "tell"
	var r struct {
		ServedBy ServedBy `json:"served_by"`
	}
	err := c.do(ctx, http.MethodPost, "/v1/entity", req, &r)
	return r.ServedBy, err
}

// Capabilities is GET /v1/capabilities.
type Capabilities struct {
	Protocol       string   `json:"protocol"`
	Implementation string   `json:"implementation"`
	Capabilities   []string `json:"capabilities"`
	Singletons     []string `json:"singletons"`
	EntityTypes    []string `json:"entity_types"`
	Bugs           []string `json:"bugs"`
}

// Capabilities reads what the node declares it supports.
func (c *Client) Capabilities(ctx context.Context) (Capabilities, error) {
	var r Capabilities
	return r, c.do(ctx, http.MethodGet, "/v1/capabilities", nil, &r)
}

// ErrExited: the node's process or container exited before it was ready.
var ErrExited = errors.New("exited before it was ready")

// WaitReady polls the node's status until it reports itself ready, the
// node exits (exited closes), timeout passes or ctx ends.
func (c *Client) WaitReady(ctx context.Context, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Status(rctx)
		cancel()
		if err == nil && st.Ready {
			return nil
		}
		select {
		case <-exited:
			return ErrExited
		default:
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("status %s", st.Self.Status)
			}
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Clock is the node's clock skew (POST/GET /v1/admin/clock).
type Clock struct {
	OffsetMs float64 `json:"offset_ms"`
	Drift    float64 `json:"drift"`
	// Now is the node's clock reading (only in replies).
	Now time.Time `json:"now,omitzero"`
}

// SetClock replaces the node's clock skew: offset added to real time and a
// drift rate (0.01: 1 % fast). Zero values reset it to real time.
func (c *Client) SetClock(ctx context.Context, offset time.Duration, drift float64) (Clock, error) {
	req := struct {
		OffsetMs float64 `json:"offset_ms"`
		Drift    float64 `json:"drift"`
	}{float64(offset) / float64(time.Millisecond), drift}
	var r Clock
	return r, c.do(ctx, http.MethodPost, "/v1/admin/clock", req, &r)
}

// GetClock reads the node's clock skew.
func (c *Client) GetClock(ctx context.Context) (Clock, error) {
	var r Clock
	return r, c.do(ctx, http.MethodGet, "/v1/admin/clock", nil, &r)
}

// Filter is the node's in-process packet filter (/v1/admin/filter): peers
// named by their gossip address.
type Filter struct {
	DropIn  []string `json:"drop_in"`
	DropOut []string `json:"drop_out"`
}

// SetFilter replaces the node's in-process packet filter; an empty Filter
// heals it.
func (c *Client) SetFilter(ctx context.Context, f Filter) (Filter, error) {
	if f.DropIn == nil {
		f.DropIn = []string{}
	}
	if f.DropOut == nil {
		f.DropOut = []string{}
	}
	var r Filter
	return r, c.do(ctx, http.MethodPost, "/v1/admin/filter", f, &r)
}

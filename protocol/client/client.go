// Package client is the harness's client for shardtest/1 (package
// protocol, docs/protocol.md): one Client per node, every request with a
// context, every error a *protocol.Error whose outcome says whether the
// request certainly had no effect. It is written from the protocol, not
// from the reference node: the protocol is the only seam between the
// harness and an implementation under test.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// maxReply bounds a reply body read.
const maxReply = 64 << 20

// Client talks to one node.
type Client struct {
	base string
	http *http.Client
}

// New returns a client for the node at addr (host:port); hc nil is a
// default client.
func New(addr string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	return &Client{base: "http://" + addr, http: hc}
}

// Addr is the node's address.
func (c *Client) Addr() string { return c.base[len("http://"):] }

// Capabilities reads what the node declares it supports.
func (c *Client) Capabilities(ctx context.Context) (protocol.Capabilities, error) {
	var r protocol.Capabilities
	return r, c.Do(ctx, http.MethodGet, "/v1/capabilities", nil, &r)
}

// Status reads the node's status.
func (c *Client) Status(ctx context.Context) (protocol.Status, error) {
	var s protocol.Status
	return s, c.Do(ctx, http.MethodGet, "/v1/status", nil, &s)
}

// Health reads GET /v1/health.
func (c *Client) Health(ctx context.Context) (protocol.Health, error) {
	var h protocol.Health
	return h, c.Do(ctx, http.MethodGet, "/v1/health", nil, &h)
}

// NextID asks the node for an id from the id-generator singleton.
func (c *Client) NextID(ctx context.Context) (protocol.NextID, error) {
	var r protocol.NextID
	return r, c.Do(ctx, http.MethodPost, "/v1/singleton/next-id", struct{}{}, &r)
}

// Entity sends one entity operation (an ask) and waits for its reply.
func (c *Client) Entity(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
	var r protocol.EntityReply
	return r, c.Do(ctx, http.MethodPost, "/v1/entity", req, &r)
}

// Tell sends a fire-and-forget entity message; nil means the node accepted
// it (delivery is at most once).
func (c *Client) Tell(ctx context.Context, req protocol.EntityRequest) (protocol.ServedBy, error) {
	req.Mode = protocol.ModeTell
	var r protocol.TellReply
	err := c.Do(ctx, http.MethodPost, "/v1/entity", req, &r)
	return r.ServedBy, err
}

// Leave asks the node to leave gracefully.
func (c *Client) Leave(ctx context.Context) error {
	return c.Do(ctx, http.MethodPost, "/v1/admin/leave", struct{}{}, nil)
}

// Down downs member (a uid, or a node name for its current member) on an
// operator's word (capability down).
func (c *Client) Down(ctx context.Context, member string) (protocol.DownReply, error) {
	var r protocol.DownReply
	return r, c.Do(ctx, http.MethodPost, "/v1/admin/down", protocol.DownRequest{Member: member}, &r)
}

// Events returns events after seq (at most limit), waiting up to wait for
// one if there is none yet (long poll; 0: answer at once).
func (c *Client) Events(ctx context.Context, after uint64, limit int, wait time.Duration) (protocol.EventsReply, error) {
	var r protocol.EventsReply
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}}
	if wait > 0 {
		q.Set("wait_ms", strconv.FormatInt(wait.Milliseconds(), 10))
	}
	err := c.Do(ctx, http.MethodGet, "/v1/events?"+q.Encode(), nil, &r)
	return r, err
}

// SetClock replaces the node's clock skew: offset added to real time and a
// drift rate (0.01: 1 % fast). Zero values reset it to real time.
func (c *Client) SetClock(ctx context.Context, offset time.Duration, drift float64) (protocol.ClockReply, error) {
	req := protocol.ClockRequest{OffsetMS: float64(offset) / float64(time.Millisecond), Drift: drift}
	var r protocol.ClockReply
	return r, c.Do(ctx, http.MethodPost, "/v1/admin/clock", req, &r)
}

// GetClock reads the node's clock skew.
func (c *Client) GetClock(ctx context.Context) (protocol.ClockReply, error) {
	var r protocol.ClockReply
	return r, c.Do(ctx, http.MethodGet, "/v1/admin/clock", nil, &r)
}

// SetFilter replaces the node's in-process packet filter; an empty Filter
// heals it.
func (c *Client) SetFilter(ctx context.Context, f protocol.Filter) (protocol.FilterReply, error) {
	if f.DropIn == nil {
		f.DropIn = []string{}
	}
	if f.DropOut == nil {
		f.DropOut = []string{}
	}
	var r protocol.FilterReply
	return r, c.Do(ctx, http.MethodPost, "/v1/admin/filter", f, &r)
}

// Do sends one request (body nil: none; otherwise encoded as JSON) and
// decodes a 2xx reply into out (nil: ignored). Every error is a
// *protocol.Error.
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var raw []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return &protocol.Error{Outcome: protocol.Fail, Err: fmt.Errorf("encode request: %w", err)}
		}
		raw = b
	}
	_, data, err := c.DoRaw(ctx, method, path, raw)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		// A 2xx whose body we cannot read: the request took effect, but
		// we do not know its result.
		return &protocol.Error{Status: http.StatusOK, Outcome: protocol.Unknown, Err: fmt.Errorf("decode reply: %w", err)}
	}
	return nil
}

// DoRaw sends body as it is (nil: no body) and returns the reply's headers
// and body when the status is 2xx; otherwise a *protocol.Error. conform
// uses it to send what a well-behaved client never would.
func (c *Client) DoRaw(ctx context.Context, method, path string, body []byte) (http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, nil, &protocol.Error{Outcome: protocol.Fail, Err: fmt.Errorf("build request: %w", err)}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return nil, nil, &protocol.Error{Outcome: protocol.TransportOutcome(err), Err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxReply))
	if err != nil {
		return res.Header, nil, &protocol.Error{Status: res.StatusCode, Outcome: protocol.Unknown, Err: fmt.Errorf("read reply: %w", err)}
	}
	if res.StatusCode/100 != 2 {
		return res.Header, data, protocol.ReplyError(res.StatusCode, data)
	}
	return res.Header, data, nil
}

// ErrExited: the node's process or container exited before it was ready.
var ErrExited = errors.New("exited before it was ready")

// WaitReady polls the node's health (which every node serves, whatever
// it declares; its status where it has no health endpoint) until it
// reports itself ready, the node exits (exited closes), timeout passes or
// ctx ends.
func (c *Client) WaitReady(ctx context.Context, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	useStatus := false
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		var st protocol.Status
		var err error
		if !useStatus {
			var h protocol.Health
			h, err = c.Health(rctx)
			var pe *protocol.Error
			if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
				useStatus = true
			}
			st.Ready, st.Self.Status = h.Ready, h.Status
		}
		if useStatus {
			st, err = c.Status(rctx)
		}
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

package journal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// Client defaults (ClientOptions' zero values).
const (
	// DefaultTimeout bounds each attempt.
	DefaultTimeout = 5 * time.Second
	// DefaultRetries is how many times a failed attempt is repeated when
	// that is safe.
	DefaultRetries = 3
	// DefaultBackoff is the pause before the first retry; it doubles.
	DefaultBackoff = 200 * time.Millisecond
	// maxErrorBody bounds how much of an error response is read.
	maxErrorBody = 64 << 10
)

// ClientOptions configure NewClient. Zero values mean the defaults.
type ClientOptions struct {
	// Timeout bounds each attempt (default 5s).
	Timeout time.Duration
	// Retries is how many times a failed attempt is repeated when that is
	// safe (default 3; negative: never). Replay, Highest and Fence are
	// retried on any transport error or 5xx (a Fence carries a token, so
	// its repeats return the same epoch; see OnceFencer). Append is
	// retried only when the connection could not be established, because
	// once the request has been sent its outcome is unknown and only the
	// caller can resolve it.
	Retries int
	// Backoff is the pause before the first retry; it doubles each retry
	// (default 200ms).
	Backoff time.Duration
	// HTTPClient is used for requests (default: a private client).
	HTTPClient *http.Client
}

// Client is a Journal reached over the HTTP/JSON API served by NewServer.
// It is safe for concurrent use.
type Client struct {
	base    string
	http    *http.Client
	timeout time.Duration
	retries int
	backoff time.Duration
}

var _ Journal = (*Client)(nil)

// NewClient returns a client for the journal server at baseURL
// (e.g. "http://127.0.0.1:7400").
func NewClient(baseURL string, opts ClientOptions) *Client {
	c := &Client{
		base:    strings.TrimRight(baseURL, "/"),
		http:    opts.HTTPClient,
		timeout: opts.Timeout,
		retries: opts.Retries,
		backoff: opts.Backoff,
	}
	if c.http == nil {
		// A private transport, so CloseIdleConnections affects only us.
		c.http = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	switch {
	case c.retries == 0:
		c.retries = DefaultRetries
	case c.retries < 0:
		c.retries = 0
	}
	if c.backoff <= 0 {
		c.backoff = DefaultBackoff
	}
	return c
}

// CloseIdleConnections releases pooled connections.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// Append implements Journal. An error wrapping ErrUnavailable means the
// outcome is unknown: re-read (Highest/Replay) before writing again.
func (c *Client) Append(ctx context.Context, pid string, expectedSeq int64, epoch uint64, data [][]byte) (int64, error) {
	// Validate locally: saves a round trip and avoids shipping up to
	// 40 GiB only to have it refused.
	if err := ValidateAppend(pid, expectedSeq, data); err != nil {
		return 0, err
	}
	req := AppendRequest{PID: pid, ExpectedSeq: &expectedSeq, Epoch: epoch, Events: data}
	var resp AppendReply
	if err := c.call(ctx, PathAppend, req, &resp, retryDialOnly); err != nil {
		return 0, fmt.Errorf("append %q: %w", pid, err)
	}
	return resp.LastSeq, nil
}

// Replay implements Journal.
func (c *Client) Replay(ctx context.Context, pid string, from int64, max int) ([]Event, error) {
	if err := ValidatePID(pid); err != nil {
		return nil, err
	}
	var resp ReplayReply
	if err := c.call(ctx, PathReplay, ReplayRequest{PID: pid, From: from, Max: max}, &resp, retrySafe); err != nil {
		return nil, fmt.Errorf("replay %q: %w", pid, err)
	}
	if resp.Events == nil {
		resp.Events = []Event{}
	}
	return resp.Events, nil
}

// Fence implements Journal.
func (c *Client) Fence(ctx context.Context, pid string) (uint64, int64, error) {
	if err := ValidatePID(pid); err != nil {
		return 0, 0, err
	}
	// One token for this call, on every attempt: if an attempt is applied
	// but its answer lost, its retry (or the lost attempt itself, arriving
	// late) gets the same epoch back instead of fencing this very caller.
	var resp FenceReply
	if err := c.call(ctx, PathFence, FenceRequest{PID: pid, Token: rand.Text()}, &resp, retrySafe); err != nil {
		return 0, 0, fmt.Errorf("fence %q: %w", pid, err)
	}
	return resp.Epoch, resp.Highest, nil
}

// Highest implements Journal.
func (c *Client) Highest(ctx context.Context, pid string) (int64, error) {
	if err := ValidatePID(pid); err != nil {
		return 0, err
	}
	var resp HighestReply
	if err := c.call(ctx, PathHighest, PIDRequest{PID: pid}, &resp, retrySafe); err != nil {
		return 0, fmt.Errorf("highest %q: %w", pid, err)
	}
	return resp.Highest, nil
}

// Health checks that the server answers.
func (c *Client) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+PathHealth, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: health: %w", ErrUnavailable, err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: health: status %s", ErrUnavailable, resp.Status)
	}
	return nil
}

// retryPolicy decides whether a failed attempt may be repeated.
type retryPolicy int

const (
	// retrySafe: the call has no effect a repeat could duplicate.
	retrySafe retryPolicy = iota
	// retryDialOnly: only when the request certainly never left.
	retryDialOnly
)

// attemptError is the failure of one attempt, with whether a retry may help.
type attemptError struct {
	err error
	// notSent: the request never reached the server.
	notSent bool
	// transient: a later attempt could succeed (transport error, 5xx).
	transient bool
}

// call posts req to path and decodes a 200 answer into resp, retrying
// according to policy. Errors wrap one of the package's sentinels.
func (c *Client) call(ctx context.Context, path string, req, resp any, policy retryPolicy) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: encode request: %w", ErrInvalid, err)
	}
	backoff := c.backoff
	for attempt := 0; ; attempt++ {
		aerr := c.attempt(ctx, path, body, resp)
		if aerr == nil {
			return nil
		}
		retry := aerr.transient && (policy == retrySafe || aerr.notSent)
		if !retry || attempt >= c.retries || ctx.Err() != nil {
			return aerr.err
		}
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return aerr.err
		case <-timer.C:
		}
		backoff *= 2
	}
}

// attempt performs one request under the per-attempt timeout.
func (c *Client) attempt(ctx context.Context, path string, body []byte, resp any) *attemptError {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		// A bad base URL: nothing was sent, and nothing will be.
		return &attemptError{err: fmt.Errorf("%w: build request: %w", ErrUnavailable, err)}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := c.http.Do(hreq)
	if err != nil {
		return &attemptError{
			err:       fmt.Errorf("%w: %w", ErrUnavailable, err),
			notSent:   isDialError(err),
			transient: true,
		}
	}
	defer drainClose(hresp.Body)
	if hresp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(hresp.Body).Decode(resp); err != nil {
			// The server acted but we cannot tell what it said.
			return &attemptError{err: fmt.Errorf("%w: decode response: %w", ErrUnavailable, err), transient: true}
		}
		return nil
	}
	return statusError(hresp)
}

// statusError maps a non-200 answer to a sentinel. Only answers that are
// recognisably from the journal server and say "fail" are definite; a
// proxy's 4xx or any 5xx leaves the outcome unknown. The outcome is the
// server's word (it answers with protocol's table, ScopeJournal, and knows
// the one case that table's row tells apart); the code only picks the
// sentinel.
func statusError(resp *http.Response) *attemptError {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e protocol.ErrorBody
	if json.Unmarshal(raw, &e) != nil || e.Code == "" {
		e = protocol.ErrorBody{Error: strings.TrimSpace(string(raw))}
	}
	msg := fmt.Sprintf("status %d: %s", resp.StatusCode, e.Error)
	if resp.StatusCode < 500 && e.Outcome == protocol.Fail {
		switch e.Code {
		case protocol.CodeSeqConflict:
			return &attemptError{err: fmt.Errorf("%w: %s", ErrSeqConflict, msg)}
		case protocol.CodeFenced:
			return &attemptError{err: fmt.Errorf("%w: %s", ErrFenced, msg)}
		default:
			return &attemptError{err: fmt.Errorf("%w: %s", ErrInvalid, msg)}
		}
	}
	return &attemptError{err: fmt.Errorf("%w: %s", ErrUnavailable, msg), transient: resp.StatusCode >= 500}
}

// isDialError reports whether err happened while connecting, i.e. before
// any byte of the request was written.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// drainClose reads a little of what is left so the connection can be
// reused, then closes the body.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxErrorBody))
	_ = body.Close()
}

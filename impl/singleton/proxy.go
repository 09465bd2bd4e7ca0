package singleton

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
)

// Proxy defaults.
const (
	DefaultProxyBufferSize    = 1000
	DefaultProxyRetryInterval = 200 * time.Millisecond
)

// ProxyConfig configures a Proxy.
type ProxyConfig struct {
	// Name and Role name the singleton as its managers do.
	Name, Role string
	// BufferSize bounds the requests waiting for the singleton; when it is
	// reached the oldest waiting one is dropped. Default 1000.
	BufferSize int
	// RetryInterval: a waiting request is retried at every membership
	// change and at least this often. Default 200ms.
	RetryInterval time.Duration
}

// ProxyDeps are what a Proxy uses of its node.
type ProxyDeps struct {
	Membership cluster.Membership
	Peers      peer.Caller
	Clock      clock.Clock
	// Events: nil, a private log.
	Events *kit.EventLog
	// Logger: nil discards.
	Logger *slog.Logger
	// Local is this node's manager of the singleton, if any: requests for
	// this member go to it directly.
	Local *Manager
}

// ProxyStatus is a proxy's state as the node protocol shows it.
type ProxyStatus struct {
	Name string `json:"name"`
	// Buffered: requests waiting now.
	Buffered int `json:"buffered"`
	// Dropped: requests dropped from a full buffer, in total.
	Dropped uint64 `json:"dropped"`
	// Forwarded: attempts sent to a manager (local or remote), in total.
	Forwarded uint64 `json:"forwarded"`
	// Target is the member the singleton is looked for on now.
	Target string `json:"target,omitempty"`
}

// Proxy is the ClusterSingletonProxy: it routes requests to the singleton
// wherever it runs.
type Proxy struct {
	cfg  ProxyConfig
	d    ProxyDeps
	log  *slog.Logger
	path string

	mu       sync.Mutex
	buffer   *list.List // *waiter, in the order they first waited
	nWaiting int        // waiters not in flight

	dropped   atomic.Uint64
	forwarded atomic.Uint64
}

type waiter struct {
	elem     *list.Element
	inFlight bool
	gone     bool
	dropped  chan struct{}
}

// NewProxy validates cfg and returns a proxy.
func NewProxy(cfg ProxyConfig, d ProxyDeps) (*Proxy, error) {
	if !validName(cfg.Name) {
		return nil, fmt.Errorf("singleton proxy: name %q must match [a-z0-9-]{1,64}", cfg.Name)
	}
	if cfg.BufferSize < 0 || cfg.RetryInterval < 0 {
		return nil, fmt.Errorf("singleton proxy %s: BufferSize and RetryInterval must not be negative", cfg.Name)
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = DefaultProxyBufferSize
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = DefaultProxyRetryInterval
	}
	switch {
	case d.Membership == nil:
		return nil, errors.New("singleton proxy: ProxyDeps.Membership is required")
	case d.Peers == nil:
		return nil, errors.New("singleton proxy: ProxyDeps.Peers is required")
	case d.Clock == nil:
		return nil, errors.New("singleton proxy: ProxyDeps.Clock is required")
	}
	if d.Local != nil && d.Local.cfg.Name != cfg.Name {
		return nil, fmt.Errorf("singleton proxy %s: local manager is for %q", cfg.Name, d.Local.cfg.Name)
	}
	if d.Events == nil {
		d.Events = kit.NewEventLog(d.Clock.Now, 0)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return &Proxy{
		cfg:    cfg,
		d:      d,
		log:    d.Logger.With("singleton_proxy", cfg.Name),
		path:   routePrefix + cfg.Name + "/" + opRequest,
		buffer: list.New(),
	}, nil
}

// Status returns the proxy's counters.
func (p *Proxy) Status() ProxyStatus {
	p.mu.Lock()
	n := p.nWaiting
	p.mu.Unlock()
	st := ProxyStatus{Name: p.cfg.Name, Buffered: n, Dropped: p.dropped.Load(), Forwarded: p.forwarded.Load()}
	if o, ok := p.d.Membership.Snapshot().Oldest(p.cfg.Role); ok {
		st.Target = o.UID()
	}
	return st
}

// Call sends req to the singleton and returns its reply. While no instance
// is known to run (no oldest, or its manager answers that none runs), the
// request waits in the buffer and is retried at every membership change and
// every RetryInterval until ctx is done. A request is never resent after an
// attempt with an unknown outcome: that error wraps ErrUnknownOutcome. Use
// IsDefinite to tell whether a failed request certainly had no effect.
func (p *Proxy) Call(ctx context.Context, req Request) (json.RawMessage, error) {
	if req.Op == "" {
		return nil, fmt.Errorf("%w: empty op", ErrBadRequest)
	}
	var w *waiter
	defer func() {
		if w != nil {
			p.leave(w)
		}
	}()
	var last error
	for {
		if err := ctx.Err(); err != nil {
			return nil, p.expired(err, last)
		}
		changed := p.d.Membership.Changed()
		snap := p.d.Membership.Snapshot()
		if target, ok := snap.Oldest(p.cfg.Role); ok {
			if w != nil && !p.takeOff(w) {
				return nil, p.droppedErr()
			}
			res, retry, err := p.attempt(ctx, snap, target, req)
			if !retry {
				return res, err
			}
			last = err
			p.log.Debug("singleton not running at target; waiting", "target", target.UID(), "err", err)
		}
		if w == nil {
			w = p.enqueue()
		} else if !p.putBack(w) {
			return nil, p.droppedErr()
		}
		t := p.d.Clock.NewTimer(p.cfg.RetryInterval)
		select {
		case <-w.dropped:
			t.Stop()
			return nil, p.droppedErr()
		case <-changed:
		case <-t.C():
		case <-ctx.Done():
		}
		t.Stop()
	}
}

func (p *Proxy) droppedErr() error {
	return fmt.Errorf("%w (buffer size %d)", ErrDropped, p.cfg.BufferSize)
}

// expired: ctx ended while the request was only waiting; every attempt so
// far was a definite "not running", so nothing happened.
func (p *Proxy) expired(ctxErr, last error) error {
	if last != nil {
		return fmt.Errorf("%w: no instance took the request before the deadline (last: %v): %w", ErrNotRunning, last, ctxErr)
	}
	return fmt.Errorf("%w: no instance known before the deadline: %w", ErrNotRunning, ctxErr)
}

// attempt sends req once to the manager on target.
func (p *Proxy) attempt(ctx context.Context, snap cluster.Snapshot, target cluster.MemberState, req Request) (json.RawMessage, bool, error) {
	p.forwarded.Add(1)
	if p.d.Local != nil && target.UID() == snap.Self.UID() {
		res, err := p.d.Local.Handle(ctx, req)
		switch {
		case err == nil:
			return res, false, nil
		case retryable(err):
			return nil, true, err
		case IsDefinite(err), errors.Is(err, ErrUnknownOutcome):
			return nil, false, err
		}
		return nil, false, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	var res json.RawMessage
	err := p.d.Peers.Call(ctx, target.Target(), p.path, req, &res)
	if err == nil {
		return res, false, nil
	}
	// A request that was never written (cut by the packet filter,
	// refused, or the deadline passed while connecting): the remote did
	// nothing.
	if errors.Is(err, peer.ErrNotSent) {
		return nil, true, fmt.Errorf("%w: request never sent: %w", ErrNotRunning, err)
	}
	retry, out := classifyRemote(err)
	return nil, retry, out
}

// enqueue adds a new waiter, dropping the oldest waiting one if the buffer
// is full.
func (p *Proxy) enqueue() *waiter {
	w := &waiter{dropped: make(chan struct{})}
	p.mu.Lock()
	w.elem = p.buffer.PushBack(w)
	p.nWaiting++
	p.enforceLocked()
	p.mu.Unlock()
	return w
}

// takeOff marks w in flight; false if it was dropped.
func (p *Proxy) takeOff(w *waiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.gone {
		return false
	}
	if !w.inFlight {
		w.inFlight = true
		p.nWaiting--
	}
	return true
}

// putBack makes an in-flight waiter wait again; false if it was dropped.
func (p *Proxy) putBack(w *waiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.gone {
		return false
	}
	if w.inFlight {
		w.inFlight = false
		p.nWaiting++
		p.enforceLocked()
	}
	return !w.gone
}

// leave removes a finished waiter.
func (p *Proxy) leave(w *waiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.gone {
		return
	}
	w.gone = true
	p.buffer.Remove(w.elem)
	if !w.inFlight {
		p.nWaiting--
	}
}

func (p *Proxy) enforceLocked() {
	for p.nWaiting > p.cfg.BufferSize {
		var victim *waiter
		for e := p.buffer.Front(); e != nil; e = e.Next() {
			if w := e.Value.(*waiter); !w.inFlight {
				victim = w
				break
			}
		}
		if victim == nil {
			return
		}
		victim.gone = true
		p.buffer.Remove(victim.elem)
		p.nWaiting--
		close(victim.dropped)
		total := p.dropped.Add(1)
		p.log.Warn("singleton proxy buffer full; dropped the oldest waiting request", "buffer_size", p.cfg.BufferSize, "dropped_total", total)
		p.d.Events.Append(protocol.Event{Type: protocol.EventProxyDropped, Singleton: p.cfg.Name,
			Detail: fmt.Sprintf("buffer of %d full; dropped the oldest waiting request (%d in total)", p.cfg.BufferSize, total)})
	}
}

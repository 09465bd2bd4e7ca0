package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol/kit"
	"log/slog"
	"sync"
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
// wherever it runs. Every decision — where a request goes, when it is
// tried again, which waiting request a full buffer drops — is its
// ProxyState's; Proxy drives that machine under its lock, and each caller's
// goroutine carries out the effects for its own request (the attempt, its
// timer, its end).
type Proxy struct {
	cfg  ProxyConfig
	d    ProxyDeps
	log  *slog.Logger
	path string

	mu      sync.Mutex
	st      *ProxyState
	viewed  bool
	version uint64 // of the last view stepped
	nextID  uint64
	calls   map[uint64]*proxyWaiter
}

// proxyWaiter is one request's share of the machine's effects, and the
// signal that it has some.
type proxyWaiter struct {
	effects []ProxyEffect
	wake    chan struct{}
}

// NewProxy validates cfg and returns a proxy.
func NewProxy(cfg ProxyConfig, d ProxyDeps) (*Proxy, error) {
	cfg, err := ProxyConfigDefaults(cfg)
	if err != nil {
		return nil, err
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
		cfg:   cfg,
		d:     d,
		log:   d.Logger.With("singleton_proxy", cfg.Name),
		path:  routePrefix + cfg.Name + "/" + opRequest,
		st:    NewProxyState(cfg),
		calls: map[uint64]*proxyWaiter{},
	}, nil
}

// Status returns the proxy's counters.
func (p *Proxy) Status() ProxyStatus {
	p.mu.Lock()
	st := ProxyStatus{Name: p.cfg.Name, Buffered: p.st.Waiting(), Dropped: p.st.Dropped(), Forwarded: p.st.Forwarded()}
	p.mu.Unlock()
	if o, ok := p.d.Membership.Snapshot().Oldest(p.cfg.Role); ok {
		st.Target = o.UID()
	}
	return st
}

// stepLocked steps the membership's current view first if it is new, then
// in (if any), and hands each request its effects.
func (p *Proxy) stepLocked(in ProxyInput) {
	if snap := p.d.Membership.Snapshot(); !p.viewed || snap.Version != p.version {
		p.viewed, p.version = true, snap.Version
		p.dispatchLocked(p.st.Step(PxView{Snapshot: snap}))
	}
	if in != nil {
		p.dispatchLocked(p.st.Step(in))
	}
}

func (p *Proxy) dispatchLocked(effs []ProxyEffect) {
	for _, e := range effs {
		var id uint64
		switch e := e.(type) {
		case PxEmit:
			p.log.Warn("singleton proxy buffer full; dropped the oldest waiting request", "buffer_size", p.cfg.BufferSize, "dropped_total", p.st.Dropped())
			p.d.Events.Append(e.Event)
			continue
		case PxAttempt:
			id = e.ID
		case PxArm:
			id = e.ID
		case PxFail:
			id = e.ID
		}
		if w := p.calls[id]; w != nil {
			w.effects = append(w.effects, e)
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (p *Proxy) step(in ProxyInput) {
	p.mu.Lock()
	p.stepLocked(in)
	p.mu.Unlock()
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
	w := &proxyWaiter{wake: make(chan struct{}, 1)}
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	p.calls[id] = w
	p.stepLocked(PxCall{ID: id})
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.calls, id)
		p.stepLocked(PxDone{ID: id})
		p.mu.Unlock()
	}()
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		changed := p.d.Membership.Changed()
		p.mu.Lock()
		effs := w.effects
		w.effects = nil
		p.mu.Unlock()
		for _, e := range effs {
			switch e := e.(type) {
			case PxAttempt:
				res, retry, err := p.attempt(ctx, e.Target, req)
				if !retry {
					return res, err
				}
				p.log.Debug("singleton not running at target; waiting", "target", e.Target.UID(), "err", err)
				p.step(PxNotRunning{ID: id, Err: err})
			case PxArm:
				if timer != nil {
					timer.Stop()
				}
				timer = p.d.Clock.NewTimer(e.After)
			case PxFail:
				return nil, e.Err
			}
		}
		if len(effs) > 0 {
			continue
		}
		var fired <-chan time.Time
		if timer != nil {
			fired = timer.C()
		}
		select {
		case <-w.wake:
		case <-changed:
			p.step(nil)
		case <-fired:
			timer = nil
			p.step(PxTimer{ID: id})
		case <-ctx.Done():
			p.step(PxExpired{ID: id, Err: ctx.Err()})
			p.mu.Lock()
			pending := len(w.effects)
			p.mu.Unlock()
			if pending == 0 {
				// Already forgotten (dropped): its PxFail was taken.
				return nil, expiredErr(ctx.Err(), nil)
			}
		}
	}
}

// attempt sends req once to the manager on target.
func (p *Proxy) attempt(ctx context.Context, target cluster.MemberState, req Request) (json.RawMessage, bool, error) {
	p.mu.Lock()
	self := p.st.View().Self.UID()
	p.mu.Unlock()
	if p.d.Local != nil && target.UID() == self {
		res, err := p.d.Local.Handle(ctx, req)
		retry, out := LocalOutcome(err)
		return res, retry, out
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

// LocalOutcome classifies what this member's own manager answered an
// attempt: whether to try again where the singleton runs next, and the
// error to end the request with otherwise (nil: it succeeded).
func LocalOutcome(err error) (retry bool, out error) {
	switch {
	case err == nil:
		return false, nil
	case retryable(err):
		return true, err
	case IsDefinite(err), errors.Is(err, ErrUnknownOutcome):
		return false, err
	}
	return false, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
}

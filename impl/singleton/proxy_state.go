package singleton

import (
	"fmt"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/protocol"
)

// ProxyState is the decisions of a singleton proxy (Akka's
// ClusterSingletonProxy) as a state machine: which member each request is
// sent to, when a request that found no instance is tried again, and which
// waiting request a full buffer drops. It does no I/O, reads no clock and
// starts nothing: Proxy drives it over the real seams, a simulation over
// its own.
//
// A request (a call, by the ID its driver gives it) is sent to the oldest
// Up member with the role at once if there is one; if there is none, or
// that member's manager says no instance runs there, it waits — in a
// buffer bounded by BufferSize, the oldest waiting one dropped when it is
// full — and is tried again at every new view and at least every
// RetryInterval, until its caller's deadline.
type ProxyState struct {
	cfg   ProxyConfig
	snap  cluster.Snapshot
	calls map[uint64]*proxyCall
	// buffer: the calls that have waited, in the order they first did.
	buffer    []uint64
	waiting   int // calls in buffer that are not in flight
	dropped   uint64
	forwarded uint64
	out       []ProxyEffect
}

type proxyCall struct {
	inFlight, buffered bool
	last               error // the last attempt's "not running"
}

// ProxyInput is what a ProxyState steps on.
type ProxyInput interface{ proxyInput() }

// PxCall: a new request, ID chosen by the driver (unique while it lives).
type PxCall struct{ ID uint64 }

// PxView: a new view of the cluster.
type PxView struct{ Snapshot cluster.Snapshot }

// PxNotRunning: the attempt of request ID found no instance (Err says
// why): it waits to be tried again.
type PxNotRunning struct {
	ID  uint64
	Err error
}

// PxTimer: request ID's retry timer (PxArm) fired.
type PxTimer struct{ ID uint64 }

// PxExpired: request ID's caller gave up (Err: why, its context's error)
// while the request waited.
type PxExpired struct {
	ID  uint64
	Err error
}

// PxDone: request ID has ended (answered, failed, or given up on): forget
// it.
type PxDone struct{ ID uint64 }

func (PxCall) proxyInput()       {}
func (PxView) proxyInput()       {}
func (PxNotRunning) proxyInput() {}
func (PxTimer) proxyInput()      {}
func (PxExpired) proxyInput()    {}
func (PxDone) proxyInput()       {}

// ProxyEffect is what a Step asks the driver to do.
type ProxyEffect interface {
	proxyEffect()
	String() string
}

// PxAttempt: send request ID to the manager on Target (this member's own
// manager if Target is this member); step the outcome as PxNotRunning, or
// end the request with it and step PxDone.
type PxAttempt struct {
	ID     uint64
	Target cluster.MemberState
}

// PxArm: (re)arm request ID's retry timer to fire After from now.
type PxArm struct {
	ID    uint64
	After time.Duration
}

// PxFail: end request ID with Err (dropped from a full buffer, or expired
// while waiting: either way nothing was done).
type PxFail struct {
	ID  uint64
	Err error
}

// PxEmit: log a protocol event.
type PxEmit struct{ Event protocol.Event }

func (PxAttempt) proxyEffect() {}
func (PxArm) proxyEffect()     {}
func (PxFail) proxyEffect()    {}
func (PxEmit) proxyEffect()    {}

func (e PxAttempt) String() string {
	return fmt.Sprintf("attempt %d to=%s", e.ID, e.Target.UID())
}
func (e PxArm) String() string  { return fmt.Sprintf("arm %d %v", e.ID, e.After) }
func (e PxFail) String() string { return fmt.Sprintf("fail %d: %v", e.ID, e.Err) }
func (e PxEmit) String() string { return fmt.Sprintf("event %s %q", e.Event.Type, e.Event.Detail) }

// NewProxyState is a proxy with no view yet; cfg must have its defaults
// (NewProxy fills them in).
func NewProxyState(cfg ProxyConfig) *ProxyState {
	return &ProxyState{cfg: cfg, calls: map[uint64]*proxyCall{}}
}

// ProxyConfigDefaults fills in cfg's defaults, or says why it is invalid.
func ProxyConfigDefaults(cfg ProxyConfig) (ProxyConfig, error) {
	if !validName(cfg.Name) {
		return cfg, fmt.Errorf("singleton proxy: name %q must match [a-z0-9-]{1,64}", cfg.Name)
	}
	if cfg.BufferSize < 0 || cfg.RetryInterval < 0 {
		return cfg, fmt.Errorf("singleton proxy %s: BufferSize and RetryInterval must not be negative", cfg.Name)
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = DefaultProxyBufferSize
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = DefaultProxyRetryInterval
	}
	return cfg, nil
}

// Step takes one input and returns the effects, in order.
func (p *ProxyState) Step(in ProxyInput) []ProxyEffect {
	p.out = nil
	switch in := in.(type) {
	case PxCall:
		p.calls[in.ID] = &proxyCall{}
		p.try(in.ID)
	case PxView:
		p.snap = in.Snapshot
		// Every waiting request is tried again, in the order they first
		// waited.
		for _, id := range append([]uint64(nil), p.buffer...) {
			if c := p.calls[id]; c != nil && !c.inFlight {
				p.try(id)
			}
		}
	case PxNotRunning:
		if c := p.calls[in.ID]; c != nil && c.inFlight {
			c.last = in.Err
			p.wait(in.ID, c)
		}
	case PxTimer:
		if c := p.calls[in.ID]; c != nil && !c.inFlight {
			p.try(in.ID)
		}
	case PxExpired:
		if c := p.calls[in.ID]; c != nil && !c.inFlight {
			p.out = append(p.out, PxFail{ID: in.ID, Err: expiredErr(in.Err, c.last)})
			p.forget(in.ID)
		}
	case PxDone:
		p.forget(in.ID)
	}
	out := p.out
	p.out = nil
	return out
}

// View is the last view stepped.
func (p *ProxyState) View() cluster.Snapshot { return p.snap }

// Waiting is how many requests wait (not in flight).
func (p *ProxyState) Waiting() int { return p.waiting }

// Dropped and Forwarded count the requests dropped from a full buffer and
// the attempts sent, in total.
func (p *ProxyState) Dropped() uint64   { return p.dropped }
func (p *ProxyState) Forwarded() uint64 { return p.forwarded }

// try sends request id to the oldest, or has it wait.
func (p *ProxyState) try(id uint64) {
	c := p.calls[id]
	target, ok := p.snap.Oldest(p.cfg.Role)
	if !ok {
		p.wait(id, c)
		return
	}
	if c.buffered && !c.inFlight {
		p.waiting--
	}
	c.inFlight = true
	p.forwarded++
	p.out = append(p.out, PxAttempt{ID: id, Target: target})
}

// wait has request id wait in the buffer for its next try.
func (p *ProxyState) wait(id uint64, c *proxyCall) {
	if !c.buffered {
		c.buffered = true
		p.buffer = append(p.buffer, id)
		p.waiting++
	} else if c.inFlight {
		p.waiting++
	}
	c.inFlight = false
	p.out = append(p.out, PxArm{ID: id, After: p.cfg.RetryInterval})
	p.enforce()
}

// enforce drops the oldest waiting requests while more than BufferSize
// wait.
func (p *ProxyState) enforce() {
	for p.waiting > p.cfg.BufferSize {
		victim := uint64(0)
		found := false
		for _, id := range p.buffer {
			if c := p.calls[id]; c != nil && !c.inFlight {
				victim, found = id, true
				break
			}
		}
		if !found {
			return
		}
		p.forget(victim)
		p.dropped++
		p.out = append(p.out, PxFail{ID: victim, Err: fmt.Errorf("%w (buffer size %d)", ErrDropped, p.cfg.BufferSize)},
			PxEmit{protocol.Event{Type: protocol.EventProxyDropped, Singleton: p.cfg.Name,
				Detail: fmt.Sprintf("buffer of %d full; dropped the oldest waiting request (%d in total)", p.cfg.BufferSize, p.dropped)}})
	}
}

// forget removes request id.
func (p *ProxyState) forget(id uint64) {
	c := p.calls[id]
	if c == nil {
		return
	}
	delete(p.calls, id)
	if c.buffered {
		if !c.inFlight {
			p.waiting--
		}
		for i, b := range p.buffer {
			if b == id {
				p.buffer = append(p.buffer[:i], p.buffer[i+1:]...)
				break
			}
		}
	}
}

// expiredErr: the caller gave up while its request only waited; every
// attempt so far was a definite "not running", so nothing happened.
func expiredErr(ctxErr, last error) error {
	if last != nil {
		return fmt.Errorf("%w: no instance took the request before the deadline (last: %v): %w", ErrNotRunning, last, ctxErr)
	}
	return fmt.Errorf("%w: no instance known before the deadline: %w", ErrNotRunning, ctxErr)
}

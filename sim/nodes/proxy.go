package nodes

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/sim"
)

// The messages of a proxied request between nodes.
type (
	// singletonReq carries a request to the manager on member to.
	singletonReq struct {
		name, to string
		id       uint64
		req      singleton.Request
	}
	// singletonRes answers it.
	singletonRes struct {
		name string
		id   uint64
		res  json.RawMessage
		err  error
	}
)

// proxy drives one member's singleton.ProxyState as singleton.Proxy does
// on the real node: the view when the membership changes, each request's
// attempts over the network (or to this member's own manager), its retry
// timer and its deadline.
type proxy struct {
	inc    *incarnation
	name   string
	st     *singleton.ProxyState
	seen   uint64
	viewed bool
	calls  map[uint64]*proxyCall
	next   uint64
	// remote: requests this proxy sent to other members, by id.
	remote map[uint64]func(json.RawMessage, error)
}

type proxyCall struct {
	req      singleton.Request
	done     func(json.RawMessage, error)
	timer    sim.Event
	deadline sim.Event
	inFlight bool
}

// newProxy is inc's proxy of singleton name.
func newProxy(inc *incarnation, name string) (*proxy, error) {
	cfg, err := singleton.ProxyConfigDefaults(singleton.ProxyConfig{Name: name})
	if err != nil {
		return nil, err
	}
	return &proxy{inc: inc, name: name, st: singleton.NewProxyState(cfg), calls: map[uint64]*proxyCall{},
		remote: map[uint64]func(json.RawMessage, error){}}, nil
}

// step steps the view first if it is new, then in (nil: the view only).
func (p *proxy) step(in singleton.ProxyInput) {
	if p.inc.gone() {
		return
	}
	if snap := p.inc.m.Snapshot(); !p.viewed || snap.Version != p.seen {
		p.viewed, p.seen = true, snap.Version
		p.apply(p.st.Step(singleton.PxView{Snapshot: snap}))
	}
	if in != nil {
		p.apply(p.st.Step(in))
	}
}

func (p *proxy) apply(effs []singleton.ProxyEffect) {
	for _, e := range effs {
		switch e := e.(type) {
		case singleton.PxEmit:
			p.inc.n.emit(e.Event)
		case singleton.PxAttempt:
			p.attempt(e.ID, e.Target)
		case singleton.PxArm:
			if c := p.calls[e.ID]; c != nil {
				c.timer.Cancel()
				id := e.ID
				c.timer = p.inc.after(e.After, "", func() { p.step(singleton.PxTimer{ID: id}) })
			}
		case singleton.PxFail:
			p.end(e.ID, nil, e.Err)
		}
	}
}

// call proxies a request, bounded by timeout; done gets its answer, once.
func (p *proxy) call(req singleton.Request, timeout time.Duration, done func(json.RawMessage, error)) {
	p.next++
	id := p.next
	c := &proxyCall{req: req, done: done}
	p.calls[id] = c
	c.deadline = p.inc.after(timeout, "", func() {
		if c.inFlight {
			// The attempt in flight was made under the request's context:
			// it ends with it, its outcome unknown.
			p.end(id, nil, fmt.Errorf("%w: %w", singleton.ErrUnknownOutcome, context.DeadlineExceeded))
			return
		}
		p.step(singleton.PxExpired{ID: id, Err: context.DeadlineExceeded})
	})
	p.step(singleton.PxCall{ID: id})
}

// end answers request id and forgets it.
func (p *proxy) end(id uint64, res json.RawMessage, err error) {
	c := p.calls[id]
	if c == nil {
		return
	}
	delete(p.calls, id)
	c.timer.Cancel()
	c.deadline.Cancel()
	p.step(singleton.PxDone{ID: id})
	c.done(res, err)
}

// attempt sends request id to the manager on target: this member's own,
// or another's over the network.
func (p *proxy) attempt(id uint64, target cluster.MemberState) {
	c := p.calls[id]
	if c == nil {
		return
	}
	c.inFlight = true
	outcome := func(res json.RawMessage, err error) {
		if p.calls[id] != c {
			return // ended meanwhile (its deadline)
		}
		c.inFlight = false
		retry, out := singleton.LocalOutcome(err)
		if retry {
			p.step(singleton.PxNotRunning{ID: id, Err: err})
			return
		}
		p.end(id, res, out)
	}
	req := c.req
	if target.UID() == p.inc.m.Self().UID() {
		p.inc.manager(p.name).handle(req, outcome)
		return
	}
	n, c2 := p.inc.n, p.inc.n.c
	p.remote[id] = outcome
	c2.Net.SendReliable(n.addr, target.GossipAddr, singletonReq{name: p.name, to: target.UID(), id: id, req: req}, c2.cfg.RequestTimeout,
		func(error) {
			// Never delivered (cut, or nothing listens): the request was
			// not sent, so nothing happened; try again.
			if f := p.remote[id]; f != nil {
				delete(p.remote, id)
				f(nil, fmt.Errorf("%w: request never sent to %s", singleton.ErrNotRunning, target.UID()))
			}
		})
}

// serveRemote serves another member's proxied request with this member's
// manager and answers it.
func (p *proxy) serveRemote(from string, r singletonReq) {
	n, c := p.inc.n, p.inc.n.c
	answer := func(res json.RawMessage, err error) {
		c.Net.SendReliable(n.addr, from, singletonRes{name: p.name, id: r.id, res: res, err: err}, c.cfg.RequestTimeout, nil)
	}
	if r.to != p.inc.m.Self().UID() {
		answer(nil, fmt.Errorf("%w: wrong member: this is %s", singleton.ErrNotRunning, p.inc.m.Self().UID()))
		return
	}
	p.inc.manager(p.name).handle(r.req, answer)
}

// answered takes the answer to a request this proxy sent.
func (p *proxy) answered(r singletonRes) {
	if f := p.remote[r.id]; f != nil {
		delete(p.remote, r.id)
		f(r.res, r.err)
	}
}

// NextID asks node name's proxy for an id; done gets what the proxy
// returned (see impl/node NextIDReply), once. A node whose process is not
// running answers nothing: the caller's own timeout ends the wait.
func (c *Cluster) NextID(name string, done func(json.RawMessage, error)) {
	n := c.Node(name)
	if n == nil || n.inc == nil {
		return
	}
	n.run("", func() {
		if inc := n.inc; inc != nil {
			if p := inc.proxyOf(SingletonName); p != nil {
				p.call(singleton.Request{Op: singleton.OpNextID}, c.cfg.RequestTimeout, done)
			}
		}
	})
}

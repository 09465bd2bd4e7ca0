package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// Implementation is the peer's name in GET /v1/capabilities.
const Implementation = "etcd-election"

// readInterval is how often the peer reads the election's queue.
const readInterval = 500 * time.Millisecond

// retryInterval is the pause before a failed etcd step is tried again.
const retryInterval = 500 * time.Millisecond

// peer is one node: an embedded etcd member, a client of it, and the
// election the id generator runs under.
type peer struct {
	set    settings
	log    *slog.Logger
	zap    *zap.Logger
	events *kit.EventLog
	// inc is the current incarnation: new at process start and whenever
	// the session ends.
	inc     atomic.Pointer[string]
	members *membership
	single  *singleton
	fwd     *forwarder

	etcd *embed.Etcd
	cli  *clientv3.Client
	// lease is the current session's lease id (0: none).
	lease atomic.Int64
}

func newIncarnation() string { return rand.Text()[:12] }

func newPeer(set settings, stderr io.Writer) (*peer, error) {
	lg, err := zapLogger(set.EtcdLogLevel)
	if err != nil {
		return nil, err
	}
	p := &peer{set: set, zap: lg, events: kit.NewEventLog(nil, 0)}
	p.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("lib", "shardtest-peer", "node", set.Name)
	inc := newIncarnation()
	p.inc.Store(&inc)
	p.events.SetIncarnation(inc)
	p.members = newMembership(protocol.Member{UID: protocol.UID(set.Name, inc), Name: set.Name, Incarnation: inc,
		GossipAddr: set.PeerURL().Host, HTTPAddr: set.HTTPAdvertise, Roles: set.Roles}, p.logEvent)
	p.fwd = newForwarder(set.ClusterSecret)
	return p, nil
}

func (p *peer) incarnation() string { return *p.inc.Load() }

// logEvent appends e to the event log and logs it.
func (p *peer) logEvent(e protocol.Event) {
	e = p.events.Append(e)
	p.log.Info("event", "type", e.Type, "seq", e.Seq, "incarnation", e.Incarnation, "subject", e.Member, "detail", e.Detail)
}

// run serves the protocol, starts the etcd member and the election, and
// runs until ctx ends.
func (p *peer) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 3)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := kit.Serve(ctx, p.set.HTTP, p.node().Handler()); err != nil {
			errc <- fmt.Errorf("serve shardtest/1 on %s: %w", p.set.HTTP, err)
		}
	}()
	p.logEvent(protocol.Event{Type: protocol.EventNodeStarted, Member: p.members.selfMember().UID})
	p.log.Info("starting the etcd member", "peer_url", p.set.PeerURL().String(), "client_url", p.set.ClientURL().String(),
		"forward", p.set.ForwardAddr(), "bootstrap", p.set.Bootstrap, "join_endpoints", p.set.JoinEndpoints,
		"session_ttl_s", p.set.SessionTTL, "writes", p.set.Writes)
	e, err := startEtcd(ctx, p.set, p.zap, p.log)
	if err != nil {
		return err
	}
	p.etcd = e
	defer e.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.set.ClientURL().String()}, DialTimeout: 5 * time.Second, Logger: p.zap})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	p.cli = cli
	defer cli.Close()
	p.single = &singleton{cli: cli, fence: p.set.Fenced, stepDownWaits: p.set.StepDownWaits, log: p.log, event: p.logEvent}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := p.fwd.serve(ctx, p.set.ForwardAddr(), p.single); err != nil {
			errc <- err
		}
	}()
	select {
	case <-e.Server.ReadyNotify():
		p.log.Info("the etcd member is ready", "member_id", e.Server.MemberID().String())
	case err := <-e.Err():
		return fmt.Errorf("etcd member: %w", err)
	case err := <-errc:
		return err
	case <-ctx.Done():
		return nil
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		p.readQueue(ctx)
	}()
	go func() {
		defer wg.Done()
		p.live(ctx)
	}()
	select {
	case err = <-e.Err():
		err = fmt.Errorf("etcd member: %w", err)
	case err = <-errc:
	case <-ctx.Done():
	}
	cancel()
	wg.Wait()
	p.logEvent(protocol.Event{Type: protocol.EventNodeStopped, Member: p.members.selfMember().UID})
	return err
}

// readQueue reads the election's queue every readInterval until ctx
// ends. A reading that fails (no quorum here) leaves the last one.
func (p *peer) readQueue(ctx context.Context) {
	t := time.NewTicker(readInterval)
	defer t.Stop()
	var lastErr string
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := p.cli.Get(rctx, electionPrefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		cancel()
		if err != nil {
			if ctx.Err() == nil && err.Error() != lastErr {
				p.log.Warn("cannot read the election's queue", "err", err)
			}
			lastErr = err.Error()
		} else {
			lastErr = ""
			var queue []candidate
			for _, kv := range resp.Kvs {
				c, err := decodeCandidate(string(kv.Key), kv.Value, kv.CreateRevision)
				if err != nil {
					p.log.Warn("skipping an election key", "err", err)
					continue
				}
				queue = append(queue, c)
			}
			p.members.update(queue)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// live runs this member's incarnations: each opens a session (a lease
// with the TTL of --session-ttl), campaigns in the election, and when it
// wins runs the id generator until the session ends. A session that ends
// while the node runs ends the incarnation: the member is downed in etcd's
// eyes (its key is gone), and a new incarnation campaigns again.
func (p *peer) live(ctx context.Context) {
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(p.cli, concurrency.WithTTL(p.set.SessionTTL), concurrency.WithContext(ctx))
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("cannot open a session", "err", err)
				sleep(ctx, retryInterval)
			}
			continue
		}
		p.lease.Store(int64(sess.Lease()))
		self := p.members.selfMember()
		p.log.Info("session opened", "incarnation", self.Incarnation, "lease", fmt.Sprintf("%x", int64(sess.Lease())), "ttl_s", p.set.SessionTTL)
		p.campaign(ctx, sess, self)
		p.lease.Store(0)
		if ctx.Err() != nil {
			// Shutting down: revoke the lease, so that the next leader
			// need not wait for it to expire.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			sess.Orphan()
			_, err := p.cli.Revoke(rctx, sess.Lease())
			cancel()
			p.log.Info("session closed at shutdown", "lease", fmt.Sprintf("%x", int64(sess.Lease())), "revoke_err", err)
			return
		}
		p.logEvent(protocol.Event{Type: protocol.EventSelfDowned, Member: self.UID,
			Detail: fmt.Sprintf("its etcd session (lease %x) ended: the lease expired or could not be kept alive", int64(sess.Lease()))})
		inc := newIncarnation()
		p.inc.Store(&inc)
		p.events.SetIncarnation(inc)
		p.members.setIncarnation(inc)
		p.single.starts = 0
		p.log.Info("new incarnation after the session ended", "incarnation", inc)
	}
}

// campaign campaigns with sess until it wins, then runs the id generator
// until the session ends, ctx ends, or a fenced write finds the leader key
// gone. It returns once the session has ended (or ctx).
func (p *peer) campaign(ctx context.Context, sess *concurrency.Session, self protocol.Member) {
	elect := concurrency.NewElection(sess, electionName)
	val := encodeCandidate(self, p.set.ForwardAddr())
	if !p.retry(sess, "campaign failed", func(ctx context.Context) error { return elect.Campaign(ctx, val) }) {
		return
	}
	// Won: read the counter, then serve.
	var counter, readRev int64
	if !p.retry(sess, "cannot read the counter after winning", func(ctx context.Context) (err error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		counter, readRev, err = readCounter(rctx, p.cli)
		return err
	}) {
		return
	}
	p.single.starts++
	inst := &instance{id: protocol.SingletonInstance{Node: self.Name, Incarnation: self.Incarnation, Instance: p.single.starts},
		key: elect.Key(), rev: elect.Rev(), fenced: make(chan struct{})}
	inst.counter.Store(counter)
	p.single.start(inst, readRev)
	select {
	case <-sess.Done():
		p.single.stop(inst, false, fmt.Sprintf("its session (lease %x) ended", int64(sess.Lease())))
	case <-ctx.Done():
		p.single.stop(inst, false, "the node is shutting down")
	case <-inst.fenced:
		p.single.stop(inst, true, fmt.Sprintf("a fenced write found its leader key %s (revision %d) gone", inst.key, inst.rev))
		select {
		case <-sess.Done():
		case <-ctx.Done():
		}
	}
}

// retry runs step with the session's context until it succeeds (true)
// or the session ends (false), logging each failure as what.
func (p *peer) retry(sess *concurrency.Session, what string, step func(context.Context) error) bool {
	for {
		err := step(sess.Ctx())
		if err == nil {
			return true
		}
		if sess.Ctx().Err() != nil {
			return false
		}
		p.log.Warn(what, "err", err)
		sleep(sess.Ctx(), retryInterval)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

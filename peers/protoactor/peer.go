package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"
)

// Implementation is the peer's name in GET /v1/capabilities.
const Implementation = "protoactor-go"

// refreshTTL is how often the automanaged provider polls every member's
// health endpoint: the library's default (automanaged.New).
const refreshTTL = 2 * time.Second

// gossipInterval is how often the peer reads the members' names and
// topologies from the gossip state.
const gossipInterval = time.Second

// peer is one protoactor-go cluster member hosting register grains,
// served to the harness through the kit.
type peer struct {
	set     settings
	log     *slog.Logger
	system  *actor.ActorSystem
	cluster *cluster.Cluster
	journal *journal.Client
	events  *kit.EventLog
	acts    *activations
	members *membership
	uid     string
	// ctx is the member's life, cancelled by run's end; requests are the
	// cluster requests in flight (each ends by the framework's own
	// request timeout).
	ctx      context.Context
	cancel   context.CancelFunc
	requests sync.WaitGroup
}

// newPeer builds the actor system and the cluster member (not started).
func newPeer(ctx context.Context, set settings, stderr io.Writer) *peer {
	system := actor.NewActorSystem(actor.WithLoggerFactory(frameworkLogger(stderr, set.FrameworkLogLevel)))
	p := &peer{set: set, system: system, journal: journal.NewClient(set.Journal, journal.ClientOptions{}),
		events: kit.NewEventLog(nil, 0), uid: protocol.UID(set.Name, system.ID)}
	p.ctx, p.cancel = context.WithCancel(ctx)
	p.log = newLogger(stderr, set.Name).With("member", p.uid)
	p.events.SetIncarnation(system.ID)
	p.acts = newActivations(p.uid, p.events)
	address := net.JoinHostPort(set.RemoteHost, strconv.Itoa(set.RemotePort))
	p.members = newMembership(protocol.Member{UID: p.uid, Name: set.Name, Incarnation: system.ID,
		GossipAddr: address, HTTPAddr: set.HTTPAdvertise, Roles: set.Roles}, !set.UpWhenSelfListed, p.log, p.logEvent)

	deps := &grainDeps{ctx: p.ctx, journal: p.journal, acts: p.acts, node: p.uid, log: p.log}
	kind := cluster.NewKind(protocol.TypeRegister, actor.PropsFromProducer(func() actor.Actor { return newGrain(deps) }))
	provider := automanaged.NewWithConfig(refreshTTL, set.AutoManagedPort, set.AutoManagedHosts...)
	config := cluster.Configure(clusterName, provider, disthash.New(),
		remote.Configure(set.RemoteHost, set.RemotePort), cluster.WithKinds(kind))
	p.cluster = cluster.New(system, config)
	system.EventStream.Subscribe(func(ev any) {
		if t, ok := ev.(*cluster.ClusterTopology); ok {
			p.members.onTopology(t, p.cluster.GetBlockedMembers().ToSlice())
		}
	})
	return p
}

// logEvent appends e to the event log and logs it.
func (p *peer) logEvent(e protocol.Event) {
	e = p.events.Append(e)
	p.log.Info("event", "type", e.Type, "seq", e.Seq, "subject", e.Member, "detail", e.Detail)
}

// run serves the protocol, starts the cluster member and runs until ctx
// ends, then leaves the cluster.
func (p *peer) run() error {
	defer p.cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	served := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		served <- kit.Serve(p.ctx, p.set.HTTP, p.node().Handler())
	}()
	p.logEvent(protocol.Event{Type: protocol.EventNodeStarted, Member: p.uid})
	p.log.Info("starting the protoactor cluster member", "remote", net.JoinHostPort(p.set.RemoteHost, strconv.Itoa(p.set.RemotePort)),
		"automanaged_port", p.set.AutoManagedPort, "automanaged_hosts", p.set.AutoManagedHosts, "journal", p.set.Journal)
	if err := p.startMember(); err != nil {
		p.cancel()
		return err
	}
	p.members.setStarted()
	p.log.Info("the protoactor cluster member has started")
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.members.runGossip(p.ctx, p.cluster.Gossip, gossipInterval)
	}()
	var err error
	select {
	case err = <-served:
		err = fmt.Errorf("serve shardtest/1 on %s: %w", p.set.HTTP, err)
	case <-p.ctx.Done():
	}
	p.cancel()
	p.shutdown()
	return err
}

// startMember starts the cluster member; protoactor panics where it
// fails (a port in use), and that is an error here.
func (p *peer) startMember() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("start the protoactor cluster member: %v", r)
		}
	}()
	p.cluster.StartMember()
	return nil
}

// shutdownTimeout bounds the cluster's graceful shutdown (which sleeps
// 2 s itself, waiting for ownership to move).
const shutdownTimeout = 15 * time.Second

// shutdown leaves the cluster gracefully, waits for the requests in
// flight and logs node-stopped. protoactor's Shutdown takes no context: if
// it outlives shutdownTimeout, the goroutine running it is left to the
// process's exit, which follows.
func (p *peer) shutdown() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.cluster.Shutdown(true)
		p.requests.Wait()
	}()
	select {
	case <-done:
	case <-time.After(shutdownTimeout):
		p.log.Warn("the cluster did not shut down in time; exiting anyway", "timeout", shutdownTimeout)
	}
	p.logEvent(protocol.Event{Type: protocol.EventNodeStopped, Member: p.uid})
}

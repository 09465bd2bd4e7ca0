package node

import (
	"context"
	"fmt"
	"slices"

	"github.com/shardtest/shardtest/impl/entities"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
)

// entityType is one sharded entity type on this member: its region, and
// the manager and proxy of its coordinator singleton.
type entityType struct {
	name     string
	region   *sharding.Region
	coord    *singleton.Manager
	coordPxy *singleton.Proxy
}

// EntityTypes are the entity types every reference node starts.
func EntityTypes() []string {
	return []string{protocol.TypeRegister, protocol.TypeLog, protocol.TypeSender}
}

func (n *Node) shardingSettings(typ string) sharding.Settings {
	c := n.cfg
	var bugs sharding.Bugs
	for _, b := range c.Bugs {
		if slices.Contains(sharding.BugNames(), b) {
			sharding.ParseBug(b, &bugs) // known: checked by Config.validate
		}
	}
	return sharding.Settings{
		Bugs:                     bugs,
		TypeName:                 typ,
		Role:                     c.ShardingRole,
		NumberOfShards:           c.NumberOfShards,
		BufferSize:               c.ShardBufferSize,
		HandOffTimeout:           c.HandOffTimeout,
		RebalanceInterval:        c.RebalanceInterval,
		RebalanceThreshold:       c.RebalanceThreshold,
		MaxSimultaneousRebalance: c.MaxSimultaneousRebalance,
		PassivateIdleAfter:       c.PassivateIdleAfter,
		RetryInterval:            c.ShardRetryInterval,
		DownRemovalMargin:        c.DownRemovalMargin,
	}.WithDefaults()
}

func (inc *incarnation) entityFactory(typ string) sharding.EntityFactory {
	n := inc.node
	if n.cfg.ProxyOnly {
		return nil
	}
	opts := entities.Options{SkipReplay: slices.Contains(n.cfg.Bugs, BugEntitySkipReplay)}
	switch typ {
	case protocol.TypeRegister:
		return entities.NewRegister(opts)
	case protocol.TypeLog:
		return entities.NewLog(opts)
	case protocol.TypeSender:
		// Senders deliver through this member's own regions.
		send := func(ctx context.Context, typ string, msg sharding.Message) (sharding.Reply, error) {
			t := inc.entityType(typ)
			if t == nil {
				return sharding.Reply{}, fmt.Errorf("no region for %s", typ)
			}
			return t.region.Deliver(ctx, msg)
		}
		return entities.NewSender(entities.SenderOptions{Options: opts, RedeliverInterval: n.cfg.RedeliverInterval}, send)
	}
	return nil
}

// setupSharding builds, for every entity type, the coordinator singleton
// (manager and proxy) and the region, and mounts their routes.
func (inc *incarnation) setupSharding() error {
	n := inc.node
	var types []*entityType
	for _, typ := range EntityTypes() {
		s := n.shardingSettings(typ)
		if err := s.Validate(); err != nil {
			return err
		}
		deps := sharding.Deps{
			Membership: inc.cluster,
			Fresh:      inc.cluster.Fresh,
			Peers:      inc.peers,
			Clock:      n.cfg.Clock,
			Events:     n.events,
			Logger:     n.log.With("entity-type", typ),
			Journal:    n.journal,
			Factory:    inc.entityFactory(typ),
			// One count for the process: an entity's incarnations never
			// repeat a number, whichever region or member started them.
			Incarnations: &n.entityStarts,
		}
		strategy := sharding.NewLeastShardAllocation(s.RebalanceThreshold, s.MaxSimultaneousRebalance)
		name := sharding.CoordinatorName(typ)
		mgr, err := singleton.NewManager(singleton.Config{
			Name:               name,
			Role:               n.cfg.ShardingRole,
			RetryInterval:      n.cfg.RetryInterval,
			MaxHandOverRetries: n.cfg.MaxHandOverRetries,
			MaxTakeOverRetries: n.cfg.MaxTakeOverRetries,
			DownRemovalMargin:  n.cfg.DownRemovalMargin,
		}, singleton.Deps{
			Membership: inc.cluster, Peers: inc.peers, Clock: n.cfg.Clock, Events: n.events,
			Logger: n.log, Factory: sharding.CoordinatorFactory(s, deps, strategy),
		})
		if err != nil {
			return fmt.Errorf("coordinator of %s: %w", typ, err)
		}
		proxy, err := singleton.NewProxy(singleton.ProxyConfig{Name: name, Role: n.cfg.ShardingRole, BufferSize: n.cfg.ProxyBufferSize},
			singleton.ProxyDeps{Membership: inc.cluster, Peers: inc.peers, Clock: n.cfg.Clock, Events: n.events, Logger: n.log, Local: mgr})
		if err != nil {
			return fmt.Errorf("coordinator proxy of %s: %w", typ, err)
		}
		region, err := sharding.NewRegion(s, deps, proxy)
		if err != nil {
			return fmt.Errorf("region of %s: %w", typ, err)
		}
		mgr.Routes(inc.mux)
		region.Routes(inc.mux)
		types = append(types, &entityType{name: typ, region: region, coord: mgr, coordPxy: proxy})
	}
	n.mu.Lock()
	inc.types = types
	n.mu.Unlock()
	return nil
}

// entityTypeNamed returns the current incarnation's entity type, or nil.
func (inc *incarnation) entityType(name string) *entityType {
	inc.node.mu.Lock()
	defer inc.node.mu.Unlock()
	for _, t := range inc.types {
		if t.name == name {
			return t
		}
	}
	return nil
}

// runSharding runs every coordinator manager and region until ctx ends;
// it returns when all have stopped (every local entity stopped).
func (inc *incarnation) runSharding(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	waits := make(chan struct{}, 2*len(inc.types))
	for _, t := range inc.types {
		go func() { t.coord.Run(ctx); waits <- struct{}{} }()
		go func() {
			if err := t.region.Run(ctx); err != nil && ctx.Err() == nil {
				inc.node.log.Error("region stopped", "type", t.name, "err", err)
			}
			waits <- struct{}{}
		}()
	}
	go func() {
		for range 2 * len(inc.types) {
			<-waits
		}
		close(done)
	}()
	return done
}

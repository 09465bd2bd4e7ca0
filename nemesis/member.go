package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"
)

func errNoNode(name string) error { return fmt.Errorf("no node named %q", name) }

// leaveTimeout bounds a graceful leave: hand-off of shards and singletons
// takes seconds; a leave that takes longer is reported, not waited out.
const leaveTimeout = 90 * time.Second

func memberFaults() []Fault {
	return []Fault{
		{
			Name:  "member:join",
			Doc:   "add a node to the cluster (shards rebalance to it); heal makes it leave gracefully and removes it",
			check: all(runtimeCan(FeatureAddNode), needs("leave")),
			inject: func(ctx context.Context, env *Env, _ *rand.Rand) (*Active, error) {
				n, err := env.Cluster.AddNode(ctx)
				if err != nil {
					return nil, err
				}
				t := Targets{[]string{n.Name}, "new"}
				return &Active{Targets: t, heal: func(ctx context.Context) (any, error) {
					lerr := leave(ctx, env, n.Name)
					// Removed whether or not the leave completed: a node
					// that could not leave is then downed by the others.
					if err := env.Cluster.RemoveNode(ctx, n.Name); err != nil {
						return t, err
					}
					return t, lerr
				}}, nil
			},
		},
		leaveFault("one"),
		leaveFault(RoleOldest),
		{
			Name: "member:down-unreachable",
			Doc: "an operator downs every member the answering nodes see unreachable, through one of them (opt-in: for crashes " +
				"no split-brain strategy can resolve, like the oldest half of the cluster); heal does nothing",
			optIn:  true,
			check:  needs("down"),
			inject: downUnreachable,
		},
		{
			Name:  "member:rolling-restart",
			Doc:   "restart every node in turn: each leaves gracefully, then starts again as a new incarnation and is ready before the next",
			check: all(runtimeCan(FeatureKill), needs("leave")),
			inject: func(ctx context.Context, env *Env, _ *rand.Rand) (*Active, error) {
				names := nodeNames(env)
				t := Targets{names, "all"}
				for _, name := range names {
					lerr := leave(ctx, env, name)
					if err := restart(ctx, env, name); err != nil {
						return &Active{Targets: t}, err
					}
					if lerr != nil {
						return &Active{Targets: t}, lerr
					}
				}
				return &Active{Targets: t}, nil
			},
		},
	}
}

// downUnreachable downs, through the first answering node (in name order),
// every member some answering node sees unreachable.
func downUnreachable(ctx context.Context, env *Env, _ *rand.Rand) (*Active, error) {
	sts := statuses(ctx, env)
	var via string
	uids := map[string]bool{}
	for _, name := range nodeNames(env) {
		st, ok := sts[name]
		if !ok {
			continue
		}
		if via == "" {
			via = name
		}
		for _, uid := range st.Unreachable {
			uids[uid] = true
		}
	}
	if via == "" {
		return nil, errors.New("no node answered its status")
	}
	if len(uids) == 0 {
		return nil, errors.New("no member is unreachable")
	}
	n, _ := env.node(via)
	c := env.client(n)
	var names []string
	var errs []error
	for _, uid := range sorted(slices.Collect(maps.Keys(uids))) {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := c.Down(dctx, uid); err != nil {
			errs = append(errs, fmt.Errorf("down %s through %s: %w", uid, via, err))
		} else {
			names = append(names, nameOf(uid))
		}
		cancel()
	}
	if len(names) == 0 {
		return attempted(Targets{sorted(slices.Collect(maps.Keys(uids))), "unreachable"}), errors.Join(errs...)
	}
	return &Active{Targets: Targets{names, "unreachable"}}, errors.Join(errs...)
}

func leaveFault(how string) Fault {
	return Fault{
		Name:  "member:leave-" + how,
		Doc:   targetDoc(how) + " leaves the cluster gracefully (hand-off and hand-over); heal starts it again as a new incarnation",
		check: all(runtimeCan(FeatureKill), needs("leave"), atLeast(2), roleNeeds(how)),
		inject: func(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
			targets, err := pick(ctx, env, rng, nodeNames(env), how)
			if err != nil {
				return nil, err
			}
			name := targets[0]
			t := Targets{targets, how}
			err = leave(ctx, env, name)
			return &Active{Targets: t, heal: func(ctx context.Context) (any, error) {
				return t, env.retry(ctx, func() error { return restart(ctx, env, name) })
			}}, err
		},
	}
}

// leave asks a node to leave gracefully and waits until it has: its
// process exits once it has left (docs/protocol.md), so it stops answering,
// or another node no longer lists its member as up.
func leave(ctx context.Context, env *Env, name string) error {
	n, ok := env.node(name)
	if !ok {
		return errNoNode(name)
	}
	c := env.client(n)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	st, err := c.Status(sctx)
	cancel()
	if err != nil {
		return fmt.Errorf("leave %s: status: %w", name, err)
	}
	uid := st.Self.UID
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = c.Leave(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("leave %s: %w", name, err)
	}
	deadline := env.now().Add(leaveTimeout)
	for env.now().Before(deadline) {
		if err := env.sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
		if gone(ctx, env, name, uid) {
			return nil
		}
	}
	return fmt.Errorf("leave %s: %s still a member after %v", name, uid, leaveTimeout)
}

// gone reports whether member uid has left: no other answering node lists
// it as a member (and at least one other node answered).
func gone(ctx context.Context, env *Env, self, uid string) bool {
	answered := 0
	for node, st := range statuses(ctx, env) {
		if node == self {
			if st.Self.UID == uid && st.Self.Status != "removed" {
				return false
			}
			continue
		}
		answered++
		for _, m := range st.Members {
			if m.UID == uid && m.Status != "removed" && m.Status != "down" {
				return false
			}
		}
	}
	return answered > 0 || len(env.Cluster.Nodes()) == 1
}

// restart kills a node (a no-op if it has exited after leaving) and starts
// it again.
func restart(ctx context.Context, env *Env, name string) error {
	if err := env.Cluster.Kill(ctx, name); err != nil {
		return err
	}
	return env.Cluster.Start(ctx, name)
}

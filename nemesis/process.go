package nemesis

import (
	"context"
	"math/rand/v2"
)

// Targets is what a process fault did.
type Targets struct {
	Targets []string `json:"targets"`
	// How the targets were chosen: one, minority, majority, all, some, a
	// role, or journal.
	How string `json:"how"`
}

// targetDocs describes the target choices.
func targetDoc(how string) string {
	switch how {
	case "one":
		return "one random node"
	case "minority":
		return "a random minority of the nodes"
	case "majority":
		return "a random majority of the nodes"
	case "all":
		return "every node"
	case RoleOldest:
		return "the oldest node"
	case RoleOldestHalf:
		return "the oldest half of the nodes at once (3 of 6: the singletons' home and the next two in line)"
	case RoleCoordinator:
		return "the node running a shard coordinator"
	case RoleSingleton:
		return "the node running the id-generator singleton"
	case journalName:
		return "the journal (opt-in: name it as kill:journal)"
	}
	return how
}

func killFaults() []Fault {
	var out []Fault
	for _, how := range []string{"one", "minority", "majority", "all", RoleOldest, RoleOldestHalf, RoleCoordinator, journalName} {
		out = append(out, Fault{
			Name:  "kill:" + how,
			Doc:   "crash (SIGKILL) " + targetDoc(how) + "; heal restarts it with its disk",
			optIn: how == journalName,
			check: all(killCheck(how), roleNeeds(how)),
			inject: func(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
				targets := []string{journalName}
				if how != journalName {
					var err error
					if targets, err = pick(ctx, env, rng, nodeNames(env), how); err != nil {
						return nil, err
					}
				}
				done, err := env.forEachDone(targets, func(name string) error { return env.Cluster.Kill(ctx, name) })
				if len(done) == 0 {
					return attempted(Targets{targets, how}), err
				}
				return &Active{Targets: Targets{targets, how}, heal: func(ctx context.Context) (any, error) {
					return Targets{targets, how}, startAll(ctx, env, targets)
				}}, err
			},
		})
	}
	return out
}

func killCheck(how string) func(*Env) error {
	if how == RoleOldestHalf {
		// On fewer than 4 nodes it is kill:oldest.
		return all(runtimeCan(FeatureKill), atLeast(4))
	}
	return runtimeCan(FeatureKill)
}

// startAll starts killed nodes again. The first node of the cluster (the
// first seed, which bootstraps a cluster when it finds no other) starts
// first and alone when every node is down, so the others have someone to
// join.
func startAll(ctx context.Context, env *Env, names []string) error {
	names = sorted(names)
	all := nodeNames(env)
	if len(all) > 0 && len(names) == len(all) {
		first := all[0]
		if err := env.retry(ctx, func() error { return env.Cluster.Start(ctx, first) }); err != nil {
			return err
		}
		var rest []string
		for _, n := range names {
			if n != first {
				rest = append(rest, n)
			}
		}
		names = rest
	}
	return env.forEach(names, func(name string) error {
		return env.retry(ctx, func() error { return env.Cluster.Start(ctx, name) })
	})
}

func pauseFaults() []Fault {
	var out []Fault
	for _, how := range []string{"one", "minority", RoleOldest, RoleCoordinator} {
		out = append(out, Fault{
			Name:  "pause:" + how,
			Doc:   "freeze " + targetDoc(how) + " (the GC-pause fault: a stale lease holder wakes up later); heal thaws it",
			check: all(runtimeCan(FeaturePause), roleNeeds(how)),
			inject: func(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
				targets, err := pick(ctx, env, rng, nodeNames(env), how)
				if err != nil {
					return nil, err
				}
				paused, err := env.forEachDone(targets, func(name string) error { return env.Cluster.Pause(ctx, name) })
				if len(paused) == 0 {
					return attempted(Targets{targets, how}), err
				}
				return &Active{Targets: Targets{targets, how}, heal: func(ctx context.Context) (any, error) {
					return Targets{paused, how}, env.forEach(paused, func(name string) error {
						return env.retry(ctx, func() error { return env.Cluster.Resume(ctx, name) })
					})
				}}, err
			},
		})
	}
	return out
}

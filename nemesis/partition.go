package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// journalName names the journal in partition rules.
const journalName = "journal"

// Cut is a partition: for every node, the nodes (or "journal") whose
// packets it drops on receipt and on sending. Nodes not listed drop
// nothing.
type Cut struct {
	Shape string `json:"shape"`
	// Components, where the shape has them: the sides of the partition.
	Components [][]string `json:"components,omitempty"`
	// Drops maps node → what it drops, by name.
	Drops map[string]Rules `json:"drops"`
}

// cutComponents cuts every node off from the nodes in other components.
func cutComponents(shape string, comps [][]string) Cut {
	c := Cut{Shape: shape, Components: comps, Drops: map[string]Rules{}}
	for i, comp := range comps {
		var others []string
		for j, other := range comps {
			if j != i {
				others = append(others, other...)
			}
		}
		sort.Strings(others)
		for _, n := range comp {
			c.Drops[n] = Rules{DropIn: others, DropOut: others}
		}
	}
	return c
}

// split returns names[:k] and names[k:] as two sorted components.
func split(names []string, k int) [][]string {
	return [][]string{sorted(names[:k]), sorted(names[k:])}
}

// shape is one way to partition the cluster.
type shape struct {
	name, doc string
	min       int
	role      string // a role the shape isolates
}

// partitionShapes are the partition nemesis's shapes.
func partitionShapes() []shape {
	return []shape{
		{"halves", "the first half of the nodes (in name order) from the rest", 2, ""},
		{"random-halves", "a random half of the nodes from the rest", 2, ""},
		{"isolate-one", "one random node from the rest", 2, ""},
		{"isolate-oldest", "the oldest node (the singletons' and coordinators' home) from the rest", 2, RoleOldest},
		{"isolate-coordinator", "the node running a shard coordinator from the rest", 2, RoleCoordinator},
		{"isolate-singleton", "the node running the id-generator singleton from the rest", 2, RoleSingleton},
		{"majorities-ring", "every node sees a majority, but no two nodes see the same one (a ring)", 4, ""},
		{"bridge", "two halves that cannot see each other, and one node that sees both", 3, ""},
		{"asymmetric", "packets from a random half to the rest are dropped; the other direction passes", 2, ""},
		{"journal-cut", "one node, a minority or every node is cut off from the journal", 1, ""},
	}
}

// shapeCut computes a shape's cut over names (in the runtime's order);
// target is the role's node for the isolate-<role> shapes, and for the
// shapes with a cut side (asymmetric: the side whose packets are lost;
// bridge: a half, not the bridge) the oldest node when the step's Target is
// "oldest", which puts it on that side; ctx may carry a step's Target, which
// fixes journal-cut's choice of one node, a minority or all, or with
// "younger" (target then the oldest) one node other than target.
func shapeCut(ctx context.Context, shape string, names []string, target string, rng *rand.Rand) (Cut, error) {
	n := len(names)
	switch shape {
	case "halves":
		return cutComponents(shape, split(names, n/2)), nil
	case "random-halves":
		return cutComponents(shape, split(shuffle(rng, names), n/2)), nil
	case "isolate-one":
		s := shuffle(rng, names)
		return cutComponents(shape, split(s, 1)), nil
	case "isolate-oldest", "isolate-coordinator", "isolate-singleton":
		if !slices.Contains(names, target) {
			return Cut{}, fmt.Errorf("target %q is not a node of the cluster", target)
		}
		rest := slices.DeleteFunc(append([]string(nil), names...), func(s string) bool { return s == target })
		return cutComponents(shape, [][]string{{target}, sorted(rest)}), nil
	case "majorities-ring":
		// Nodes on a random ring each see the nodes within k steps, k
		// the least that makes that a majority: every node sees a
		// majority, and no majority is shared by all.
		ring := shuffle(rng, names)
		majority := n/2 + 1
		k := majority / 2 // sees 2k+1 nodes
		if 2*k+1 < majority {
			k++
		}
		c := Cut{Shape: shape, Drops: map[string]Rules{}}
		for i, node := range ring {
			var drop []string
			for j, other := range ring {
				d := min((i-j+n)%n, (j-i+n)%n)
				if d > k {
					drop = append(drop, other)
				}
			}
			sort.Strings(drop)
			if len(drop) > 0 {
				c.Drops[node] = Rules{DropIn: drop, DropOut: drop}
			}
		}
		return c, nil
	case "bridge":
		s := first(shuffle(rng, names), target)
		half := (n - 1) / 2
		a, bridge, b := sorted(s[:half]), s[half], sorted(s[half+1:])
		c := cutComponents(shape, [][]string{a, b})
		c.Components = [][]string{a, {bridge}, b}
		return c, nil
	case "asymmetric":
		s := first(shuffle(rng, names), target)
		comps := split(s, n/2)
		from, to := comps[0], comps[1]
		c := Cut{Shape: shape, Components: comps, Drops: map[string]Rules{}}
		for _, x := range from {
			c.Drops[x] = Rules{DropOut: to}
		}
		for _, x := range to {
			c.Drops[x] = Rules{DropIn: from}
		}
		return c, nil
	case "journal-cut":
		var targets []string
		how := []string{"one", "minority", "all"}[rng.IntN(3)]
		if fixed, ok := ctx.Value(targetKey{}).(string); ok && fixed != "" && fixed != "some" {
			how = fixed // the step's Target
		}
		switch how {
		case RoleYounger:
			if !slices.Contains(names, target) {
				return Cut{}, fmt.Errorf("oldest %q is not a node of the cluster", target)
			}
			rest := slices.DeleteFunc(append([]string(nil), names...), func(s string) bool { return s == target })
			if len(rest) == 0 {
				return Cut{}, fmt.Errorf("journal-cut of a node that is not the oldest: the oldest is the only node")
			}
			targets = shuffle(rng, rest)[:1]
		case "one":
			targets = shuffle(rng, names)[:1]
		case "minority":
			targets = shuffle(rng, names)[:max(1, (n-1)/2)]
		default:
			targets = names
		}
		c := Cut{Shape: shape, Components: [][]string{sorted(targets), {journalName}}, Drops: map[string]Rules{}}
		for _, x := range targets {
			c.Drops[x] = Rules{DropIn: []string{journalName}, DropOut: []string{journalName}}
		}
		return c, nil
	}
	return Cut{}, fmt.Errorf("unknown partition shape %q", shape)
}

// first moves name, if it is among names, to the front.
func first(names []string, name string) []string {
	if i := slices.Index(names, name); i > 0 {
		names = slices.Insert(slices.Delete(names, i, i+1), 0, name)
	}
	return names
}

// oldestOnCutSide are the shapes a step's Target "oldest" applies to.
var oldestOnCutSide = []string{"asymmetric", "bridge"}

// youngerCut is the shape a step's Target "younger" applies to.
const youngerCut = "journal-cut"

// canPartition checks the runtime can cut packets between nodes (and,
// for the journal, the journal, of an implementation that keeps state
// there: against another the cut could not touch it, yet its window would
// excuse every timeout).
func canPartition(journal bool) func(env *Env) error {
	return func(env *Env) error {
		if journal && !env.has(protocol.CapJournal) {
			return needs(protocol.CapJournal)(env)
		}
		features := env.Cluster.Features()
		if slices.Contains(features, FeatureKernelFilter) {
			return nil
		}
		if journal {
			return fmt.Errorf("%w by the %s runtime: cutting nodes from the journal needs kernel packet filters (docker)", ErrUnsupported, env.Cluster.Runtime())
		}
		if slices.Contains(features, FeatureNodeFilter) {
			return needs("filter")(env)
		}
		return fmt.Errorf("%w: the %s runtime cannot cut packets", ErrUnsupported, env.Cluster.Runtime())
	}
}

func partitionFaults() []Fault {
	var out []Fault
	for _, s := range partitionShapes() {
		out = append(out, Fault{
			Name:  "partition:" + s.name,
			Doc:   "partition: " + s.doc,
			check: all(canPartition(s.name == "journal-cut"), atLeast(s.min), roleNeeds(s.role)),
			inject: func(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
				target, role := "", s.role
				how, _ := ctx.Value(targetKey{}).(string)
				if how == RoleOldest && slices.Contains(oldestOnCutSide, s.name) || how == RoleYounger && s.name == youngerCut {
					role = RoleOldest // younger: every node but the oldest
				}
				if role != "" {
					var err error
					if target, err = findRole(ctx, env, role); err != nil {
						return nil, err
					}
				}
				cut, err := shapeCut(ctx, s.name, nodeNames(env), target, rng)
				if err != nil {
					return nil, err
				}
				return applyCut(ctx, env, cut)
			},
		})
	}
	return out
}

// applyCut installs a cut on every node it names; its heal clears them.
func applyCut(ctx context.Context, env *Env, cut Cut) (*Active, error) {
	addrs := map[string]string{journalName: env.Cluster.Journal().Addr}
	for _, n := range env.Cluster.Nodes() {
		addrs[n.Name] = n.Addr
	}
	translate := func(names []string) ([]string, error) {
		var out []string
		for _, name := range names {
			a := addrs[name]
			if a == "" {
				return nil, fmt.Errorf("no address for %s", name)
			}
			out = append(out, a)
		}
		return out, nil
	}
	var targets []string
	for node := range cut.Drops {
		targets = append(targets, node)
	}
	sort.Strings(targets)
	done, err := env.forEachDone(targets, func(node string) error {
		r := cut.Drops[node]
		var ar Rules
		var err error
		if ar.DropIn, err = translate(r.DropIn); err != nil {
			return err
		}
		if ar.DropOut, err = translate(r.DropOut); err != nil {
			return err
		}
		if ar.LossPeers, err = translate(r.LossPeers); err != nil {
			return err
		}
		ar.LossPercent = r.LossPercent
		return env.Cluster.SetRules(ctx, node, ar)
	})
	if len(done) == 0 && err != nil {
		return attempted(cut), err
	}
	active := &Active{Targets: cut, heal: func(ctx context.Context) (any, error) {
		return map[string][]string{"healed": targets}, clearRules(ctx, env, targets)
	}}
	return active, err
}

// clearRules removes the packet filters of the named nodes, retrying a
// node that does not answer (it may be restarting) for a while.
func clearRules(ctx context.Context, env *Env, names []string) error {
	return env.forEach(names, func(node string) error {
		return env.retry(ctx, func() error { return env.Cluster.SetRules(ctx, node, Rules{}) })
	})
}

// retry calls fn until it succeeds, ctx ends or settle passes.
func (e *Env) retry(ctx context.Context, fn func() error) error {
	deadline := e.now().Add(settle)
	for {
		err := fn()
		if err == nil || errors.Is(err, ErrUnsupported) || e.now().After(deadline) {
			return err
		}
		if werr := e.sleep(ctx, 500*time.Millisecond); werr != nil {
			return errors.Join(err, werr)
		}
	}
}

func lossFault() Fault {
	return Fault{
		Name:  "loss:random",
		Doc:   "packet loss: every node drops 5-30 % of the packets to and from the other nodes, at random",
		check: all(runtimeCan(FeatureKernelFilter), atLeast(2)),
		inject: func(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
			percent := []int{5, 10, 20, 30}[rng.IntN(4)]
			names := nodeNames(env)
			cut := Cut{Shape: fmt.Sprintf("loss %d%%", percent), Drops: map[string]Rules{}}
			for _, node := range names {
				peers := slices.DeleteFunc(append([]string(nil), names...), func(s string) bool { return s == node })
				cut.Drops[node] = Rules{LossPercent: percent, LossPeers: peers}
			}
			return applyCut(ctx, env, cut)
		},
	}
}

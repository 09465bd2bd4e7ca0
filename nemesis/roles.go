package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// Roles a fault can target, found through the node protocol's status.
const (
	RoleOldest      = "oldest"
	RoleCoordinator = "coordinator"
	RoleSingleton   = "singleton"
	// RoleOldestHalf: the ⌊n/2⌋ oldest nodes (3 of 6: the singletons' home
	// and the two next in line).
	RoleOldestHalf = "oldest-half"
	// RoleYounger: one node, at random, that is not the oldest — a step's
	// Target for journal-cut, so that the cut node is not the one whose
	// coordinators must write to the journal to move shards away from it.
	RoleYounger = "younger"
)

// roleNeeds is the check that the implementation reports the role how
// names (a plain choice such as "one" needs nothing): the oldest (and
// "not the oldest") needs members with an age, the coordinator the coordinator capability, the
// singleton the singleton capability. A fault aimed at a role the
// implementation does not have is left out up front, not drawn and
// failed.
func roleNeeds(how string) func(env *Env) error {
	switch how {
	case RoleOldest, RoleOldestHalf, RoleYounger:
		return needs(protocol.CapAge)
	case RoleCoordinator:
		return needs(protocol.CapCoordinator)
	case RoleSingleton:
		return needs(protocol.CapSingleton)
	case journalName:
		return needs(protocol.CapJournal)
	}
	return func(*Env) error { return nil }
}

// targetKey carries a step's Target through the context to pick.
type targetKey struct{}

// withTarget fixes the choice of faults that pick "one node, a minority or
// all" at random (Step.Target).
func withTarget(ctx context.Context, how string) context.Context {
	if how == "" {
		return ctx
	}
	return context.WithValue(ctx, targetKey{}, how)
}

// idGenerator is the singleton the idgen workload uses.
const idGenerator = "id-generator"

// statuses reads every node's status concurrently; nodes that do not answer
// within a few seconds are left out.
func statuses(ctx context.Context, env *Env) map[string]protocol.Status {
	var (
		mu  sync.Mutex
		out = map[string]protocol.Status{}
	)
	nodes := env.Cluster.Nodes()
	env.parallel(len(nodes), func(i int) {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		st, err := env.client(nodes[i]).Status(sctx)
		if err != nil {
			return
		}
		mu.Lock()
		out[nodes[i].Name] = st
		mu.Unlock()
	})
	return out
}

// nameOf returns the node name of a member uid (name@incarnation).
func nameOf(uid string) string { name, _, _ := strings.Cut(uid, "@"); return name }

// findRole returns the node that has role now. The oldest is what most
// answering nodes name; the coordinator's and the singleton's node is the
// one whose own status says it runs it (sharding[].coordinator_running;
// the coordinator of the first entity type in name order, if there are
// several).
func findRole(ctx context.Context, env *Env, role string) (string, error) {
	sts := statuses(ctx, env)
	if len(sts) == 0 {
		return "", errors.New("no node answered its status")
	}
	switch role {
	case RoleOldest:
		votes := map[string]int{}
		for _, st := range sts {
			if st.Oldest != "" {
				votes[nameOf(st.Oldest)]++
			}
		}
		best, bestVotes := "", 0
		for name, v := range votes {
			if v > bestVotes || v == bestVotes && name < best {
				best, bestVotes = name, v
			}
		}
		if best == "" {
			return "", errors.New("no node names an oldest member")
		}
		return best, nil
	case RoleCoordinator, RoleSingleton:
		type hit struct{ node, singleton string }
		var hits []hit
		for node, st := range sts {
			for _, s := range st.Singletons {
				if s.Running && role == RoleSingleton && s.Name == idGenerator {
					hits = append(hits, hit{node, s.Name})
				}
			}
			for _, s := range st.Sharding {
				if s.CoordinatorRunning && role == RoleCoordinator {
					hits = append(hits, hit{node, s.Type})
				}
			}
		}
		if len(hits) == 0 {
			return "", fmt.Errorf("no node says it runs the %s", role)
		}
		sort.Slice(hits, func(i, j int) bool {
			if hits[i].singleton != hits[j].singleton {
				return hits[i].singleton < hits[j].singleton
			}
			return hits[i].node < hits[j].node
		})
		return hits[0].node, nil
	}
	return "", fmt.Errorf("unknown role %q", role)
}

// oldest returns the k oldest nodes that are up, by up-number, as the
// node that lists the most members up sees them.
func oldest(ctx context.Context, env *Env, k int) ([]string, error) {
	var best []protocol.Member
	for _, st := range statuses(ctx, env) {
		var up []protocol.Member
		for _, m := range st.Members {
			if m.Status == "up" {
				up = append(up, m)
			}
		}
		if len(up) > len(best) {
			best = up
		}
	}
	if len(best) < k || k < 1 {
		return nil, fmt.Errorf("want the %d oldest nodes, but %d members are up", k, len(best))
	}
	sort.Slice(best, func(i, j int) bool {
		if best[i].UpNumber != best[j].UpNumber {
			return best[i].UpNumber < best[j].UpNumber
		}
		return best[i].UID < best[j].UID
	})
	var out []string
	for _, m := range best[:k] {
		out = append(out, nameOf(m.UID))
	}
	return sorted(out), nil
}

// nodeNames returns the cluster's node names in the runtime's order.
func nodeNames(env *Env) []string {
	var out []string
	for _, n := range env.Cluster.Nodes() {
		out = append(out, n.Name)
	}
	return out
}

// pick chooses targets among names: "one", "minority", "majority", "all",
// or a role.
func pick(ctx context.Context, env *Env, rng *rand.Rand, names []string, how string) ([]string, error) {
	n := len(names)
	shuffled := shuffle(rng, names)
	switch how {
	case "one":
		return shuffled[:1], nil
	case "minority":
		return sorted(shuffled[:max(1, (n-1)/2)]), nil
	case "majority":
		return sorted(shuffled[:n/2+1]), nil
	case "all":
		return sorted(shuffled), nil
	case "some":
		// One node, a minority or all: at random, unless the step fixed it.
		if how, ok := ctx.Value(targetKey{}).(string); ok && how != "some" {
			return pick(ctx, env, rng, names, how)
		}
		return pick(ctx, env, rng, names, []string{"one", "minority", "all"}[rng.IntN(3)])
	case RoleOldestHalf:
		return oldest(ctx, env, n/2)
	}
	node, err := findRole(ctx, env, how)
	if err != nil {
		return nil, err
	}
	return []string{node}, nil
}

func shuffle(rng *rand.Rand, names []string) []string {
	out := append([]string(nil), names...)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func sorted(names []string) []string {
	out := append([]string(nil), names...)
	sort.Strings(out)
	return out
}

// forEach runs fn for every name concurrently and joins the errors.
func (e *Env) forEach(names []string, fn func(name string) error) error {
	_, err := e.forEachDone(names, fn)
	return err
}

// forEachDone is forEach that also returns the names fn succeeded for, so
// an inject can tell a fault that did nothing (no heal, recorded as
// failed) from one that took effect in part.
func (e *Env) forEachDone(names []string, fn func(name string) error) (done []string, err error) {
	errs := make([]error, len(names))
	e.parallel(len(names), func(i int) {
		if err := fn(names[i]); err != nil {
			errs[i] = fmt.Errorf("%s: %w", names[i], err)
		}
	})
	for i, name := range names {
		if errs[i] == nil {
			done = append(done, name)
		}
	}
	return done, errors.Join(errs...)
}

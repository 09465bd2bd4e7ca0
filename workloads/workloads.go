// Package workloads are the client traffic of a test: each workload is a
// generator of operations (deterministic for a seed) and a client that
// performs one operation through the node protocol and classifies its
// outcome as ok, fail (definitely did not happen) or info (unknown).
package workloads

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// Op is one operation to perform.
type Op struct {
	F string
	// Entity is "type/id" for entity operations.
	Entity string
	// Value are the operation's arguments.
	Value json.RawMessage
}

// Options shape a workload's traffic.
type Options struct {
	// Entities is the size of the key space.
	Entities int
	// Skew: 0 picks keys uniformly; above 0 a Zipf distribution with
	// this exponent (>1) favours low-numbered keys.
	Skew float64
	// Concurrency is the number of client workers.
	Concurrency int
	// PerEntity bounds the workers that may have an operation in flight
	// on one entity (the linearizability checker's cost grows steeply with
	// it): workers are grouped, and each group owns a share of the keys.
	PerEntity int
	// Tell: the implementation declares the tell capability, so workloads
	// that can send fire-and-forget messages do.
	Tell bool
}

// Needs is what a workload needs an implementation to declare in GET
// /v1/capabilities.
type Needs struct {
	Capabilities []string
	EntityTypes  []string
	Singletons   []string
}

// Missing says what of n the declared capabilities lack, one reason each;
// none: the workload can run.
func (n Needs) Missing(c protocol.Capabilities) []string {
	var out []string
	for _, x := range n.Capabilities {
		if !c.Has(x) {
			out = append(out, fmt.Sprintf("the %q capability", x))
		}
	}
	for _, t := range n.EntityTypes {
		if !c.HasEntityType(t) {
			out = append(out, fmt.Sprintf("entity type %q", t))
		}
	}
	for _, s := range n.Singletons {
		if !c.HasSingleton(s) {
			out = append(out, fmt.Sprintf("singleton %q", s))
		}
	}
	return out
}

// Workload is a kind of traffic.
type Workload interface {
	Name() string
	// Doc says what the workload does and what a correct system must show.
	Doc() string
	// Needs is what the implementation must declare for it
	// (docs/protocol.md, Capabilities).
	Needs() Needs
	// Generator returns worker's deterministic operation stream.
	Generator(seed int64, worker int, o Options) func() Op
	// Invoke performs op on a node.
	Invoke(ctx context.Context, c *client.Client, op Op) (result json.RawMessage, reply history.Reply, err error)
	// Final returns the operations that read back every entity touched.
	// Consecutive operations of one kind (F) run concurrently; each change
	// of kind waits until the operations before it have finished.
	Final(touched []string) []Op
}

// All lists the workloads.
func All() []Workload { return []Workload{Register{}, Append{}, IDGen{}, Deliver{}} }

// Named returns the workload called name.
func Named(name string) (Workload, error) {
	var names []string
	for _, w := range All() {
		if w.Name() == name {
			return w, nil
		}
		names = append(names, w.Name())
	}
	sort.Strings(names)
	return nil, fmt.Errorf("unknown workload %q (known: %v)", name, names)
}

// keyPicker draws keys for one worker from its group's share of the key
// space, so at most PerEntity workers ever touch one key.
type keyPicker struct {
	rng   *rand.Rand
	keys  []int
	zipf  *rand.Zipf
	group int
}

func newKeyPicker(seed int64, worker int, o Options) *keyPicker {
	per := max(o.PerEntity, 1)
	groups := max(o.Concurrency/per, 1)
	group := (worker / per) % groups
	var keys []int
	for k := range max(o.Entities, 1) {
		if k%groups == group {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		keys = []int{group}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(worker)))
	kp := &keyPicker{rng: rng, keys: keys, group: group}
	if o.Skew > 1 {
		kp.zipf = rand.NewZipf(rng, o.Skew, 1, uint64(len(keys)-1))
	}
	return kp
}

func (k *keyPicker) next() int {
	if k.zipf != nil {
		return k.keys[k.zipf.Uint64()]
	}
	return k.keys[k.rng.IntN(len(k.keys))]
}

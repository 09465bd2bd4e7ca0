// Package nemesis injects faults into a running cluster: network
// partitions and packet loss, crashes, pauses, clock skew and membership
// churn. A fault is a value, like etcd's robustness failpoints: a name, a
// capability check, and an inject that returns what it did and how to heal
// it. The runtime (Docker or local processes) provides the means through
// the Cluster interface; the implementation under test is reached only
// through the node protocol (docs/protocol.md).
//
// A Plan is the fault schedule: a pure function of the seed, so the same
// seed gives the same faults at the same offsets. Targets that depend on
// the cluster's state (the oldest node, the coordinator's node) are looked
// up when the fault is injected; random choices use the step's own seed.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/protocol/client"
)

// ErrUnsupported is wrapped by a Cluster method the runtime cannot perform
// and by a capability check that refuses a fault.
var ErrUnsupported = errors.New("not supported")

// Node is a node as the nemesis reaches it.
type Node struct {
	Name string
	// HTTPAddr is the node protocol address from the harness.
	HTTPAddr string
	// Addr is what a partition names to cut the node off: its IP on the
	// cluster network (Docker) or its gossip address (local runtime).
	Addr string
}

// Rules is one node's packet filter: peers named by Node.Addr. The zero
// value drops nothing.
type Rules struct {
	DropIn  []string `json:"drop_in,omitempty"`
	DropOut []string `json:"drop_out,omitempty"`
	// LossPercent of the packets to and from LossPeers are dropped.
	LossPercent int      `json:"loss_percent,omitempty"`
	LossPeers   []string `json:"loss_peers,omitempty"`
}

// Empty reports whether r drops nothing.
func (r Rules) Empty() bool {
	return len(r.DropIn) == 0 && len(r.DropOut) == 0 && (r.LossPercent == 0 || len(r.LossPeers) == 0)
}

// Cluster is what a runtime lets the nemesis do. A method the runtime
// cannot perform returns an error wrapping ErrUnsupported. "journal" names
// the journal where a method accepts it.
type Cluster interface {
	// Runtime names the runtime (docker, local).
	Runtime() string
	// Features lists what the runtime can do (Feature* constants).
	Features() []string
	// Nodes are the cluster's nodes now, including added ones.
	Nodes() []Node
	Journal() Node
	// SetRules replaces a node's packet filter (zero Rules heals it).
	SetRules(ctx context.Context, node string, r Rules) error
	// Kill kills a node (SIGKILL); Start starts it again with its disk and
	// waits until it is ready.
	Kill(ctx context.Context, name string) error
	Start(ctx context.Context, name string) error
	// Pause freezes a node; Resume thaws it.
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	// AddNode starts one more node and waits until it is ready;
	// RemoveNode stops and removes one.
	AddNode(ctx context.Context) (Node, error)
	RemoveNode(ctx context.Context, name string) error
}

// Features a runtime may offer.
const (
	// FeatureKernelFilter: SetRules drops real packets in the node's
	// network namespace (nftables), for any address, with random loss.
	FeatureKernelFilter = "kernel-filter"
	// FeatureNodeFilter: SetRules goes through the implementation's
	// in-process filter (capability "filter"); peers are nodes only, no loss.
	FeatureNodeFilter = "node-filter"
	FeatureKill       = "kill"
	FeaturePause      = "pause"
	FeatureAddNode    = "add-node"
)

// Env is what a fault works with.
type Env struct {
	Cluster Cluster
	// Capabilities the implementation declares (GET /v1/capabilities).
	Capabilities []string
	Log          *slog.Logger
	// Clock, Client and Parallel let a simulation run the faults in its
	// virtual time: the time faults wait by (nil: the machine's), the
	// client of a node (nil: HTTP to its address), and how work on several
	// nodes runs at once (nil: a goroutine each; a simulation's are
	// coroutines of its world).
	Clock    Clock
	Client   func(Node) *client.Client
	Parallel func(n int, f func(i int))
	// Background, if set, starts f beside the caller and returns a
	// function that waits until f has returned (nil: a goroutine).
	Background func(f func()) (wait func())
}

// background starts f beside the caller (as Background does, or in a
// goroutine); the function it returns waits until f has returned.
func (e *Env) background(f func()) (wait func()) {
	if e.Background != nil {
		return e.Background(f)
	}
	var wg sync.WaitGroup
	wg.Go(f)
	return wg.Wait
}

// Clock is the time faults wait by.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (its error).
	Sleep(ctx context.Context, d time.Duration) error
}

func (e *Env) now() time.Time {
	if e.Clock != nil {
		return e.Clock.Now()
	}
	return time.Now()
}

func (e *Env) sleep(ctx context.Context, d time.Duration) error {
	if e.Clock != nil {
		return e.Clock.Sleep(ctx, d)
	}
	return sleep(ctx, d)
}

// parallel runs f(i) for i < n at once (one goroutine each, or as
// Parallel runs them) and returns once all have returned.
func (e *Env) parallel(n int, f func(i int)) {
	if e.Parallel != nil {
		e.Parallel(n, f)
		return
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

func (e *Env) has(capability string) bool { return slices.Contains(e.Capabilities, capability) }

func (e *Env) client(n Node) *client.Client {
	if e.Client != nil {
		return e.Client(n)
	}
	return client.New(n.HTTPAddr, nil)
}

func (e *Env) log() *slog.Logger {
	if e.Log == nil {
		return slog.Default()
	}
	return e.Log
}

// node returns the named node.
func (e *Env) node(name string) (Node, bool) {
	for _, n := range e.Cluster.Nodes() {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Fault is one kind of fault, e.g. "partition:halves" or "kill:oldest".
type Fault struct {
	// Name is family:variant.
	Name string
	// Doc says what it does, for `shardtest list nemeses`.
	Doc string
	// optIn: the family name alone does not include this fault; it must
	// be asked for by its full name (kill:journal).
	optIn bool
	// Explicit: Parse found the fault named in full, not by its family.
	Explicit bool
	// check refuses the fault for this cluster (runtime, capabilities,
	// size); nil: always possible.
	check func(env *Env) error
	// inject performs the fault and returns what it did and its heal.
	inject func(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error)
}

// Family is the part of the name before the colon.
func (f Fault) Family() string { family, _, _ := strings.Cut(f.Name, ":"); return family }

// Check reports whether the fault can run against env's cluster.
func (f Fault) Check(env *Env) error {
	if f.check == nil {
		return nil
	}
	if err := f.check(env); err != nil {
		return fmt.Errorf("nemesis %s: %w", f.Name, err)
	}
	return nil
}

// Inject performs the fault; rng makes its random choices.
func (f Fault) Inject(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
	a, err := f.inject(ctx, env, rng)
	if err != nil {
		return a, fmt.Errorf("nemesis %s: %w", f.Name, err)
	}
	return a, nil
}

// Active is an injected fault.
type Active struct {
	// Targets say what the fault did, for the history (JSON).
	Targets any
	// heal undoes the fault; nil: nothing to undo.
	heal func(ctx context.Context) (any, error)
	// nothing: the inject failed on every target and did nothing (Targets
	// say what it tried); it is recorded as failed and not healed.
	nothing bool
}

// attempted is the Active of an inject that did nothing: it failed on
// every target it tried.
func attempted(targets any) *Active { return &Active{Targets: targets, nothing: true} }

// Failed reports whether the inject did nothing at all.
func (a *Active) Failed() bool { return a == nil || a.nothing }

// Heal undoes the fault and returns what it did, for the history.
func (a *Active) Heal(ctx context.Context) (any, error) {
	if a == nil || a.heal == nil {
		return nil, nil
	}
	return a.heal(ctx)
}

// Catalog returns every fault, sorted by name.
func Catalog() []Fault {
	var all []Fault
	all = append(all, partitionFaults()...)
	all = append(all, lossFault())
	all = append(all, killFaults()...)
	all = append(all, pauseFaults()...)
	all = append(all, clockFaults()...)
	all = append(all, memberFaults()...)
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all
}

// Parse turns a --nemesis list ("partition,kill:oldest,clock") into faults:
// a family name stands for every variant of it (but kill:journal, which
// must be named); "none" or "" is no fault. Duplicates are dropped.
func Parse(spec string) ([]Fault, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "none" {
		return nil, nil
	}
	all := Catalog()
	var out []Fault
	seen := map[string]int{} // name → index in out
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		found := false
		for _, f := range all {
			if f.Name == item || (f.Family() == item && !f.optIn) {
				found = true
				f.Explicit = f.Name == item
				if i, dup := seen[f.Name]; dup {
					out[i].Explicit = out[i].Explicit || f.Explicit
					continue
				}
				seen[f.Name] = len(out)
				out = append(out, f)
			}
		}
		if !found {
			return nil, fmt.Errorf("--nemesis %q: unknown fault %q (shardtest list nemeses shows them)", spec, item)
		}
	}
	return out, nil
}

// Names returns the faults' names.
func Names(fs []Fault) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}

// needs returns a check that the implementation declares capability.
func needs(capability string) func(env *Env) error {
	return func(env *Env) error {
		if !env.has(capability) {
			return fmt.Errorf("%w: the implementation does not declare the %q capability", ErrUnsupported, capability)
		}
		return nil
	}
}

// runtimeCan returns a check that the runtime offers feature.
func runtimeCan(feature string) func(env *Env) error {
	return func(env *Env) error {
		if !slices.Contains(env.Cluster.Features(), feature) {
			return fmt.Errorf("%w by the %s runtime (it lacks %s)", ErrUnsupported, env.Cluster.Runtime(), feature)
		}
		return nil
	}
}

// atLeast returns a check for a minimum cluster size.
func atLeast(n int) func(env *Env) error {
	return func(env *Env) error {
		if have := len(env.Cluster.Nodes()); have < n {
			return fmt.Errorf("needs at least %d nodes, the cluster has %d", n, have)
		}
		return nil
	}
}

// all combines checks.
func all(checks ...func(env *Env) error) func(env *Env) error {
	return func(env *Env) error {
		for _, c := range checks {
			if err := c(env); err != nil {
				return err
			}
		}
		return nil
	}
}

// settle is how long a heal keeps retrying a node that does not answer.
const settle = 90 * time.Second

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

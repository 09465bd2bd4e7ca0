package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/harness/docker"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// ClusterOptions are one measurement of a Docker cluster of the reference
// node at one size.
type ClusterOptions struct {
	Nodes int
	// Idle is the window over which the idle rates are taken (the harness
	// sends the nodes nothing meanwhile).
	Idle time.Duration
	// Binary is the static shardtest binary for the image ("": find one).
	Binary string
	// NodeArgs go to every node after the bench's own --stable-after
	// (resolverIdle).
	NodeArgs []string
	// Dir receives the nodes' logs.
	Dir string
	Log *slog.Logger
}

// resolverIdle is every node's --stable-after: it keeps the split-brain
// resolver from acting during the bench's partition, which is there to
// make the members unreachable and measure how fast the view heals, not to
// down a side (a downed side rejoins as new incarnations, which would time
// restarts instead).
const resolverIdle = "10m"

// ClusterCost is what one cluster size cost.
type ClusterCost struct {
	Nodes int `json:"nodes"`
	// Started: from the start of docker.Start to its return (network,
	// journal and node containers created, every node reporting itself
	// ready). It includes hashing the binary to name its image; the image
	// itself is built beforehand, outside the time.
	Started time.Duration `json:"started_ns"`
	// Ready: from the same start until every node counts every node up and
	// reaches every member (run.ViewConverged): what a run waits for.
	Ready time.Duration `json:"ready_ns"`
	// Detect: from the partition's rules in place until every node finds
	// every member on the other side unreachable.
	Detect time.Duration `json:"detect_ns"`
	// Converge: from the heal's rules in place until every node is
	// converged again.
	Converge time.Duration `json:"converge_ns"`
	// Idle are the nodes' rates over the idle window, node by node, and
	// Memory their resident memory at its end.
	Idle   []docker.Rates `json:"idle"`
	Memory []uint64       `json:"memory_bytes"`
	// Journal is the journal container's rates over the same window.
	Journal docker.Rates `json:"journal"`
}

// MeasureCluster starts a cluster of o.Nodes nodes on Docker, measures it
// (ready, idle, a partition into halves and its heal) and stops it.
func MeasureCluster(ctx context.Context, o ClusterOptions) (cost ClusterCost, err error) {
	if o.Nodes < 2 {
		return cost, fmt.Errorf("bench cluster: want at least 2 nodes, got %d", o.Nodes)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	cost.Nodes = o.Nodes
	cli, err := docker.NewClient(ctx)
	if err != nil {
		return cost, err
	}
	defer cli.Close()
	if o.Binary == "" {
		if o.Binary, err = docker.StaticBinary(ctx); err != nil {
			return cost, err
		}
	}
	if _, err := docker.EnsureImage(ctx, cli, o.Binary); err != nil {
		return cost, err
	}
	t0 := time.Now()
	c, err := docker.Start(ctx, docker.Options{Nodes: o.Nodes, Dir: o.Dir, Binary: o.Binary, Client: cli,
		NodeArgs: append([]string{"--stable-after", resolverIdle}, o.NodeArgs...), Logger: o.Log})
	if err != nil {
		return cost, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, c.Stop(sctx))
	}()
	cost.Started = time.Since(t0)
	nodes := c.Nodes()
	names := make([]string, len(nodes))
	clients := make([]*client.Client, len(nodes))
	for i, n := range nodes {
		names[i], clients[i] = n.Name, client.New(n.HTTPAddr, nil)
	}
	if err := waitViews(ctx, clients, time.Minute, func(_ int, st protocol.Status) bool { return run.ViewConverged(st, names) == "" }); err != nil {
		return cost, fmt.Errorf("%d nodes never converged: %w", o.Nodes, err)
	}
	cost.Ready = time.Since(t0)

	if cost.Idle, cost.Memory, cost.Journal, err = idleRates(ctx, c, names, o.Idle); err != nil {
		return cost, err
	}

	// Halves: the first ceil(N/2) nodes against the rest, both directions.
	side := func(i int) int { return min(i/((len(nodes)+1)/2), 1) }
	var ips [2][]string
	for i, n := range nodes {
		ips[side(i)] = append(ips[side(i)], n.IP)
	}
	if err := each(len(names), func(i int) error {
		other := strings.Join(ips[1-side(i)], ",")
		_, err := c.Net(ctx, names[i], []string{"apply", "--drop-in", other, "--drop-out", other})
		return err
	}); err != nil {
		return cost, fmt.Errorf("partition: %w", err)
	}
	t1 := time.Now()
	if err := waitViews(ctx, clients, time.Minute, func(i int, st protocol.Status) bool {
		return len(st.Unreachable) >= len(ips[1-side(i)])
	}); err != nil {
		return cost, fmt.Errorf("the halves never found each other unreachable: %w", err)
	}
	cost.Detect = time.Since(t1)
	if err := each(len(names), func(i int) error {
		_, err := c.Net(ctx, names[i], []string{"heal"})
		return err
	}); err != nil {
		return cost, fmt.Errorf("heal: %w", err)
	}
	t2 := time.Now()
	if err := waitViews(ctx, clients, time.Minute, func(_ int, st protocol.Status) bool { return run.ViewConverged(st, names) == "" }); err != nil {
		return cost, fmt.Errorf("%d nodes never converged after the heal: %w", o.Nodes, err)
	}
	cost.Converge = time.Since(t2)
	return cost, nil
}

// idleRates reads every node's and the journal's counters, waits idle,
// and reads them again.
func idleRates(ctx context.Context, c *docker.Cluster, names []string, idle time.Duration) ([]docker.Rates, []uint64, docker.Rates, error) {
	all := append(slices.Clone(names), docker.JournalName)
	read := func() ([]docker.Usage, error) {
		us := make([]docker.Usage, len(all))
		err := each(len(all), func(i int) (err error) {
			us[i], err = c.Usage(ctx, all[i])
			return err
		})
		return us, err
	}
	before, err := read()
	if err != nil {
		return nil, nil, docker.Rates{}, err
	}
	select {
	case <-ctx.Done():
		return nil, nil, docker.Rates{}, ctx.Err()
	case <-time.After(idle):
	}
	after, err := read()
	if err != nil {
		return nil, nil, docker.Rates{}, err
	}
	rates := make([]docker.Rates, len(names))
	mem := make([]uint64, len(names))
	for i := range names {
		rates[i], mem[i] = after[i].Since(before[i]), after[i].Memory
	}
	return rates, mem, after[len(names)].Since(before[len(names)]), nil
}

// each runs f(0), ..., f(n-1) at once and joins their errors.
func each(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pollEvery is how often waitViews asks every node for its status: the
// resolution of Ready, Detect and Converge.
const pollEvery = 50 * time.Millisecond

// waitViews asks every node for its status every pollEvery until ok holds
// for every node's in the same round, or timeout.
func waitViews(ctx context.Context, clients []*client.Client, timeout time.Duration, ok func(i int, st protocol.Status) bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var why string
	for {
		done := make([]bool, len(clients))
		var mu sync.Mutex
		_ = each(len(clients), func(i int) error {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			st, err := clients[i].Status(sctx)
			done[i] = err == nil && ok(i, st)
			if !done[i] {
				mu.Lock()
				why = fmt.Sprintf("node %d of %d: status %v", i+1, len(clients), err)
				if err == nil {
					why = fmt.Sprintf("%s: unreachable %v, ready %v", st.Self.Name, st.Unreachable, st.Ready)
				}
				mu.Unlock()
			}
			return nil
		})
		if !slices.Contains(done, false) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %s)", ctx.Err(), why)
		case <-time.After(pollEvery):
		}
	}
}

// ClusterSummary is one cluster size over its repeats: medians, with the
// fastest and slowest repeat of Ready and Converge. Per-node figures pool
// every node of every repeat.
type ClusterSummary struct {
	Nodes, Repeats                     int
	Started, Detect                    time.Duration
	Ready, ReadyMin, ReadyMax          time.Duration
	Converge, ConvergeMin, ConvergeMax time.Duration
	// CPU is a node's share of one core while idle; Memory its resident
	// memory; Sent and Received its network bytes per second while idle
	// (median node).
	CPU            float64
	Memory         uint64
	Sent, Received float64
	// SentMax is the busiest node's bytes sent per second.
	SentMax float64
	// JournalSent is the journal's bytes sent per second while idle.
	JournalSent float64
}

// SummarizeClusters groups costs by cluster size, in the order the sizes
// first appear.
func SummarizeClusters(costs []ClusterCost) []ClusterSummary {
	var order []int
	by := map[int][]ClusterCost{}
	for _, c := range costs {
		if _, ok := by[c.Nodes]; !ok {
			order = append(order, c.Nodes)
		}
		by[c.Nodes] = append(by[c.Nodes], c)
	}
	var out []ClusterSummary
	for _, n := range order {
		cs := by[n]
		s := ClusterSummary{Nodes: n, Repeats: len(cs)}
		var started, ready, detect, conv []time.Duration
		var cpu, sent, recv, jsent []float64
		var mem []uint64
		for _, c := range cs {
			started, ready = append(started, c.Started), append(ready, c.Ready)
			detect, conv = append(detect, c.Detect), append(conv, c.Converge)
			for _, r := range c.Idle {
				cpu, sent, recv = append(cpu, r.CPU), append(sent, r.TxBytes), append(recv, r.RxBytes)
			}
			mem = append(mem, c.Memory...)
			jsent = append(jsent, c.Journal.TxBytes)
		}
		s.Started, s.Detect = medianOf(started), medianOf(detect)
		s.Ready, s.ReadyMin, s.ReadyMax = medianOf(ready), slices.Min(ready), slices.Max(ready)
		s.Converge, s.ConvergeMin, s.ConvergeMax = medianOf(conv), slices.Min(conv), slices.Max(conv)
		s.CPU, s.Sent, s.Received, s.JournalSent = medianOf(cpu), medianOf(sent), medianOf(recv), medianOf(jsent)
		s.Memory = medianOf(mem)
		if len(sent) > 0 {
			s.SentMax = slices.Max(sent)
		}
		out = append(out, s)
	}
	return out
}

// medianOf is the middle value (the upper one of an even count); zero for
// none.
func medianOf[T int64 | uint64 | float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// ClusterRatios is the bench's last line: each size's ready time, convergence
// time and bytes sent per node against the first size's, beside the ratio
// of their node counts (linear growth is a ratio equal to it).
func ClusterRatios(sums []ClusterSummary) string {
	if len(sums) < 2 {
		return "one cluster size: no ratio (give --nodes two sizes or more)"
	}
	base := sums[0]
	ratio := func(a, b float64) string {
		if b == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	var parts []string
	for _, s := range sums[1:] {
		parts = append(parts, fmt.Sprintf("%d nodes (%s the nodes): ready %s, converge %s, sent per node %s",
			s.Nodes, ratio(float64(s.Nodes), float64(base.Nodes)),
			ratio(float64(s.Ready), float64(base.Ready)), ratio(float64(s.Converge), float64(base.Converge)),
			ratio(s.Sent, base.Sent)))
	}
	return fmt.Sprintf("against %d nodes (medians): %s", base.Nodes, strings.Join(parts, "; "))
}

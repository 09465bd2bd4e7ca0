package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/workloads"
)

// LoadOptions are a load curve: closed loops of more and more workers
// against one local cluster of the reference node.
type LoadOptions struct {
	// Binary is the shardtest executable the nodes run.
	Binary   string
	BasePort int
	Nodes    int
	// Concurrency are the numbers of workers, one point of the curve each.
	Concurrency []int
	// Window is each loop's length; Repeat how many times each point
	// runs both loops, alternately (plain, recorded, plain, ...), so that
	// a slow moment of the machine weighs on both alike.
	Window time.Duration
	Repeat int
	// Entities and PerEntity shape the register workload, as run's flags.
	Entities, PerEntity int
	Seed                int64
	// Dir receives the nodes' logs and the recorded histories (each
	// removed once read).
	Dir string
	Log *slog.Logger
}

// LoopCost is one kind of loop at one point, over all its windows.
type LoopCost struct {
	// Ops are the operations completed (any outcome); NotOK those that
	// did not complete ok.
	Ops, NotOK int
	Over       time.Duration
	// Latency is each operation's time as its worker saw it (for the
	// recorded loop, writing its two history entries included).
	Latency Latency
	// Harness and Cluster are the CPU they used, in cores (1 = one core
	// busy the whole time): this process, and the nodes' and the
	// journal's processes. Machine is every process's on this machine
	// (from /proc/stat), so Machine against the core count says whether
	// the CPU was the limit.
	Harness, Cluster, Machine float64
}

// Rate is operations per second.
func (l LoopCost) Rate() float64 {
	if l.Over <= 0 {
		return 0
	}
	return float64(l.Ops) / l.Over.Seconds()
}

// LoadPoint is one number of workers: the loop that records nothing (the
// yardstick) and the same loop recording a history, as a run does.
type LoadPoint struct {
	Concurrency     int
	Plain, Recorded LoopCost
}

// MeasureLoad starts the cluster, warms it up, measures every point and
// stops it.
func MeasureLoad(ctx context.Context, o LoadOptions) (points []LoadPoint, err error) {
	if o.Nodes < 1 || o.Window <= 0 || o.Repeat < 1 || len(o.Concurrency) == 0 {
		return nil, fmt.Errorf("bench load: want nodes, a window, a repeat and a concurrency, got %+v", o)
	}
	for _, n := range o.Concurrency {
		if n < 1 {
			return nil, fmt.Errorf("bench load: concurrency %d: want at least 1", n)
		}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	w, err := workloads.Named("register")
	if err != nil {
		return nil, err
	}
	c, err := local.Start(ctx, local.Options{Binary: o.Binary, Nodes: o.Nodes, BasePort: o.BasePort, Dir: o.Dir, Logger: o.Log})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	var nodes []run.Node
	var pids []int
	for _, p := range c.NodeList() {
		nodes = append(nodes, run.Node{Name: p.Name, HTTPAddr: p.HTTPAddr})
		pids = append(pids, p.Pid())
	}
	pids = append(pids, c.Journal.Pid())
	test := func(n int, seed int64) *run.Test {
		return &run.Test{Options: run.Options{Name: "bench-load", Workload: "register", Nodes: o.Nodes, Concurrency: n,
			Entities: o.Entities, PerEntity: o.PerEntity, Seed: seed, OpTimeout: protocol.DefaultOpTimeout},
			Workload: w, Log: o.Log}
	}
	// Warm-up, not counted: the first operation on an entity starts it
	// (and its shard), which the first point would pay alone.
	if _, err := loop(ctx, test(slices.Max(o.Concurrency), o.Seed-1), nil, nodes, pids, o.Window, &LoopCost{}, nil); err != nil {
		return nil, err
	}
	for _, n := range o.Concurrency {
		p := LoadPoint{Concurrency: n}
		var plain, recorded []time.Duration
		for r := range o.Repeat {
			t := test(n, o.Seed+int64(r))
			if plain, err = loop(ctx, t, nil, nodes, pids, o.Window, &p.Plain, plain); err != nil {
				return nil, err
			}
			path := filepath.Join(o.Dir, "history-"+strconv.Itoa(n)+"-"+strconv.Itoa(r)+".jsonl")
			hw, err := history.Create(path, "bench-load", time.Now())
			if err != nil {
				return nil, err
			}
			recorded, err = loop(ctx, t, hw, nodes, pids, o.Window, &p.Recorded, recorded)
			if err = errors.Join(err, hw.Close(), os.Remove(path)); err != nil {
				return nil, err
			}
		}
		p.Plain.Latency, p.Recorded.Latency = summarise(plain), summarise(recorded)
		points = append(points, p)
	}
	return points, nil
}

// loop runs t's workers for window, recording into hw (nil: nothing),
// adds what it cost to into, and returns lats with its operations' times
// appended.
func loop(ctx context.Context, t *run.Test, hw *history.Writer, nodes []run.Node, pids []int, window time.Duration, into *LoopCost, lats []time.Duration) ([]time.Duration, error) {
	byWorker := make([][]time.Duration, t.Options.Concurrency)
	notOK := make([]int, t.Options.Concurrency)
	cpu0, err := cpuOf(pids)
	if err != nil {
		return nil, err
	}
	self0, err := readUsage(os.Getpid())
	if err != nil {
		return nil, err
	}
	busy0, err := machineBusy()
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, window)
	start := time.Now()
	t.Drive(wctx, hw, nodes, func(w int, kind string, d time.Duration) {
		byWorker[w] = append(byWorker[w], d)
		if kind != history.OK {
			notOK[w]++
		}
	})
	over := time.Since(start)
	cancel()
	cpu1, err := cpuOf(pids)
	if err != nil {
		return nil, err
	}
	self1, err := readUsage(os.Getpid())
	if err != nil {
		return nil, err
	}
	busy1, err := machineBusy()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for w, ds := range byWorker {
		lats = append(lats, ds...)
		into.Ops += len(ds)
		into.NotOK += notOK[w]
	}
	into.Over += over
	// Cores are CPU time over wall time: a weighted mean over the windows.
	into.Harness = addCores(into.Harness, into.Over-over, self1.cpu-self0.cpu, over)
	into.Cluster = addCores(into.Cluster, into.Over-over, cpu1-cpu0, over)
	into.Machine = addCores(into.Machine, into.Over-over, busy1-busy0, over)
	return lats, nil
}

// addCores folds cpu over one more window of length over into a mean of
// cores over the windows before it (of total length before).
func addCores(mean float64, before, cpu, over time.Duration) float64 {
	return (mean*before.Seconds() + cpu.Seconds()) / (before + over).Seconds()
}

// machineBusy is the CPU time every core of the machine has spent busy
// (not idle, not waiting for I/O) since boot, from /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest times are in user already
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}

// cpuOf is the CPU time the processes have used so far.
func cpuOf(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		u, err := readUsage(pid)
		if err != nil {
			return 0, err
		}
		total += u.cpu
	}
	return total, nil
}

// LoadKnee names the first point whose recorded rate grew by less than a
// tenth over the point before it although its workers at least doubled
// (more workers, no more operations: something is the limit), or "" if
// every point still grew.
func LoadKnee(points []LoadPoint) string {
	for i := 1; i < len(points); i++ {
		a, b := points[i-1], points[i]
		if b.Concurrency >= 2*a.Concurrency && b.Recorded.Rate() < 1.1*a.Recorded.Rate() {
			return fmt.Sprintf("%d workers (%.0f ops/s recorded, %.0f at %d)", b.Concurrency, b.Recorded.Rate(), a.Recorded.Rate(), a.Concurrency)
		}
	}
	return ""
}

// LoadRatios is bench load's last line: at each point the recorded loop's
// rate against the plain loop's, and the p99 the recording added.
func LoadRatios(points []LoadPoint) string {
	var parts []string
	for _, p := range points {
		r := "n/a"
		if p.Plain.Rate() > 0 {
			r = fmt.Sprintf("%.2f×", p.Recorded.Rate()/p.Plain.Rate())
		}
		parts = append(parts, fmt.Sprintf("%d: %s (p99 %+.1f ms)", p.Concurrency, r,
			float64(p.Recorded.Latency.P99-p.Plain.Latency.P99)/float64(time.Millisecond)))
	}
	return "recorded/plain ops/s by workers: " + strings.Join(parts, ", ")
}

package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// Usage is what the engine counts for one container: cumulative CPU time
// and network bytes since it started, and its memory now. Two Usages of the
// same container give the rates between them (Since).
type Usage struct {
	// Read is when the engine read the counters.
	Read time.Time
	// CPU is the container's CPU time, user and system, since it started.
	CPU time.Duration
	// Memory is the container's resident anonymous memory (heap and
	// stacks; page cache not counted): cgroup v1's rss, v2's anon.
	Memory uint64
	// TxBytes and RxBytes are what its network interfaces sent and
	// received, every peer and protocol together.
	TxBytes, RxBytes uint64
}

// Usage reads the engine's counters of the named container (a node's name
// or JournalName) once.
func (c *Cluster) Usage(ctx context.Context, name string) (Usage, error) {
	n, err := c.lookup(name)
	if err != nil {
		return Usage{}, err
	}
	res, err := c.cli.ContainerStats(ctx, n.ContainerID, client.ContainerStatsOptions{})
	if err != nil {
		return Usage{}, fmt.Errorf("docker: stats of %s: %w", name, err)
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return Usage{}, fmt.Errorf("docker: stats of %s: %w", name, err)
	}
	return usageOf(s), nil
}

// usageOf takes the counters out of the engine's answer.
func usageOf(s container.StatsResponse) Usage {
	u := Usage{Read: s.Read, CPU: time.Duration(s.CPUStats.CPUUsage.TotalUsage), Memory: residentMemory(s.MemoryStats)}
	for _, nw := range s.Networks {
		u.TxBytes += nw.TxBytes
		u.RxBytes += nw.RxBytes
	}
	return u
}

// residentMemory is the anonymous memory of the container's cgroup: "rss"
// under cgroup v1, "anon" under v2; failing both, the usage less the page
// cache (what `docker stats` shows).
func residentMemory(m container.MemoryStats) uint64 {
	for _, k := range []string{"total_rss", "rss", "anon"} {
		if v, ok := m.Stats[k]; ok {
			return v
		}
	}
	for _, k := range []string{"total_inactive_file", "inactive_file", "cache"} {
		if v, ok := m.Stats[k]; ok && v < m.Usage {
			return m.Usage - v
		}
	}
	return m.Usage
}

// Rates are a container's use per second of wall time between two Usages.
type Rates struct {
	// Over is the time between the two readings.
	Over time.Duration
	// CPU is the share of one core it used (1 = a whole core).
	CPU float64
	// TxBytes and RxBytes are bytes per second.
	TxBytes, RxBytes float64
}

// Since is the use from an earlier reading u0 to u; the zero Rates if u is
// not later, or if a counter went back (the container restarted between
// them: its counters start again from zero).
func (u Usage) Since(u0 Usage) Rates {
	d := u.Read.Sub(u0.Read)
	if d <= 0 || u.CPU < u0.CPU || u.TxBytes < u0.TxBytes || u.RxBytes < u0.RxBytes {
		return Rates{}
	}
	s := d.Seconds()
	return Rates{
		Over:    d,
		CPU:     float64(u.CPU-u0.CPU) / float64(d),
		TxBytes: float64(u.TxBytes-u0.TxBytes) / s,
		RxBytes: float64(u.RxBytes-u0.RxBytes) / s,
	}
}

package nodes

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/persistence"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/protocol"
)

// shardedCluster is a simulated cluster of n nodes running the register
// and log entity types.
func shardedCluster(t *testing.T, seed uint64, n int, trace *[]string) *Cluster {
	t.Helper()
	j, err := persistence.Open(filepath.Join(t.TempDir(), "journal.db"), persistence.StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	c, err := New(Config{Seed: seed, Nodes: n, Journal: j, StartEvery: startEvery(seed),
		EntityTypes: []string{protocol.TypeRegister, protocol.TypeLog},
		Trace: func(s string) {
			if trace != nil {
				*trace = append(*trace, s)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRegistersServedThroughAnyNode: writes to many registers, each sent
// through a node of its own choosing, are read back through another node:
// the regions find the shards' homes through the coordinator, forward to
// them, and the real register entities keep what was written.
func TestRegistersServedThroughAnyNode(t *testing.T) {
	for seed := range uint64(4) {
		var trace []string
		c := shardedCluster(t, seed, 3, &trace)
		c.Run(15 * time.Second)
		const entities = 30
		type outcome struct {
			rep sharding.Reply
			err error
			ok  bool
		}
		writes := make([]outcome, entities)
		for i := range entities {
			payload, _ := json.Marshal(map[string]int{"value": i + 100})
			c.Deliver(fmt.Sprintf("n%d", i%3+1), protocol.TypeRegister, sharding.Message{EntityID: fmt.Sprintf("e%d", i), Op: protocol.OpWrite, Payload: payload},
				func(rep sharding.Reply, err error) { writes[i] = outcome{rep, err, true} })
		}
		c.Run(c.World.Now() + 5*time.Second)
		reads := make([]outcome, entities)
		for i := range entities {
			c.Deliver(fmt.Sprintf("n%d", (i+1)%3+1), protocol.TypeRegister, sharding.Message{EntityID: fmt.Sprintf("e%d", i), Op: protocol.OpRead},
				func(rep sharding.Reply, err error) { reads[i] = outcome{rep, err, true} })
		}
		c.Run(c.World.Now() + 5*time.Second)
		nodes := map[string]bool{}
		for i := range entities {
			w, r := writes[i], reads[i]
			if !w.ok || w.err != nil || !r.ok || r.err != nil {
				t.Fatalf("seed %d entity e%d: write %+v, read %+v\n%s", seed, i, w, r, tail(trace))
			}
			if !strings.Contains(string(r.rep.Payload), fmt.Sprint(i+100)) {
				t.Fatalf("seed %d entity e%d: read %s after writing %d", seed, i, r.rep.Payload, i+100)
			}
			if w.rep.EntityIncarnation != r.rep.EntityIncarnation {
				t.Fatalf("seed %d entity e%d: written by %s, read from %s", seed, i, w.rep.EntityIncarnation, r.rep.EntityIncarnation)
			}
			nodes[w.rep.Node] = true
		}
		t.Logf("seed %d: shards on %v; %d events of the network", seed, nodes, c.Net.Stats().Sent)
		if len(nodes) < 2 {
			t.Fatalf("seed %d: every shard on one member (%v): the coordinator should spread them", seed, nodes)
		}
	}
}

// TestRegionsRegisterOnJoining: each node's regions are registered with
// the coordinator within 300 ms of its member being Up (the coordinator
// may still be starting: the proxy tries again every 200 ms), as on the
// real node, whose coordinator takes each membership change at once
// (Membership.Changed). The simulated coordinator used to look at the
// membership only at its watch tick (every 500 ms): a joining member's
// registration was refused ("not known to the coordinator yet") and came
// back a retry interval later, after the harness's traffic had begun, so
// the coordinator gave the first shards to its own node's region alone
// (coordinator-crash then had nothing on the survivors to allocate twice).
func TestRegionsRegisterOnJoining(t *testing.T) {
	for seed := range uint64(6) {
		c := shardedCluster(t, seed, 3, nil)
		upAt, regAt := map[string]time.Duration{}, map[string]time.Duration{}
		for c.World.Now() < 10*time.Second && c.World.Step() {
			for _, n := range c.Nodes() {
				if _, ok := upAt[n.Name]; !ok && n.Status() == "up" {
					upAt[n.Name] = c.World.Now()
				}
				if _, ok := regAt[n.Name]; ok || n.inc == nil {
					continue
				}
				all := true
				for _, r := range n.inc.regions {
					all = all && r.registered && r.registeredAt == r.coordinatorAt()
				}
				if all {
					regAt[n.Name] = c.World.Now()
				}
			}
		}
		for _, n := range c.Nodes() {
			up, okU := upAt[n.Name]
			reg, okR := regAt[n.Name]
			if !okU || !okR || reg-up > 300*time.Millisecond {
				t.Errorf("seed %d: %s Up at %v (%v), its regions registered at %v (%v): want within 300 ms", seed, n.Name, up, okU, reg, okR)
			}
		}
	}
}

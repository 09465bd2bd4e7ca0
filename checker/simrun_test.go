package checker

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/shardtest/shardtest/history"
)

// runOptions shape a simulated run with faults: times in nanoseconds,
// register ops on entities and next-id ops on the singleton, both served
// as a correct cluster would.
type runOptions struct {
	seed              uint64
	clients, entities int
	ops               int   // invocations
	step              int64 // mean ns between events
	// Faults: every faultEvery ns from the first one, a fault of
	// faultLen ns; while one is in effect no op completes ok (it times
	// out as info, or waits for the heal), and every entity and the
	// singleton get a new incarnation when it heals.
	faultEvery, faultLen int64
}

// simRun simulates a run with phases, nemesis entries and replies naming
// incarnations and singleton instances.
func simRun(o runOptions) *history.File {
	rng := rand.New(rand.NewPCG(o.seed, 3))
	b := &hb{}
	b.add(history.Op{Time: 0, Kind: history.Phase, Process: -1, F: "warm-up"})
	t := 5 * o.step
	b.add(history.Op{Time: t, Kind: history.Phase, Process: -1, F: "main"})
	type client struct {
		busy bool
		ent  string
	}
	cs := make([]client, o.clients)
	faults := []string{"partition:halves", "kill:oldest", "pause:random"}
	epoch, nextFault, faulty := 0, t+o.faultEvery, false
	healAt := int64(0)
	nemesis := func(f, action string, began int64) {
		v, _ := json.Marshal(map[string]any{"action": action, "began": began, "targets": map[string]any{"nodes": []string{"n1"}}})
		b.add(history.Op{Time: t, Kind: history.Nemesis, Process: -1, F: f, Value: v})
	}
	n := 0
	for n < o.ops || anyBusy(len(cs), func(i int) bool { return cs[i].busy }) {
		t += 1 + rng.Int64N(2*o.step)
		switch {
		case o.faultEvery > 0 && !faulty && t >= nextFault && n < o.ops:
			nemesis(faults[epoch%len(faults)], "inject", t-o.step)
			faulty, healAt = true, t+o.faultLen
			continue
		case faulty && t >= healAt:
			nemesis(faults[epoch%len(faults)], "heal", t-o.step)
			faulty, nextFault = false, t+o.faultEvery
			epoch++
			continue
		}
		p := rng.IntN(o.clients)
		c := &cs[p]
		if !c.busy {
			if n >= o.ops {
				continue
			}
			n++
			c.busy = true
			if rng.IntN(10) == 0 {
				c.ent = ""
				b.inv(t, p, "next-id", "", "")
			} else {
				c.ent = fmt.Sprintf("register/r%d", rng.IntN(o.entities))
				b.inv(t, p, "read", c.ent, "")
			}
			continue
		}
		if faulty {
			if rng.IntN(20) == 0 {
				b.info(t, p)
				c.busy = false
			}
			continue
		}
		c.busy = false
		if rng.IntN(100) == 0 {
			b.fail(t, p)
			continue
		}
		host := fmt.Sprintf("n%d@i%d", epoch%3+1, epoch)
		if c.ent == "" {
			b.ok(t, p, fmt.Sprintf(`{"id":%d}`, n))
			b.ops[len(b.ops)-1].Reply.Singleton = fmt.Sprintf("%s#%d", host, epoch+1)
			continue
		}
		b.ok(t, p, `{"value":null}`)
		r := b.ops[len(b.ops)-1].Reply
		r.Shard, r.HostNode, r.EntityIncarnation = "7", host, fmt.Sprintf("%s/%s", host, c.ent)
	}
	b.add(history.Op{Time: t + 1, Kind: history.Phase, Process: -1, F: "final"})
	return b.file()
}

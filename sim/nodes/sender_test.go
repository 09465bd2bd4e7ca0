package nodes

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/persistence"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/protocol"
)

// TestSenderDeliversAcrossKills: messages stored by a simulated
// at-least-once sender all reach their log, while the nodes are killed
// and restarted one after another (the sender and the log move, and a
// restarted sender resends what it had not had confirmed); a flush then
// reports nothing unconfirmed, and with de-duplication each message is in
// the log exactly once.
func TestSenderDeliversAcrossKills(t *testing.T) {
	for seed := range uint64(3) {
		j, err := persistence.Open(filepath.Join(t.TempDir(), "journal.db"), persistence.StoreOptions{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		var trace []string
		c, err := New(Config{Seed: seed, Nodes: 3, Journal: j, StartEvery: startEvery(seed),
			EntityTypes: []string{protocol.TypeLog, protocol.TypeSender},
			Trace:       func(s string) { trace = append(trace, s) }})
		if err != nil {
			t.Fatal(err)
		}
		c.Run(15 * time.Second)
		const messages = 30
		acked, incs := map[int64]bool{}, map[string]bool{}
		call := func(node, typ, id, op string, payload any, done func(sharding.Reply, error)) {
			var raw json.RawMessage
			if payload != nil {
				raw, _ = json.Marshal(payload)
			}
			c.Deliver(node, typ, sharding.Message{EntityID: id, Op: op, Payload: raw}, done)
		}
		for i := range messages {
			at := c.World.Now() + time.Duration(i)*1500*time.Millisecond
			c.World.At(at, func() {
				call(fmt.Sprintf("n%d", i%3+1), protocol.TypeSender, "s1", protocol.OpSend,
					protocol.SenderSend{To: "d1", Client: "c", Seq: int64(i + 1), Dedup: true},
					func(rep sharding.Reply, err error) {
						if err == nil {
							acked[int64(i+1)] = true
							incs[rep.EntityIncarnation] = true
						}
					})
			})
		}
		// Kill each node in turn, mid-traffic, and start it again.
		for k, name := range []string{"n1", "n2", "n3"} {
			at := c.World.Now() + time.Duration(k)*15*time.Second + time.Second
			c.World.At(at, func() { c.Kill(name) })
			c.World.At(at+2*time.Second, func() { c.Start(name) })
		}
		c.Run(c.World.Now() + 60*time.Second)
		var flushed, read string
		flushErr, readErr := fmt.Errorf("no answer"), fmt.Errorf("no answer")
		call("n1", protocol.TypeSender, "s1", protocol.OpFlush, nil, func(rep sharding.Reply, err error) {
			flushed, flushErr = string(rep.Payload), err
		})
		c.Run(c.World.Now() + 15*time.Second)
		call("n2", protocol.TypeLog, "d1", protocol.OpRead, nil, func(rep sharding.Reply, err error) {
			read, readErr = string(rep.Payload), err
		})
		c.Run(c.World.Now() + 5*time.Second)
		if flushErr != nil || flushed != `{"unconfirmed":0}` {
			t.Fatalf("seed %d: flush %s, %v; want nothing unconfirmed\n%s", seed, flushed, flushErr, tail(trace))
		}
		if readErr != nil {
			t.Fatalf("seed %d: read the log: %v", seed, readErr)
		}
		var log protocol.LogReadResult
		if err := json.Unmarshal([]byte(read), &log); err != nil {
			t.Fatalf("seed %d: log %s: %v", seed, read, err)
		}
		count := map[int64]int{}
		for _, e := range log.Entries {
			count[e.Seq]++
		}
		if len(acked) < messages/2 || len(incs) < 2 {
			t.Fatalf("seed %d: %d of %d sends acknowledged, by %d incarnations: the run shows too little", seed, len(acked), messages, len(incs))
		}
		for seq := int64(1); seq <= messages; seq++ {
			switch {
			case count[seq] > 1:
				t.Fatalf("seed %d: message %d in the log %d times despite de-duplication", seed, seq, count[seq])
			case acked[seq] && count[seq] == 0:
				// (A send whose reply was lost may be there too.)
				t.Fatalf("seed %d: message %d acknowledged, not in the log: %s", seed, seq, read)
			}
		}
		t.Logf("seed %d: %d of %d sends acknowledged by %d incarnations, %d entries in the log", seed, len(acked), messages, len(incs), len(log.Entries))
	}
}

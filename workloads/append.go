package workloads

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// Append is numbered appends to log entities, synchronous ("append") and
// fire-and-forget ("tell", in bursts), plus reads of the whole log.
type Append struct{}

// Name implements Workload.
func (Append) Name() string { return "append" }

// Doc implements Workload.
func (Append) Doc() string {
	return "each worker appends {client, seq} with its own increasing seq to log entities, " +
		"synchronously (append) or fire-and-forget (tell, in bursts of 1-5 to one log), and reads whole logs. " +
		"A correct system shows, per log: every ok append present exactly once, each client's entries " +
		"in the order the client sent them (tells too, at most once each), unknown appends " +
		"present at most once, and reads consistent with each other (each a prefix-extension of the last)."
}

// Needs implements Workload: tells are sent only where the implementation
// declares the tell capability (Options.Tell).
func (Append) Needs() Needs {
	return Needs{Capabilities: []string{protocol.CapSharding}, EntityTypes: []string{protocol.TypeLog}}
}

// Generator implements Workload. Each draw is an append (60 %), a read
// (20 %) or a burst of 1–5 tells to one log (20 %): a stream of events
// sent fire-and-forget one after another, as applications send them, so
// that several of one sender's tells can be on their way at once (the
// node pipelines them) and a reordering on the way shows. The client of an
// entry is "w<worker>"; its seq counts that worker's appends and tells, so
// a checker can see order, loss and duplicates.
func (Append) Generator(seed int64, worker int, o Options) func() Op {
	kp := newKeyPicker(seed, worker, o)
	client := fmt.Sprintf("w%d", worker)
	seq := 0
	burst, burstKey := 0, ""
	entry := func(f, key string) Op {
		seq++
		return Op{F: f, Entity: key, Value: mustJSON(protocol.LogEntry{Client: client, Seq: int64(seq)})}
	}
	return func() Op {
		if burst > 0 {
			burst--
			return entry("tell", burstKey)
		}
		key := fmt.Sprintf("log/l%d", kp.next())
		switch r := kp.rng.IntN(10); {
		case r < 2:
			return Op{F: protocol.OpRead, Entity: key}
		case r < 4 && o.Tell:
			burst, burstKey = kp.rng.IntN(5), key
			return entry("tell", key)
		default:
			return entry(protocol.OpAppend, key)
		}
	}
}

// Invoke implements Workload. A tell's ok means the node accepted it.
func (Append) Invoke(ctx context.Context, c *client.Client, op Op) (json.RawMessage, history.Reply, error) {
	if op.F != "tell" {
		return invokeEntity(ctx, c, Op{F: op.F, Entity: op.Entity, Value: op.Value})
	}
	typ, id, _ := strings.Cut(op.Entity, "/")
	var e protocol.LogEntry
	json.Unmarshal(op.Value, &e)
	r, err := c.Tell(ctx, protocol.EntityRequest{Type: typ, ID: id, Op: protocol.OpAppend, Payload: op.Value, Sender: e.Client})
	if err != nil {
		return nil, history.Reply{}, err
	}
	return json.RawMessage(`{"accepted":true}`), history.Reply{Node: r.Node, Incarnation: r.Incarnation}, nil
}

// Final implements Workload: read every log touched.
func (Append) Final(touched []string) []Op {
	var ops []Op
	for _, e := range touched {
		if strings.HasPrefix(e, protocol.TypeLog+"/") {
			ops = append(ops, Op{F: protocol.OpRead, Entity: e})
		}
	}
	return ops
}

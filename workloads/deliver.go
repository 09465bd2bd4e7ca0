package workloads

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// Deliver is at-least-once and effectively-once delivery through sender
// entities (docs/protocol.md, delivery guarantees): each worker sends
// numbered messages through sender entities, one per (worker, target log),
// named "sender/w<worker>-d<log>"; the sender stores each message before
// it replies, then delivers it to "log/d<log>" until the log confirms it.
// Odd workers ask for receiver-side de-duplication (effectively once),
// even ones do not (at least once, duplicates allowed).
type Deliver struct{}

// Name implements Workload.
func (Deliver) Name() string { return "deliver" }

// Doc implements Workload.
func (Deliver) Doc() string {
	return "each worker sends {client, seq} messages through at-least-once sender entities to log " +
		"entities; odd workers ask for de-duplication. The final phase flushes every sender, then " +
		"reads every target log. A correct system shows every acknowledged send in its log at least " +
		"once (exactly once with de-duplication), no failed send, and nothing never sent."
}

// Needs implements Workload.
func (Deliver) Needs() Needs {
	return Needs{Capabilities: []string{protocol.CapSharding}, EntityTypes: []string{protocol.TypeSender, protocol.TypeLog}}
}

// DeliverSender names the sender entity of a worker and target log.
func DeliverSender(worker, log int) string { return fmt.Sprintf("sender/w%d-d%d", worker, log) }

// Generator implements Workload: sends only; the final phase reads.
func (Deliver) Generator(seed int64, worker int, o Options) func() Op {
	kp := newKeyPicker(seed, worker, o)
	seq := map[int]int{}
	dedup := worker%2 == 1
	return func() Op {
		log := kp.next()
		seq[log]++
		sender := DeliverSender(worker, log)
		_, client, _ := strings.Cut(sender, "/")
		v := mustJSON(protocol.SenderSend{To: fmt.Sprintf("d%d", log), Client: client, Seq: int64(seq[log]), Dedup: dedup})
		return Op{F: protocol.OpSend, Entity: sender, Value: v}
	}
}

// Invoke implements Workload.
func (Deliver) Invoke(ctx context.Context, c *client.Client, op Op) (json.RawMessage, history.Reply, error) {
	return invokeEntity(ctx, c, op)
}

// Final implements Workload: flush every sender touched (its messages are
// then confirmed), then read every log they send to.
func (Deliver) Final(touched []string) []Op {
	var flush, read []Op
	logs := map[string]bool{}
	for _, e := range touched {
		if !strings.HasPrefix(e, "sender/") {
			continue
		}
		flush = append(flush, Op{F: protocol.OpFlush, Entity: e})
		if i := strings.LastIndex(e, "-d"); i >= 0 {
			logs["log/d"+e[i+2:]] = true
		}
	}
	var names []string
	for l := range logs {
		names = append(names, l)
	}
	sort.Strings(names)
	for _, l := range names {
		read = append(read, Op{F: protocol.OpRead, Entity: l})
	}
	return append(flush, read...)
}

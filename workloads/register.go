package workloads

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// Register is read / write / compare-and-set on register entities.
type Register struct{}

// Name implements Workload.
func (Register) Name() string { return "register" }

// Doc implements Workload.
func (Register) Doc() string {
	return "read, write and compare-and-set on register entities (integers). " +
		"A correct system is linearizable per entity: every ok read returns the value of the " +
		"last write or successful cas before it in some order consistent with real time; " +
		"unknown (info) writes may or may not have happened; one entity incarnation at a time."
}

// Needs implements Workload.
func (Register) Needs() Needs {
	return Needs{Capabilities: []string{protocol.CapSharding}, EntityTypes: []string{protocol.TypeRegister}}
}

// Generator implements Workload: reads 50 %, writes 30 %, cas 20 %, values
// unique per worker so checkers can tell writes apart.
func (Register) Generator(seed int64, worker int, o Options) func() Op {
	kp := newKeyPicker(seed, worker, o)
	n := 0
	return func() Op {
		n++
		key := protocol.TypeRegister + "/r" + strconv.Itoa(kp.next())
		v := int64(worker*1_000_000 + n)
		switch r := kp.rng.IntN(10); {
		case r < 5:
			return Op{F: protocol.OpRead, Entity: key}
		case r < 8:
			return Op{F: protocol.OpWrite, Entity: key, Value: mustJSON(protocol.RegisterWrite{Value: v})}
		default:
			expect := int64(kp.rng.IntN(5) + worker*1_000_000 + max(n-5, 0))
			return Op{F: protocol.OpCAS, Entity: key, Value: mustJSON(protocol.RegisterCAS{Expect: &expect, Value: v})}
		}
	}
}

// Invoke implements Workload.
func (Register) Invoke(ctx context.Context, c *client.Client, op Op) (json.RawMessage, history.Reply, error) {
	return invokeEntity(ctx, c, op)
}

// Final implements Workload: read every register touched.
func (Register) Final(touched []string) []Op {
	var ops []Op
	for _, e := range touched {
		if strings.HasPrefix(e, protocol.TypeRegister+"/") {
			ops = append(ops, Op{F: protocol.OpRead, Entity: e})
		}
	}
	return ops
}

// invokeEntity sends an entity operation and returns its result and where
// it was served.
func invokeEntity(ctx context.Context, c *client.Client, op Op) (json.RawMessage, history.Reply, error) {
	typ, id, ok := strings.Cut(op.Entity, "/")
	if !ok {
		return nil, history.Reply{}, fmt.Errorf("workload: entity %q is not type/id", op.Entity)
	}
	r, err := c.Entity(ctx, protocol.EntityRequest{Type: typ, ID: id, Op: op.F, Payload: op.Value})
	if err != nil {
		var e *protocol.Error
		rep := history.Reply{}
		if errors.As(err, &e) {
			rep.Node, rep.Incarnation = e.ServedBy.Node, e.ServedBy.Incarnation
		}
		return nil, rep, err
	}
	return r.Result, history.Reply{
		Node: r.ServedBy.Node, Incarnation: r.ServedBy.Incarnation,
		Shard: r.Shard, HostNode: r.Node, EntityIncarnation: r.EntityIncarnation,
	}, nil
}

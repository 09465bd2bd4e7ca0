package workloads

import (
	"context"
	"encoding/json"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// IDGen asks the cluster singleton ID generator for ids.
type IDGen struct{}

// Name implements Workload.
func (IDGen) Name() string { return "idgen" }

// Doc implements Workload.
func (IDGen) Doc() string {
	return "next-id on the id-generator singleton through every node. A correct system hands out " +
		"every id at most once, and ids increase in real-time order (an id returned before " +
		"another request was sent is smaller); replies name the singleton instance, and at most " +
		"one instance is alive at a time."
}

// Needs implements Workload.
func (IDGen) Needs() Needs {
	return Needs{Capabilities: []string{protocol.CapSingleton}, Singletons: []string{protocol.IDGenerator}}
}

// Generator implements Workload.
func (IDGen) Generator(int64, int, Options) func() Op {
	return func() Op { return Op{F: "next-id"} }
}

// Invoke implements Workload.
func (IDGen) Invoke(ctx context.Context, c *client.Client, _ Op) (json.RawMessage, history.Reply, error) {
	r, err := c.NextID(ctx)
	if err != nil {
		return nil, history.Reply{}, err
	}
	res, _ := json.Marshal(map[string]int64{"id": r.ID})
	return res, history.Reply{
		Node: r.ServedBy.Node, Incarnation: r.ServedBy.Incarnation,
		Singleton: r.Singleton.String(),
	}, nil
}

// Final implements Workload: a few ids once the cluster has converged, so
// the singleton is seen serving again after the last fault.
func (IDGen) Final([]string) []Op {
	return []Op{{F: "next-id"}, {F: "next-id"}, {F: "next-id"}}
}

package workloads

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/shardtest/shardtest/harness/history"
	"github.com/shardtest/shardtest/harness/nodeclient"
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

// Capability implements Workload.
func (IDGen) Capability() string { return "singleton" }

// Generator implements Workload.
func (IDGen) Generator(int64, int, Options) func() Op {
	return func() Op { return Op{F: "next-id"} }
}

// Invoke implements Workload.
func (IDGen) Invoke(ctx context.Context, c *nodeclient.Client, _ Op) (json.RawMessage, history.Reply, error) {
	r, err := c.NextID(ctx)
	if err != nil {
		return nil, history.Reply{}, err
	}
	res, _ := json.Marshal(map[string]int64{"id": r.ID})
	return res, history.Reply{
		Node: r.ServedBy.Node, Incarnation: r.ServedBy.Incarnation,
		Singleton: fmt.Sprintf("%s@%s#%d", r.Singleton.Node, r.Singleton.Incarnation, r.Singleton.Instance),
	}, nil
}

// Final implements Workload: a few ids once the cluster has converged, so
// the singleton is seen serving again after the last fault.
func (IDGen) Final([]string) []Op {
	return []Op{{F: "next-id"}, {F: "next-id"}, {F: "next-id"}}
}

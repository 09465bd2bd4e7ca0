package node

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/singleton"
)

// Host names the singleton instance that served a request: the member it
// ran on and which start of the singleton on that member it was. Checkers
// use it to tell instances apart.
type Host struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	// Instance counts singleton starts on this member, from 1.
	Instance int64 `json:"instance"`
}

// decorate wraps a factory so every reply says which instance served it.
func decorate(f singleton.Factory, self cluster.Member) singleton.Factory {
	var starts atomic.Int64
	return func(ctx context.Context) (singleton.Instance, error) {
		inst, err := f(ctx)
		if err != nil {
			return nil, err
		}
		h := Host{Node: self.Name, Incarnation: self.Incarnation, Instance: starts.Add(1)}
		return &hostedInstance{Instance: inst, host: h}, nil
	}
}

type hostedInstance struct {
	singleton.Instance
	host Host
}

func (h *hostedInstance) Handle(ctx context.Context, req singleton.Request) (json.RawMessage, error) {
	res, err := h.Instance.Handle(ctx, req)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(res, &fields) != nil || fields == nil {
		fields = map[string]json.RawMessage{"result": res}
	}
	hb, err := json.Marshal(h.host)
	if err != nil {
		return nil, err
	}
	fields["singleton"] = hb
	return json.Marshal(fields)
}

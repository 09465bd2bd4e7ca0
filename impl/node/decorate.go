package node

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
)

// decorate wraps a factory so every reply says which instance served it
// (protocol.SingletonInstance: the member it runs on and which start of
// the singleton there it is; checkers use it to tell instances apart), and
// so that host knows the instance running now (the status names it).
func decorate(f singleton.Factory, self cluster.Member, host *hostTracker) singleton.Factory {
	var starts atomic.Int64
	return func(ctx context.Context) (singleton.Instance, error) {
		inst, err := f(ctx)
		if err != nil {
			return nil, err
		}
		h := protocol.SingletonInstance{Node: self.Name, Incarnation: self.Incarnation, Instance: starts.Add(1)}
		host.cur.Store(&h)
		return &hostedInstance{Instance: inst, host: h, tracker: host}, nil
	}
}

type hostedInstance struct {
	singleton.Instance
	host    protocol.SingletonInstance
	tracker *hostTracker
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

// Stop stops the instance; from then on the status names no instance
// (the manager reports it not running once Stop has returned).
func (h *hostedInstance) Stop(ctx context.Context) error {
	h.tracker.cur.CompareAndSwap(&h.host, nil)
	return h.Instance.Stop(ctx)
}

package run

import (
	"context"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol/client"
)

// StatusInterval is how often the harness samples every node's status
// during a run (status.jsonl): each sample is evidence of what ran where,
// for the checkers that prove two instances alive at once, also on a node
// that logs no events or stops answering its event log.
const StatusInterval = time.Second

// sampleStatus polls every node's GET /v1/status every StatusInterval
// until ctx ends and writes what runs there to w, each sample with the
// window of harness time in which the node took it. Nodes added by the
// nemesis are sampled too. One request per node at a time: a node slow to
// answer is sampled less often.
func sampleStatus(ctx context.Context, w *history.StatusWriter, now func() int64, nodes func() []Node, log func(node string, err error)) {
	forEachNode(ctx, nodes, func(n Node) { pollStatus(ctx, w, now, n, log) })
}

// pollStatus samples one node until ctx ends.
func pollStatus(ctx context.Context, w *history.StatusWriter, now func() int64, n Node, log func(node string, err error)) {
	c := client.New(n.HTTPAddr, nil)
	failures := 0
	for ctx.Err() == nil {
		next := time.Now().Add(StatusInterval)
		lo := now()
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := c.Status(sctx)
		cancel()
		hi := now()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			if failures++; failures == 1 || failures%60 == 0 {
				log(n.Name, err)
			}
		case st.Self.UID != "":
			failures = 0
			if err := w.Write(history.Sample(n.Name, lo, hi, st)); err != nil {
				log(n.Name, err)
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
	}
}

// recordStatus samples every node's status into status.jsonl until the
// returned stop is called (after the final phase).
func (t *Test) recordStatus(ctx context.Context, path string, nodes func() []Node, hw *history.Writer) (stop func(), err error) {
	sw, err := history.CreateStatus(path)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sampleStatus(cctx, sw, hw.Now, nodes, func(node string, err error) {
			t.Log.Debug("sampling node status", "node", node, "err", err)
		})
	}()
	return func() {
		cancel()
		<-done
		if err := sw.Close(); err != nil {
			t.Log.Warn("closing status.jsonl", "err", err)
		}
	}, nil
}

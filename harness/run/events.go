package run

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// eventBatch is how many events one poll asks for.
const eventBatch = 1000

// collectEvents polls every node's GET /v1/events (long poll) until ctx
// ends and writes what it gets to w, each event with the window of
// harness time in which it certainly happened. Nodes added by the nemesis
// are polled too. It returns when every poller has stopped.
func collectEvents(ctx context.Context, w *history.EventsWriter, now func() int64, nodes func() []Node, log func(node string, err error)) {
	forEachNode(ctx, nodes, func(n Node) { pollEvents(ctx, w, now, n, log) })
}

// forEachNode runs poll for every node, each in its own goroutine, asking
// nodes again every second so nodes added later get theirs, until ctx
// ends and every poll has returned.
func forEachNode(ctx context.Context, nodes func() []Node, poll func(n Node)) {
	var wg sync.WaitGroup
	polled := map[string]bool{}
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	for {
		for _, n := range nodes() {
			if polled[n.Name] {
				continue
			}
			polled[n.Name] = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				poll(n)
			}()
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tk.C:
		}
	}
}

// pollEvents follows one node's event log.
//
// Windows: an event the poll sent at s_k returns was not there when the
// node answered the previous poll, which it did after that poll was sent
// (at s_(k-1)), so the event happened after s_(k-1) and before the reply
// arrived. A full batch may hide older events, so the lower bound only
// moves on after a batch that was not full. The first poll's events may
// have happened any time since the run started (lo 0).
//
// Restarts: a restarted node numbers its events from 1 again. When the
// answering incarnation changes (a new process, or an in-process restart
// that keeps the log), the log is read again from the start and events
// already written are skipped.
func pollEvents(ctx context.Context, w *history.EventsWriter, now func() int64, n Node, log func(node string, err error)) {
	c := client.New(n.HTTPAddr, nil)
	var (
		after      uint64
		lo         int64
		served     string
		seen       = map[string]bool{}
		refetching bool
		failures   int
	)
	key := func(e protocol.Event) string {
		return fmt.Sprintf("%d/%s/%s/%s", e.Seq, e.Incarnation, e.Type, e.Time.Format(time.RFC3339Nano))
	}
	for ctx.Err() == nil {
		s := now()
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := c.Events(pctx, after, eventBatch, 500*time.Millisecond)
		cancel()
		hi := now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if failures == 1 || failures%60 == 0 {
				log(n.Name, err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		failures = 0
		if served != "" && r.ServedBy.Incarnation != served && !refetching {
			// Another incarnation answers: read the log from its start.
			served, after, refetching = r.ServedBy.Incarnation, 0, true
			continue
		}
		served = r.ServedBy.Incarnation
		if r.Last < after {
			// The log starts again: a new process.
			after, refetching = 0, true
			continue
		}
		var out []history.NodeEvent
		for _, e := range r.Events {
			after = max(after, e.Seq)
			k := key(e)
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, history.NodeEvent{Node: n.Name, Lo: lo, Hi: hi, Event: e})
		}
		if err := w.Write(out...); err != nil {
			log(n.Name, err)
			return
		}
		if len(r.Events) < eventBatch {
			lo, refetching = s, false
		}
	}
}

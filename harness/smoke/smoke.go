// Package smoke is a short end-to-end check of a running cluster through
// the node protocol: clients take ids from the id-generator singleton on
// every node, and a writer writes register entities through every node,
// while the oldest member leaves gracefully (handing off its shards, then
// its singletons). Ids must never repeat, each client must see them
// increase, every acknowledged write must survive the hand-offs, and the
// survivors must agree on a new oldest that runs the only singleton.
//
// It is not a scenario run through run.Test, and cannot become one without
// losing what it is for. It checks a cluster someone else started and may
// keep running (shardtest cluster --smoke, on the local runtime or in
// Docker), where run.Test starts and stops a cluster of its own; it drives
// the singleton and the entities at once, where a run drives one workload
// and its checkers judge that workload's operations; and it waits on the
// leaving node's process exit (Node.Exited), which no recorded history
// holds. Its judgement is a few lines of arithmetic on what it saw, so it
// needs no history to be re-checked. The recorded, re-checkable runs of the
// same danger are the catalogue's oldest-leaves (append: hand-offs keep
// each sender's order and lose nothing) and leave-one (shardtest run
// --scenario NAME).
package smoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// Node is what the check needs of a cluster node.
type Node struct {
	Name   string
	Client *client.Client
	// Exited is closed when the node's process has exited (after leaving).
	Exited <-chan struct{}
}

// Result is the check's verdict with its evidence.
type Result struct {
	OK, Fail, Unknown int
	// OKAfterLeave counts ids handed out after the oldest had left.
	OKAfterLeave int
	// EntityWrites counts acknowledged register compare-and-sets.
	EntityWrites int
	Left         string
	NewOldest    string
	Problems     []string
}

// Passed reports whether no problem was found.
func (r Result) Passed() bool { return len(r.Problems) == 0 }

func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "next-id: %d ok, %d failed, %d unknown; %d ok after %s left; new oldest %s\n",
		r.OK, r.Fail, r.Unknown, r.OKAfterLeave, r.Left, r.NewOldest)
	fmt.Fprintf(&b, "entities: %d acknowledged register compare-and-sets, each checked against the last acknowledged value\n", r.EntityWrites)
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "PROBLEM: %s\n", p)
	}
	return b.String()
}

// Run runs the check for about d.
func Run(ctx context.Context, nodes []Node, d time.Duration, log *slog.Logger) (Result, error) {
	var res Result
	oldest, err := agreedOldest(ctx, nodes, len(nodes), 30*time.Second)
	if err != nil {
		return res, err
	}
	leaver := -1
	for i, n := range nodes {
		if strings.HasPrefix(oldest, n.Name+"@") {
			leaver = i
		}
	}
	if leaver < 0 {
		return res, fmt.Errorf("smoke: the oldest %s is none of the nodes", oldest)
	}
	res.Left = oldest

	type reply struct {
		id    int64
		after bool
	}
	var (
		mu       sync.Mutex
		seen     = map[int64]string{}
		left     bool
		problems []string
	)
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, n := range nodes {
		for k := range 2 {
			client := fmt.Sprintf("%s/c%d", n.Name, k)
			wg.Add(1)
			go func() {
				defer wg.Done()
				var last int64
				for cctx.Err() == nil {
					if i == leaver {
						select {
						case <-n.Exited:
							return
						default:
						}
					}
					rctx, cancel := context.WithTimeout(cctx, 3*time.Second)
					r, err := n.Client.NextID(rctx)
					cancel()
					if cctx.Err() != nil {
						return
					}
					mu.Lock()
					switch protocol.OutcomeOf(err) {
					case protocol.OK:
						res.OK++
						if left {
							res.OKAfterLeave++
						}
						if prev, dup := seen[r.ID]; dup {
							problems = append(problems, fmt.Sprintf("id %d handed out twice: to %s and to %s", r.ID, prev, client))
						}
						seen[r.ID] = client
						if r.ID <= last {
							problems = append(problems, fmt.Sprintf("%s got id %d after %d", client, r.ID, last))
						}
						last = r.ID
					case protocol.Fail:
						res.Fail++
					default:
						res.Unknown++
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(50 * time.Millisecond)
					}
				}
			}()
		}
	}

	// One writer updates register entities through every node in turn with
	// compare-and-set, so each key's value is always known: the last
	// acknowledged write, or one of the writes after it whose outcome was
	// unknown. A CAS that finds any other value means the entity lost or
	// invented state (e.g. across a hand-off).
	const keys = 20
	const null = int64(-1)
	allowed := make([]map[int64]bool, keys)
	for k := range allowed {
		allowed[k] = map[int64]bool{null: true}
	}
	writes := 0
	entityProblem := func(k int, got int64, what string) {
		problems = append(problems, fmt.Sprintf("k%d: %s found %s, but only %v are possible", k, what, show(got), showAll(allowed[k])))
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(1); cctx.Err() == nil; i++ {
			k := int(i % keys)
			var n Node
			for {
				n = nodes[int(i)%len(nodes)]
				mu.Lock()
				gone := left && n.Name == nodes[leaver].Name
				mu.Unlock()
				if !gone {
					break
				}
				i++
			}
			id := fmt.Sprintf("k%d", k)
			mu.Lock()
			ambiguous := len(allowed[k]) > 1
			var expect int64
			for v := range allowed[k] {
				expect = v
			}
			mu.Unlock()
			if ambiguous {
				// An earlier write's outcome is unknown: read to resolve it.
				rctx, cancel := context.WithTimeout(cctx, 3*time.Second)
				rep, err := n.Client.Entity(rctx, protocol.EntityRequest{Type: "register", ID: id, Op: "read"})
				cancel()
				if err != nil {
					continue
				}
				got := registerValue(rep.Result)
				mu.Lock()
				if !allowed[k][got] {
					entityProblem(k, got, "a read")
				}
				allowed[k] = map[int64]bool{got: true}
				mu.Unlock()
				continue
			}
			exp := "null"
			if expect != null {
				exp = fmt.Sprint(expect)
			}
			rctx, cancel := context.WithTimeout(cctx, 3*time.Second)
			rep, err := n.Client.Entity(rctx, protocol.EntityRequest{
				Type: "register", ID: id, Op: "cas",
				Payload: json.RawMessage(fmt.Sprintf(`{"expect":%s,"value":%d}`, exp, i)),
			})
			cancel()
			mu.Lock()
			switch protocol.OutcomeOf(err) {
			case protocol.OK:
				var r struct{ OK bool }
				json.Unmarshal(rep.Result, &r)
				if r.OK {
					allowed[k] = map[int64]bool{i: true}
					writes++
				} else {
					got := registerValue(rep.Result)
					entityProblem(k, got, "a compare-and-set")
					allowed[k] = map[int64]bool{got: true}
				}
			case protocol.Unknown:
				allowed[k][i] = true
			}
			mu.Unlock()
		}
	}()

	wait := func(t time.Duration) {
		select {
		case <-cctx.Done():
		case <-time.After(t):
		}
	}
	wait(d / 3)
	log.Info("smoke: the oldest leaves gracefully", "node", nodes[leaver].Name)
	if err := nodes[leaver].Client.Leave(ctx); err != nil {
		stop()
		wg.Wait()
		return res, fmt.Errorf("smoke: leave %s: %w", nodes[leaver].Name, err)
	}
	select {
	case <-nodes[leaver].Exited:
	case <-time.After(60 * time.Second):
		problems = append(problems, fmt.Sprintf("%s did not finish leaving within 60s", nodes[leaver].Name))
	case <-ctx.Done():
	}
	mu.Lock()
	left = true
	mu.Unlock()
	wait(d * 2 / 3)
	stop()
	wg.Wait()

	rest := append(append([]Node{}, nodes[:leaver]...), nodes[leaver+1:]...)
	res.NewOldest, err = agreedOldest(ctx, rest, len(rest), 30*time.Second)
	if err != nil {
		problems = append(problems, err.Error())
	} else {
		var running []string
		for _, n := range rest {
			st, err := n.Client.Status(ctx)
			if err == nil && st.SingletonRunning(protocol.IDGenerator) {
				running = append(running, st.Self.UID)
			}
		}
		if len(running) != 1 || running[0] != res.NewOldest {
			problems = append(problems, fmt.Sprintf("after the leave the singleton runs on %v, want exactly the new oldest %s", running, res.NewOldest))
		}
	}
	if res.OKAfterLeave == 0 {
		problems = append(problems, "no id was handed out after the oldest left")
	}
	if writes == 0 {
		problems = append(problems, "no entity write succeeded")
	}
	res.EntityWrites = writes
	for k := range keys {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rep, err := rest[k%len(rest)].Client.Entity(rctx, protocol.EntityRequest{Type: "register", ID: fmt.Sprintf("k%d", k), Op: "read"})
		cancel()
		if err != nil {
			problems = append(problems, fmt.Sprintf("read k%d after the leave: %v", k, err))
			continue
		}
		if got := registerValue(rep.Result); !allowed[k][got] {
			entityProblem(k, got, "the final read")
		}
	}
	sort.Strings(problems)
	res.Problems = problems
	return res, nil
}

// registerValue reads a register result's value; -1 stands for null.
func registerValue(result json.RawMessage) int64 {
	var v struct{ Value *int64 }
	if json.Unmarshal(result, &v) != nil || v.Value == nil {
		return -1
	}
	return *v.Value
}

func show(v int64) string {
	if v == -1 {
		return "null"
	}
	return fmt.Sprint(v)
}

func showAll(m map[int64]bool) []string {
	vals := make([]int64, 0, len(m))
	for v := range m {
		vals = append(vals, v)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = show(v)
	}
	return out
}

// agreedOldest waits until every node is ready with want members, none
// unreachable, and all name the same oldest.
func agreedOldest(ctx context.Context, nodes []Node, want int, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		oldest, err := func() (string, error) {
			oldest := ""
			for _, n := range nodes {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				st, err := n.Client.Status(rctx)
				cancel()
				if err != nil {
					return "", fmt.Errorf("%s: %w", n.Name, err)
				}
				if !st.Ready || len(st.Members) != want || len(st.Unreachable) > 0 {
					return "", fmt.Errorf("%s: ready=%v, %d members (want %d), unreachable %v", n.Name, st.Ready, len(st.Members), want, st.Unreachable)
				}
				if oldest != "" && st.Oldest != oldest {
					return "", fmt.Errorf("%s sees oldest %s, another node %s", n.Name, st.Oldest, oldest)
				}
				oldest = st.Oldest
			}
			if oldest == "" {
				return "", errors.New("no oldest")
			}
			return oldest, nil
		}()
		if err == nil {
			return oldest, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("smoke: members did not agree on the oldest within %v: %w", timeout, last)
}

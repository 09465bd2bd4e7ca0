package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"io"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// entityCall sends one entity operation to a node over HTTP.
func entityCall(addr string, req protocol.EntityRequest) (protocol.EntityReply, int, error) {
	body, _ := json.Marshal(req)
	res, err := http.Post("http://"+addr+"/v1/entity", "application/json", bytes.NewReader(body))
	if err != nil {
		return protocol.EntityReply{}, 0, err
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return protocol.EntityReply{}, res.StatusCode, fmt.Errorf("%d: %s", res.StatusCode, data)
	}
	var r protocol.EntityReply
	return r, res.StatusCode, json.Unmarshal(data, &r)
}

func write(addr, id string, v int) (protocol.EntityReply, error) {
	r, _, err := entityCall(addr, protocol.EntityRequest{Type: "register", ID: id, Op: "write", Payload: json.RawMessage(fmt.Sprintf(`{"value":%d}`, v))})
	return r, err
}

func read(addr, id string) (int, protocol.EntityReply, error) {
	r, _, err := entityCall(addr, protocol.EntityRequest{Type: "register", ID: id, Op: "read"})
	if err != nil {
		return 0, r, err
	}
	var v struct{ Value *int }
	if err := json.Unmarshal(r.Result, &v); err != nil || v.Value == nil {
		return 0, r, fmt.Errorf("read %s: result %s", id, r.Result)
	}
	return *v.Value, r, nil
}

// shardHomes returns shard → hosting node name for a type, from every
// node's region status.
func (tc *testCluster) shardHomes(typ string) map[string][]string {
	homes := map[string][]string{}
	for _, tn := range tc.nodes {
		select {
		case <-tn.done:
			continue
		default:
		}
		for _, si := range tn.n.Status().Sharding {
			if si.Type != typ {
				continue
			}
			for _, sh := range si.Region.Shards {
				homes[sh.ID] = append(homes[sh.ID], tn.name)
			}
		}
	}
	return homes
}

func TestEntityRoutingFromEveryNode(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		if c.Name == "n3" {
			c.ProxyOnly = true
		}
	})
	tc.agreedOldest(tc.nodes, 3)
	const ids = 60
	incarnations := map[string]string{}
	for i := range ids {
		id := fmt.Sprintf("k%d", i)
		for j, tn := range tc.nodes {
			if _, err := write(tn.n.Addr(), id, i*10+j); err != nil {
				t.Fatalf("write %s via %s: %v", id, tn.name, err)
			}
			v, r, err := read(tc.nodes[(j+1)%3].n.Addr(), id)
			if err != nil {
				t.Fatal(err)
			}
			if v != i*10+j {
				t.Fatalf("read %s = %d after writing %d", id, v, i*10+j)
			}
			if prev, ok := incarnations[id]; ok && prev != r.EntityIncarnation {
				t.Fatalf("%s answered by %s and %s", id, prev, r.EntityIncarnation)
			}
			incarnations[id] = r.EntityIncarnation
			if r.Shard == "" || r.Node == "" || r.ServedBy.Node != tc.nodes[(j+1)%3].name {
				t.Fatalf("reply does not say where it was served: %+v", r)
			}
		}
	}
	// The proxy-only node hosts nothing; each shard lives in one region.
	for shard, on := range tc.shardHomes("register") {
		if len(on) != 1 || on[0] == "n3" {
			t.Fatalf("shard %s hosted on %v", shard, on)
		}
	}
}

// entityLifetimes reads start/stop events per entity id, across nodes.
type lifetime struct {
	node, inc  string
	start, end time.Time
}

func (tc *testCluster) entityLifetimes(typ string) map[string][]lifetime {
	out := map[string][]lifetime{}
	for _, tn := range tc.nodes {
		evs, _ := tn.n.Events().Since(0, 0)
		open := map[string]*lifetime{}
		for _, e := range evs {
			if e.EntityType != typ {
				continue
			}
			switch e.Type {
			case protocol.EventEntityStarted:
				open[e.EntityIncarnation] = &lifetime{node: tn.name, inc: e.EntityIncarnation, start: e.Time}
			case protocol.EventEntityStopped:
				if l := open[e.EntityIncarnation]; l != nil {
					l.end = e.Time
					out[e.Entity] = append(out[e.Entity], *l)
					delete(open, e.EntityIncarnation)
				}
			}
		}
		for _, l := range open {
			id := ""
			for _, e := range evs {
				if e.EntityIncarnation == l.inc {
					id = e.Entity
				}
			}
			out[id] = append(out[id], *l)
		}
	}
	return out
}

func assertNoEntityOverlap(t testing.TB, lives map[string][]lifetime) {
	t.Helper()
	for id, ls := range lives {
		sort.Slice(ls, func(i, j int) bool { return ls[i].start.Before(ls[j].start) })
		for i := 1; i < len(ls); i++ {
			if ls[i-1].end.IsZero() || ls[i].start.Before(ls[i-1].end) {
				t.Fatalf("entity %s alive twice: %+v and %+v", id, ls[i-1], ls[i])
			}
		}
	}
}

func TestShardsMoveToJoiningNode(t *testing.T) {
	tc := newTestCluster(t, 3)
	// Only two nodes at first: stop n3 before traffic (it is re-added
	// later as a new member).
	tc.crash(tc.nodes[2])
	eventually(t, 20*time.Second, func() error {
		if len(tc.nodes[0].n.Status().Members) != 2 {
			return fmt.Errorf("n3 not gone yet")
		}
		return nil
	})
	var mu sync.Mutex
	last := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("e%d", (i*4+w)%40)
				if _, err := write(tc.nodes[w%2].n.Addr(), id, i); err == nil {
					mu.Lock()
					last[id] = i
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(time.Second)
	tc.start("n3", 2)
	tc.waitReady(tc.nodes[2])
	eventually(t, 30*time.Second, func() error {
		n := 0
		for _, on := range tc.shardHomes("register") {
			if len(on) == 1 && on[0] == "n3" {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d shards on the new node", n)
		}
		return nil
	})
	close(stop)
	wg.Wait()
	// Every entity holds its last acknowledged write; no entity lived on two
	// nodes at once.
	for id, v := range last {
		got, _, err := read(tc.nodes[2].n.Addr(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got != v {
			t.Fatalf("%s = %d, want the last acknowledged write %d", id, got, v)
		}
	}
	assertNoEntityOverlap(t, tc.entityLifetimes("register"))
	for shard, on := range tc.shardHomes("register") {
		if len(on) != 1 {
			t.Fatalf("shard %s hosted on %v", shard, on)
		}
	}
}

func TestCoordinatorNodeCrash(t *testing.T) {
	tc := newTestCluster(t, 3)
	oldest := tc.byUID(tc.agreedOldest(tc.nodes, 3))
	for i := range 40 {
		if _, err := write(tc.nodes[i%3].n.Addr(), fmt.Sprintf("c%d", i), i); err != nil {
			t.Fatal(err)
		}
	}
	before := tc.shardHomes("register")
	tc.crash(oldest)
	// The new coordinator recovers the allocations: shards on the surviving
	// nodes stay where they were; the crashed node's shards come back
	// elsewhere with their persisted state.
	var survivor *testNode
	for _, tn := range tc.nodes {
		if tn != oldest {
			survivor = tn
		}
	}
	for i := range 40 {
		id := fmt.Sprintf("c%d", i)
		var got int
		eventually(t, 30*time.Second, func() error {
			v, _, err := read(survivor.n.Addr(), id)
			got = v
			return err
		})
		if got != i {
			t.Fatalf("%s = %d after the coordinator's node crashed, want %d", id, got, i)
		}
	}
	after := tc.shardHomes("register")
	for shard, on := range before {
		if on[0] == oldest.name {
			continue
		}
		if len(after[shard]) != 1 || after[shard][0] != on[0] {
			t.Fatalf("shard %s moved from %v to %v though its node survived", shard, on, after[shard])
		}
	}
	assertNoEntityOverlap(t, tc.entityLifetimes("register"))
}

// Bad entity requests are definite failures (4xx, outcome fail) whichever
// node takes them — also when the entity lives on another node and the
// refusal crosses the network.
func TestEntityBadRequests(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.agreedOldest(tc.nodes, 2)
	if _, err := write(tc.nodes[0].n.Addr(), "b1", 1); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		body string
	}{
		{"no type", `{"id":"b1","op":"read"}`},
		{"unknown type", `{"type":"queue","id":"b1","op":"read"}`},
		{"empty id", `{"type":"register","id":"","op":"read"}`},
		{"no op", `{"type":"register","id":"b1"}`},
		{"unknown field", `{"type":"register","id":"b1","op":"read","x":1}`},
		{"malformed", `{"type":`},
		{"unknown op", `{"type":"register","id":"b1","op":"delete"}`},
		{"bad payload", `{"type":"register","id":"b1","op":"write","payload":{"value":"x"}}`},
		{"write without value", `{"type":"register","id":"b1","op":"write"}`},
		{"log append without client", `{"type":"log","id":"b1","op":"append","payload":{}}`},
	}
	for _, tt := range tests {
		for _, tn := range tc.nodes {
			res, err := http.Post("http://"+tn.n.Addr()+"/v1/entity", "application/json", bytes.NewReader([]byte(tt.body)))
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var e protocol.ErrorBody
			if res.StatusCode != http.StatusBadRequest || json.Unmarshal(data, &e) != nil || e.Outcome != "fail" || e.Code != "bad-request" {
				t.Errorf("%s via %s: %d %s, want 400 bad-request outcome fail", tt.name, tn.name, res.StatusCode, data)
			}
		}
	}
	if v, _, err := read(tc.nodes[1].n.Addr(), "b1"); err != nil || v != 1 {
		t.Fatalf("b1 = %d, %v after bad requests, want 1", v, err)
	}
}

// A node hosting shards crashes: its shards come back elsewhere only after
// the resolver downed it, and their persisted state survives.
func TestHostingNodeCrash(t *testing.T) {
	tc := newTestCluster(t, 3)
	oldest, victim := tc.writeAndPickHost(40)
	victimUID := victim.n.Status().Self.UID
	tc.crash(victim)
	for i := range 40 {
		id := fmt.Sprintf("h%d", i)
		var got int
		eventually(t, 30*time.Second, func() error {
			v, _, err := read(oldest.n.Addr(), id)
			got = v
			return err
		})
		if got != 100+i {
			t.Fatalf("%s = %d after its node crashed, want %d", id, got, 100+i)
		}
	}
	// On the coordinator's node: the crashed member was downed before any of
	// its entities started again elsewhere.
	evs, _ := oldest.n.Events().Since(0, 0)
	var downedAt time.Time
	for _, e := range evs {
		if e.Type == protocol.EventMemberDowned && e.Member == victimUID {
			downedAt = e.Time
		}
	}
	if downedAt.IsZero() {
		t.Fatalf("%s was never downed", victimUID)
	}
	for id, ls := range tc.entityLifetimes("register") {
		crashedHere := false
		for _, l := range ls {
			if l.node == victim.name {
				crashedHere = true
			}
		}
		if !crashedHere {
			continue
		}
		for _, l := range ls {
			if l.node != victim.name && l.start.Before(downedAt) {
				t.Fatalf("%s restarted on %s at %v, before %s was downed at %v", id, l.node, l.start, victim.name, downedAt)
			}
		}
	}
}

// The entity-skip-replay bug is real: after the hosting node crashes, the
// new incarnations serve empty state, which the correct node never does
// (TestHostingNodeCrash).
func TestSkipReplayBugLosesState(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.Bugs = []string{BugEntitySkipReplay} })
	oldest, victim := tc.writeAndPickHost(40)
	moved := map[string]bool{}
	for _, sh := range victim.n.Status().Sharding[0].Region.Shards {
		for _, e := range sh.Entities {
			moved[e.ID] = true
		}
	}
	tc.crash(victim)
	stale := 0
	for id := range moved {
		eventually(t, 30*time.Second, func() error {
			r, _, err := entityCall(oldest.n.Addr(), protocol.EntityRequest{Type: "register", ID: id, Op: "read"})
			if err != nil {
				return err
			}
			if string(r.Result) == `{"value":null}` {
				stale++
			}
			return nil
		})
	}
	if stale != len(moved) {
		t.Fatalf("%d of %d moved entities served stale state; the bug must lose all of it", stale, len(moved))
	}
}

func send(addr, senderID, to, client string, seq int64, dedup bool) error {
	p, _ := json.Marshal(map[string]any{"to": to, "client": client, "seq": seq, "dedup": dedup})
	_, _, err := entityCall(addr, protocol.EntityRequest{Type: "sender", ID: senderID, Op: "send", Payload: p})
	return err
}

// At-least-once delivery through a join and rebalance: every message a
// sender accepted reaches its log, in order per client; duplicates only
// without de-duplication.
func TestAtLeastOnceAcrossJoin(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) { c.RedeliverInterval = 200 * time.Millisecond })
	tc.crash(tc.nodes[2])
	eventually(t, 20*time.Second, func() error {
		if len(tc.nodes[0].n.Status().Members) != 2 {
			return fmt.Errorf("n3 not gone yet")
		}
		return nil
	})
	const senders = 8
	accepted := make([][]int64, senders)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for s := range senders {
		wg.Add(1)
		// accepted[s] is written only by this goroutine until wg.Wait.
		go func() {
			defer wg.Done()
			for seq := int64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				addr := tc.nodes[s%2].n.Addr()
				if err := send(addr, fmt.Sprintf("s%d", s), fmt.Sprintf("L%d", s), fmt.Sprintf("c%d", s), seq, s%2 == 1); err == nil {
					accepted[s] = append(accepted[s], seq)
				} else {
					seq-- // not accepted: the same seq again, so gaps mean loss
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Second)
	tc.start("n3", 2)
	tc.waitReady(tc.nodes[2])
	eventually(t, 30*time.Second, func() error {
		n := 0
		for _, typ := range []string{"log", "sender"} {
			for _, on := range tc.shardHomes(typ) {
				if len(on) == 1 && on[0] == "n3" {
					n++
				}
			}
		}
		if n < 2 {
			return fmt.Errorf("%d log and sender shards on the new node", n)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	for s := range senders {
		r, _, err := entityCall(tc.nodes[0].n.Addr(), protocol.EntityRequest{Type: "sender", ID: fmt.Sprintf("s%d", s), Op: "flush"})
		if err != nil || string(r.Result) != `{"unconfirmed":0}` {
			t.Fatalf("flush s%d: %s %v", s, r.Result, err)
		}
		lr, _, err := entityCall(tc.nodes[1].n.Addr(), protocol.EntityRequest{Type: "log", ID: fmt.Sprintf("L%d", s), Op: "read"})
		if err != nil {
			t.Fatal(err)
		}
		var log struct {
			Entries []struct {
				Client string
				Seq    int64
			}
		}
		json.Unmarshal(lr.Result, &log)
		var firsts []int64
		seen := map[int64]bool{}
		dups := 0
		for _, e := range log.Entries {
			if seen[e.Seq] {
				dups++
				continue
			}
			seen[e.Seq] = true
			firsts = append(firsts, e.Seq)
		}
		if len(accepted[s]) == 0 {
			t.Fatalf("sender s%d had nothing accepted", s)
		}
		for i, seq := range accepted[s] {
			if i >= len(firsts) || firsts[i] != seq {
				t.Fatalf("s%d: log order %v does not start with the accepted %v (lost or reordered at %d)", s, firsts, accepted[s], i)
			}
		}
		if s%2 == 1 && dups > 0 {
			t.Fatalf("s%d de-duplicates, yet its log has %d duplicates", s, dups)
		}
		t.Logf("s%d: %d accepted, %d in the log, %d duplicates", s, len(accepted[s]), len(log.Entries), dups)
	}
}

// Fire-and-forget appends from one sender through one node reach the log
// in the order they were sent.
func TestTellKeepsSenderOrder(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.agreedOldest(tc.nodes, 2)
	const n = 200
	for i := 1; i <= n; i++ {
		for s, tn := range tc.nodes {
			p, _ := json.Marshal(map[string]any{"client": fmt.Sprintf("c%d", s), "seq": i})
			body, _ := json.Marshal(protocol.EntityRequest{Type: "log", ID: "T", Op: "append", Payload: p, Sender: fmt.Sprintf("c%d", s), Mode: "tell"})
			res, err := http.Post("http://"+tn.n.Addr()+"/v1/entity", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusAccepted {
				t.Fatalf("tell: status %d", res.StatusCode)
			}
		}
	}
	var entries []struct {
		Client string
		Seq    int
	}
	eventually(t, 20*time.Second, func() error {
		r, _, err := entityCall(tc.nodes[0].n.Addr(), protocol.EntityRequest{Type: "log", ID: "T", Op: "read"})
		if err != nil {
			return err
		}
		var l struct {
			Entries []struct {
				Client string
				Seq    int
			}
		}
		json.Unmarshal(r.Result, &l)
		entries = l.Entries
		if len(entries) < 2*n {
			return fmt.Errorf("%d of %d tells arrived", len(entries), 2*n)
		}
		return nil
	})
	next := map[string]int{"c0": 1, "c1": 1}
	for _, e := range entries {
		if e.Seq != next[e.Client] {
			t.Fatalf("client %s: seq %d arrived when %d was next", e.Client, e.Seq, next[e.Client])
		}
		next[e.Client]++
	}
}

// writeAndPickHost writes register keys h0..h(n-1) with values 100+i and
// returns the oldest node and another node that hosts some of them.
func (tc *testCluster) writeAndPickHost(n int) (oldest, host *testNode) {
	tc.t.Helper()
	oldest = tc.byUID(tc.agreedOldest(tc.nodes, len(tc.nodes)))
	for i := range n {
		if _, err := write(oldest.n.Addr(), fmt.Sprintf("h%d", i), 100+i); err != nil {
			tc.t.Fatal(err)
		}
	}
	for _, tn := range tc.nodes {
		if tn != oldest && len(tn.n.Status().Sharding[0].Region.Shards) > 0 {
			host = tn
		}
	}
	if host == nil {
		tc.t.Fatal("no node but the oldest hosts a shard")
	}
	return oldest, host
}

package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// peerPost sends a node-to-node request to n's peer port as a stranger's
// raw client would, with headers h; it returns the status and the error
// code (a refusal must be a definite failure).
func peerPost(t *testing.T, n *Node, path, body string, h map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.PeerAddr()+path, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var e protocol.ErrorBody
	json.Unmarshal(b, &e)
	if res.StatusCode >= 300 && e.Outcome != protocol.Fail {
		t.Errorf("%s: refused with outcome %q, want fail: %s", path, e.Outcome, b)
	}
	return res.StatusCode, e.Code
}

// withHeader is h but for header k, set to v ("": left out).
func withHeader(h map[string]string, k, v string) map[string]string {
	h = maps.Clone(h)
	if v == "" {
		delete(h, k)
	} else {
		h[k] = v
	}
	return h
}

// peerUpgrade asks n's peer port for a stream with headers h; it returns
// the answer's status (101: a stream was opened, and is closed again).
func peerUpgrade(t *testing.T, n *Node, h map[string]string) int {
	t.Helper()
	conn, err := net.Dial("tcp", n.PeerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.PeerAddr()+peer.StreamPath, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "shardtest-peer/1")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// idsEverywhere checks that next-id answers on every node, for d: what
// "the singleton keeps working" means to a client.
func idsEverywhere(t *testing.T, tc *testCluster, d time.Duration) {
	t.Helper()
	c := newIDClient()
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		for _, tn := range tc.nodes {
			if _, err := c.nextID(tn.n.Addr()); err != nil {
				t.Fatalf("next-id on %s: %v", tn.name, err)
			}
		}
		if time.Now().After(end) {
			break
		}
	}
	c.check(t)
}

// TestForgedPeerRequestsProbe sends the reference node, on its peer port
// with the cluster's secret and a real member's name, what a stale, buggy
// or hostile member of its cluster could (issue 31's probes), and checks
// what must hold afterwards: ids on every node, an entity's one
// incarnation. A forged hand-over-to-me naming a member that does not
// exist once stopped the id generator cluster-wide for good; a forged
// host-shard started a second live incarnation of an entity; a stream was
// upgraded for anyone.
func TestForgedPeerRequestsProbe(t *testing.T) {
	const secret = "s3cret"
	tc := newTestCluster(t, 3, func(c *Config) { c.ClusterSecret = secret })
	oldest := tc.byUID(tc.agreedOldest(tc.nodes, 3))
	next := tc.successor()
	var third *testNode
	for _, tn := range tc.nodes {
		if tn != oldest && tn != next {
			third = tn
		}
	}
	uid := func(tn *testNode) string { return tn.n.Status().Self.UID }
	// An entity whose shard's home is not the oldest (the coordinator's
	// member): the forged requests try to host it there too.
	var id string
	var first protocol.EntityReply
	for i := 0; id == ""; i++ {
		rep, err := write(oldest.n.Addr(), fmt.Sprintf("probe%d", i), 1)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Node != uid(oldest) {
			id, first = fmt.Sprintf("probe%d", i), rep
		}
	}
	idsEverywhere(t, tc, 0)

	as := func(tn *testNode) map[string]string {
		return map[string]string{peer.SecretHeader: secret, peer.MemberHeader: uid(tn), peer.FromHeader: tn.gossip, peer.ToHeader: uid(oldest)}
	}
	handOver := "/internal/v1/singleton/id-generator/hand-over-to-me"
	hostShard := "/internal/v1/sharding/register/host-shard"
	deliver := "/internal/v1/sharding/register/deliver"
	tests := []struct {
		name, path, body string
		headers          map[string]string
		status           int
		code             string
	}{
		// The body names a member that does not exist; the request comes
		// from the next oldest.
		{"a hand-over to a member that does not exist", handOver, `{"from":"ghost@000000000000"}`, as(next), 403, protocol.CodePeerRefused},
		{"a hand-over for another member", handOver, fmt.Sprintf(`{"from":%q}`, uid(next)), as(third), 403, protocol.CodePeerRefused},
		{"a hand-over to a member not next in line", handOver, fmt.Sprintf(`{"from":%q}`, uid(third)), as(third), 409, protocol.CodeNotNextOldest},
		{"a host-shard from a member without the coordinator", hostShard, fmt.Sprintf(`{"shard":%q}`, first.Shard), as(next), 409, protocol.CodeNotCoordinator},
		{"a host-shard for a shard the type lacks", hostShard, `{"shard":"20"}`, as(oldest), 400, protocol.CodeBadRequest},
		{"a delivery for a shard not hosted here", deliver, fmt.Sprintf(`{"entity_id":%q,"op":"read"}`, id), as(next), 503, protocol.CodeShardNotHere},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status, code := peerPost(t, oldest.n, tt.path, tt.body, tt.headers); status != tt.status || code != tt.code {
				t.Fatalf("%d %s, want %d %s", status, code, tt.status, tt.code)
			}
		})
	}
	// A stream is opened only for whom the guard admits each request.
	for _, tt := range []struct {
		name    string
		headers map[string]string
		status  int
	}{
		{"a stream without the secret", withHeader(as(next), peer.SecretHeader, ""), http.StatusForbidden},
		{"a stream with a wrong secret", withHeader(as(next), peer.SecretHeader, "guess"), http.StatusForbidden},
		{"a stream for a made-up member", withHeader(as(next), peer.MemberHeader, "ghost@000000000000"), http.StatusForbidden},
		{"a member's stream", as(next), http.StatusSwitchingProtocols},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if status := peerUpgrade(t, oldest.n, tt.headers); status != tt.status {
				t.Fatalf("%d, want %d", status, tt.status)
			}
		})
	}

	// What must hold: ids on every node, for longer than a hand-over
	// would have taken to stop the singleton; the entity in its one
	// incarnation at its home.
	idsEverywhere(t, tc, 3*time.Second)
	for _, tn := range tc.nodes {
		v, rep, err := read(tn.n.Addr(), id)
		if err != nil || v != 1 || rep.Node != first.Node || rep.EntityIncarnation != first.EntityIncarnation {
			t.Fatalf("read %s on %s: %d %+v %v, want 1 from %s's incarnation %s", id, tn.name, v, rep, err, first.Node, first.EntityIncarnation)
		}
	}

	// The next oldest's own hand-over-to-me, sent when it will not take
	// the singleton up (stale, or buggy): the oldest hands over, then,
	// its view unchanged, takes it back within the documented bound
	// (docs/reference-node.md: the instance's stop, then
	// DownRemovalMargin, then an answer).
	if status, code := peerPost(t, oldest.n, handOver, fmt.Sprintf(`{"from":%q}`, uid(next)), as(next)); status != http.StatusOK {
		t.Fatalf("the next oldest's hand-over-to-me: %d %s", status, code)
	}
	start := time.Now()
	eventually(t, 10*time.Second, func() error {
		for _, tn := range tc.nodes {
			if _, err := newIDClient().nextID(tn.n.Addr()); err != nil {
				return fmt.Errorf("next-id on %s: %w", tn.name, err)
			}
		}
		return nil
	})
	t.Logf("ids on every node again %v after a stale hand-over", time.Since(start).Round(time.Millisecond))
}

// TestSilentConnectionsLeaveRoom floods each port of a node with silent
// connections (connected, nothing sent) and checks that a request still
// gets an answer at once. 4,200 silent connections filled the 4,096 the
// node took, and a new request, a member's on the peer port too, waited
// ~9.5 s for the header timeout to free a slot. The bounds are small here
// (Config.Slots, PeerSlots) so that a few connections fill them.
func TestSilentConnectionsLeaveRoom(t *testing.T) {
	const secret, slots = "s3cret", 64
	const grace = 300 * time.Millisecond
	tc := newTestCluster(t, 2, func(c *Config) {
		c.ClusterSecret = secret
		c.Slots = kit.Slots{Max: slots, Grace: grace}
		c.PeerSlots = kit.Slots{Max: slots, Reserved: 8, Grace: time.Hour}
	})
	n1, n2 := tc.nodes[0].n, tc.nodes[1].n
	member := map[string]string{peer.SecretHeader: secret, peer.MemberHeader: n2.Status().Self.UID, peer.ToHeader: n1.Status().Self.UID, peer.FromHeader: "x"}
	tests := []struct {
		name, addr, floodFrom string
		wait                  time.Duration // before the request
		// request is answered with want (the members share 127.0.0.1).
		request func() (int, error)
		want    int
	}{
		// The flood's connections are silent once they said nothing for
		// the grace: the newcomer takes the slot of one.
		{"the public port, flooded from one address, a client from another", n1.Addr(), "127.0.0.1", grace,
			func() (int, error) { return getFrom("127.0.0.2", "http://"+n1.Addr()+"/v1/health") }, http.StatusOK},
		// A stranger's flood leaves the members their reserved slots, at
		// once.
		{"the peer port, flooded by a stranger, a member's request", n1.PeerAddr(), "127.0.0.2", 0,
			func() (int, error) {
				status, _ := peerPost(t, n1, "/internal/v1/sharding/register/host-shard", `{"shard":"7"}`, member)
				return status, nil
			}, http.StatusConflict}, // not-coordinator: n2 does not run it
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range slots + 8 {
				c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(tt.floodFrom)}}).Dial("tcp", tt.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
			}
			time.Sleep(100*time.Millisecond + tt.wait) // accepted, and silent
			start := time.Now()
			status, err := tt.request()
			if took := time.Since(start); err != nil || status != tt.want || took > 3*time.Second {
				t.Fatalf("%d %v after %v, want %d at once", status, err, took, tt.want)
			}
		})
	}
	if _, err := newIDClient().nextID(n1.Addr()); err != nil {
		t.Fatalf("next-id after the floods: %v", err)
	}
}

// getFrom sends GET url from the source address ip and returns the status.
func getFrom(ip, url string) (int, error) {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 15 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

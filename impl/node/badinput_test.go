package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
)

func TestBadInputOnEveryEndpoint(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0].n
	base := "http://" + n.Addr()
	huge := `{"drop_in":["` + strings.Repeat("a", 70<<10) + `"]}`
	tests := []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/v1/singleton/next-id", "", 405, "method-not-allowed"},
		{"POST", "/v1/singleton/next-id", "{", 400, "bad-request"},
		{"POST", "/v1/singleton/next-id", `{"x":1}`, 400, "bad-request"},
		{"POST", "/v1/singleton/next-id", `[]`, 400, "bad-request"},
		{"POST", "/v1/singleton/next-id", `{} {}`, 400, "bad-request"},
		{"POST", "/v1/singleton/next-id", `{}x`, 400, "bad-request"},
		{"GET", "/v1/events?after=-1", "", 400, "bad-request"},
		{"GET", "/v1/events?limit=0", "", 400, "bad-request"},
		{"GET", "/v1/events?limit=abc", "", 400, "bad-request"},
		{"GET", "/v1/events?limit=10001", "", 400, "bad-request"},
		{"GET", "/v1/events?wait_ms=99999", "", 400, "bad-request"},
		{"GET", "/v1/events?after=1&after=2", "", 400, "bad-request"},
		{"GET", "/v1/events?bogus=1", "", 400, "bad-request"},
		{"POST", "/v1/events", "", 405, "method-not-allowed"},
		{"POST", "/v1/admin/clock", `{"offset_ms":1e300}`, 400, "bad-request"},
		{"POST", "/v1/admin/clock", `{"drift":5}`, 400, "bad-request"},
		{"POST", "/v1/admin/clock", `{"drift":"x"}`, 400, "bad-request"},
		{"POST", "/v1/admin/clock", `nope`, 400, "bad-request"},
		{"PUT", "/v1/admin/clock", `{}`, 405, "method-not-allowed"},
		{"POST", "/v1/admin/filter", `{"drop_in":["no-port"]}`, 400, "bad-request"},
		{"POST", "/v1/admin/filter", `{"drop_out":["127.0.0.1:0"]}`, 400, "bad-request"},
		{"POST", "/v1/admin/filter", `{"drop_in":5}`, 400, "bad-request"},
		{"POST", "/v1/admin/filter", huge, 400, "bad-request"},
		{"POST", "/v1/admin/leave", `{"now":true}`, 400, "bad-request"},
		// null is not an empty request: it made the node leave, and reset
		// the clock and the filter.
		{"POST", "/v1/admin/leave", `null`, 400, "bad-request"},
		{"POST", "/v1/admin/clock", `null`, 400, "bad-request"},
		{"POST", "/v1/admin/filter", `null`, 400, "bad-request"},
		// Invalid UTF-8 was replaced by U+FFFD after decoding: two ids
		// became one.
		{"POST", "/v1/entity", "{\"type\":\"register\",\"id\":\"k\xff\",\"op\":\"read\"}", 400, "bad-request"},
		// So were lone surrogate escapes: "k\ud800", "k\udfff" and
		// "k\ufffd" were one entity (a write through one read back
		// through the others), also inside the payload.
		{"POST", "/v1/entity", `{"type":"register","id":"k\ud800","op":"write","payload":{"value":1}}`, 400, "bad-request"},
		{"POST", "/v1/entity", `{"type":"register","id":"k\udfff","op":"read"}`, 400, "bad-request"},
		{"POST", "/v1/entity", `{"type":"sender","id":"s","op":"send","payload":{"to":"t\udc00","client":"c","seq":1}}`, 400, "bad-request"},
		// Unknown fields inside the payload were ignored.
		{"POST", "/v1/entity", `{"type":"register","id":"k","op":"write","payload":{"value":1,"valeu":2}}`, 400, "bad-request"},
		// A target no request could name was stored and redelivered
		// every second forever.
		{"POST", "/v1/entity", `{"type":"sender","id":"s","op":"send","payload":{"to":"` + strings.Repeat("t", 257) + `","client":"c","seq":1}}`, 400, "bad-request"},
		{"GET", "/v1/events?%zz", "", 400, "bad-request"},
		{"GET", "/v1/admin/leave", ``, 405, "method-not-allowed"},
		{"DELETE", "/v1/status", "", 405, "method-not-allowed"},
		{"POST", "/v1/health", "", 405, "method-not-allowed"},
		{"POST", "/v1/capabilities", "", 405, "method-not-allowed"},
		{"GET", "/v1/nope", "", 404, "not-found"},
		{"GET", "/", "", 404, "not-found"},
		// The node-to-node endpoints are not on the public port at all:
		// a forged hand-over-to-me there once stopped the id generator.
		{"POST", "/internal/v1/singleton/id-generator/request", `{`, 404, "not-found"},
		{"POST", "/internal/v1/singleton/id-generator/hand-over-to-me", `{"from":"ghost@x"}`, 404, "not-found"},
		{"POST", "/internal/v1/sharding/register/host-shard", `{"shard":"7"}`, 404, "not-found"},
	}
	before := n.Status()
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %s %.20s", tt.method, tt.path, tt.body), func(t *testing.T) {
			req, err := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			var e struct {
				Error   string `json:"error"`
				Code    string `json:"code"`
				Outcome string `json:"outcome"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("error reply is not JSON: %q", body)
			}
			if e.Error == "" || e.Outcome != "fail" || (tt.code != "" && e.Code != tt.code) {
				t.Fatalf("error reply %+v, want code %q outcome fail", e, tt.code)
			}
			if res.Header.Get(protocol.NodeHeader) != "n1" {
				t.Fatalf("reply does not name its node: %v", res.Header)
			}
		})
	}
	// HEAD is GET without the body.
	for _, path := range []string{"/v1/status", "/v1/health", "/v1/capabilities", "/v1/events"} {
		res, err := http.Head(base + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get(protocol.NodeHeader) != "n1" {
			t.Errorf("HEAD %s: %d %v", path, res.StatusCode, res.Header)
		}
	}
	// Nothing was changed by the rejected requests, and the node still works.
	after := n.Status()
	if after.Clock.Drift != 0 || after.Clock.OffsetMS > 1 || after.Clock.OffsetMS < -1 {
		t.Fatalf("clock changed by bad requests: %+v", after.Clock)
	}
	if len(after.Filter.DropIn)+len(after.Filter.DropOut) != 0 {
		t.Fatalf("filter changed by bad requests: %+v", after.Filter)
	}
	if after.Self.Status != protocol.StatusUp || after.Self.UID != before.Self.UID {
		t.Fatalf("node not ready or restarted after bad requests: %+v", after.Self)
	}
	if _, err := newIDClient().nextID(n.Addr()); err != nil {
		t.Fatalf("next-id after bad input: %v", err)
	}
}

func TestAdminEndpoints(t *testing.T) {
	tc := newTestCluster(t, 1)
	n := tc.nodes[0].n
	base := "http://" + n.Addr()
	post := func(path, body string, out any) int {
		t.Helper()
		res, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if out != nil {
			if err := json.NewDecoder(res.Body).Decode(out); err != nil {
				t.Fatal(err)
			}
		}
		return res.StatusCode
	}
	var cr protocol.ClockReply
	if s := post("/v1/admin/clock", `{"offset_ms": 60000, "drift": 0.01}`, &cr); s != 200 {
		t.Fatalf("set clock: %d", s)
	}
	if cr.OffsetMS < 59_000 || cr.Drift != 0.01 {
		t.Fatalf("clock reply %+v", cr)
	}
	now, err := time.Parse(time.RFC3339Nano, cr.Now)
	if err != nil || now.Sub(time.Now()) < 50*time.Second {
		t.Fatalf("node clock %v not skewed a minute ahead (%v)", cr.Now, err)
	}
	if s := post("/v1/admin/clock", `{}`, &cr); s != 200 || cr.OffsetMS != 0 || cr.Drift != 0 {
		t.Fatalf("reset clock: %d %+v", s, cr)
	}
	var fr protocol.FilterReply
	if s := post("/v1/admin/filter", `{"drop_in":["127.0.0.1:9"],"drop_out":["127.0.0.1:10"]}`, &fr); s != 200 {
		t.Fatalf("set filter: %d", s)
	}
	if len(fr.DropIn) != 1 || len(fr.DropOut) != 1 {
		t.Fatalf("filter reply %+v", fr)
	}
	var er protocol.EventsReply
	res, err := http.Get(base + "/v1/events?after=0&limit=10000")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(res.Body).Decode(&er)
	res.Body.Close()
	types := map[string]bool{}
	for i, e := range er.Events {
		types[e.Type] = true
		if i > 0 && e.Seq != er.Events[i-1].Seq+1 {
			t.Fatalf("event seqs not consecutive: %d after %d", e.Seq, er.Events[i-1].Seq)
		}
	}
	for _, want := range []string{"node-started", "member-up", "singleton-started", "clock-changed", "filter-changed"} {
		if !types[want] {
			t.Errorf("no %s event in %v", want, types)
		}
	}
	var caps protocol.Capabilities
	res, err = http.Get(base + "/v1/capabilities")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(res.Body).Decode(&caps)
	res.Body.Close()
	if caps.Protocol != protocol.Version || len(caps.Capabilities) == 0 || caps.ServedBy.Node != "n1" {
		t.Fatalf("capabilities %+v", caps)
	}
}

// FuzzNodeRequest throws arbitrary requests at a node's handler: none may
// panic it or get a 5xx, and every reply is JSON.
func FuzzNodeRequest(f *testing.F) {
	seeds := []struct {
		method, path, body string
	}{
		{"POST", "/v1/singleton/next-id", "{}"},
		{"POST", "/v1/admin/clock", `{"offset_ms":100,"drift":0.01}`},
		{"POST", "/v1/admin/filter", `{"drop_in":["127.0.0.1:1"],"drop_out":[]}`},
		{"GET", "/v1/events?after=3&limit=2", ""},
		{"POST", "/v1/admin/leave", ""},
		{"GET", "/v1/status", ""},
		{"POST", "/internal/v1/singleton/id-generator/request", `{"op":"next-id"}`},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, []byte(s.body))
	}
	n, err := New(Config{Name: "fuzz", HTTPListen: "127.0.0.1:0", Journal: unreachableJournal{}, Logger: testLogger(f)})
	if err != nil {
		f.Fatal(err)
	}
	h := n.proto.Handler()
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		req := httptest.NewRequest(http.MethodGet, "/", strings.NewReader(string(body)))
		req.Method = method
		req.URL.Path = path
		if i := strings.IndexByte(path, '?'); i >= 0 {
			req.URL.Path, req.URL.RawQuery = path[:i], path[i+1:]
		}
		// Long polls (wait_ms) end with the request's context.
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req = req.WithContext(ctx)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %q %q: status %d: %s", method, path, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %q: reply is not JSON: %q", method, path, rec.Body)
		}
	})
}

// unreachableJournal fails every call, as a journal that cannot be reached.
type unreachableJournal struct{}

func (unreachableJournal) Append(_ context.Context, _ string, _ int64, _ uint64, _ [][]byte) (int64, error) {
	return 0, journal.ErrUnavailable
}
func (unreachableJournal) Replay(context.Context, string, int64, int) ([]journal.Event, error) {
	return nil, journal.ErrUnavailable
}
func (unreachableJournal) Fence(context.Context, string) (uint64, int64, error) {
	return 0, 0, journal.ErrUnavailable
}
func (unreachableJournal) Highest(context.Context, string) (int64, error) {
	return 0, journal.ErrUnavailable
}

// A node started without some capabilities neither declares nor serves
// them, and serves the rest as before.
func TestWithoutCapabilities(t *testing.T) {
	tc := newTestCluster(t, 1, func(c *Config) { c.WithoutCapabilities = []string{"clock", "events"} })
	base := "http://" + tc.nodes[0].n.Addr()
	resp, err := http.Get(base + "/v1/capabilities")
	if err != nil {
		t.Fatal(err)
	}
	var caps protocol.Capabilities
	err = json.NewDecoder(resp.Body).Decode(&caps)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range ReferenceCapabilities() {
		hidden := c == "clock" || c == "events"
		if slices.Contains(caps.Capabilities, c) == hidden {
			t.Errorf("capabilities %v: %s declared = %v, want %v", caps.Capabilities, c, !hidden, !hidden)
		}
	}
	for _, tt := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/admin/clock", `{}`, 404},
		{"GET", "/v1/events", "", 404},
		{"POST", "/v1/admin/filter", `{}`, 200},
		{"GET", "/v1/status", "", 200},
	} {
		req, _ := http.NewRequest(tt.method, base+tt.path, strings.NewReader(tt.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
		}
	}
	if err := (&Config{WithoutCapabilities: []string{"teleport"}, OnDowned: OnDownedRestart}).validate(); err == nil || !strings.Contains(err.Error(), "teleport") {
		t.Errorf("an unknown capability to go without: %v, want an error naming it", err)
	}
}

// The peer address admits only current members, for this very member,
// with the cluster's secret: a stranger who reaches it hands over no
// singleton and hosts no shard (one forged hand-over-to-me stopped the id
// generator cluster-wide; a forged host-shard without X-Shardtest-To
// created a second live incarnation of an entity).
func TestPeerEndpointsAdmitOnlyMembers(t *testing.T) {
	const secret = "s3cret"
	tc := newTestCluster(t, 2, func(c *Config) { c.ClusterSecret = secret })
	n1, n2 := tc.nodes[0].n, tc.nodes[1].n
	member := func(n *Node) string { return n.Status().Self.UID }
	post := func(path, body string, h map[string]string) (int, string) { return peerPost(t, n1, path, body, h) }
	handOver := "/internal/v1/singleton/id-generator/hand-over-to-me"
	hostShard := "/internal/v1/sharding/register/host-shard"
	good := map[string]string{peer.SecretHeader: secret, peer.MemberHeader: member(n2), peer.ToHeader: member(n1), peer.FromHeader: "x"}
	with := func(k, v string) map[string]string { return withHeader(good, k, v) }
	tests := []struct {
		name, path, body string
		headers          map[string]string
		status           int
		code             string
	}{
		{"no secret", handOver, `{"from":"ghost@x"}`, with(peer.SecretHeader, ""), 403, protocol.CodePeerRefused},
		{"a wrong secret", handOver, `{"from":"ghost@x"}`, with(peer.SecretHeader, "guess"), 403, protocol.CodePeerRefused},
		{"a made-up member", handOver, `{"from":"ghost@x"}`, with(peer.MemberHeader, "ghost@x"), 403, protocol.CodePeerRefused},
		{"no member named", handOver, `{"from":"ghost@x"}`, with(peer.MemberHeader, ""), 403, protocol.CodePeerRefused},
		{"no target named", hostShard, `{"shard":"7"}`, with(peer.ToHeader, ""), 503, protocol.CodeWrongMember},
		{"a body naming another sender", handOver, `{"from":"ghost@000000000000"}`, good, 403, protocol.CodePeerRefused},
		{"another incarnation", hostShard, `{"shard":"7"}`, with(peer.ToHeader, "n1@earlier"), 503, protocol.CodeWrongMember},
		// The peer port decodes as strictly: "7\ud800" would be taken
		// for "7\ufffd", and an entity id for another.
		{"a lone surrogate escape", hostShard, `{"shard":"7\ud800"}`, good, 400, protocol.CodeBadJSON},
		{"a lone surrogate in a delivery", "/internal/v1/sharding/register/deliver", `{"entity_id":"k\udfff","op":"read"}`, good, 400, protocol.CodeBadJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status, code := post(tt.path, tt.body, tt.headers); status != tt.status || code != tt.code {
				t.Fatalf("%d %s, want %d %s", status, code, tt.status, tt.code)
			}
		})
	}
	// Nor is a stream opened for a stranger to hold (only refused per
	// request inside, it was opened for anyone).
	for _, h := range []map[string]string{with(peer.SecretHeader, ""), with(peer.SecretHeader, "guess"), with(peer.MemberHeader, "ghost@x")} {
		if status := peerUpgrade(t, n1, h); status != http.StatusForbidden {
			t.Errorf("an upgrade with %v: %d, want 403", h, status)
		}
	}
	// Nothing was acted on: the id generator still answers, shard 7 is
	// hosted only where the coordinator put it.
	if _, err := newIDClient().nextID(n1.Addr()); err != nil {
		t.Fatalf("next-id after the forged requests: %v", err)
	}
	// And what a member sends passes the guard (the region answers: n2
	// does not run the coordinator), on a stream too.
	if status, code := post(hostShard, `{"shard":"7"}`, good); status != http.StatusConflict || code != protocol.CodeNotCoordinator {
		t.Fatalf("a member's own request: %d %s, want the region's refusal", status, code)
	}
	if status := peerUpgrade(t, n1, good); status != http.StatusSwitchingProtocols {
		t.Fatalf("a member's stream: %d, want 101", status)
	}
}

package kit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

func TestDecodeIsStrict(t *testing.T) {
	type req struct {
		A int    `json:"a"`
		S string `json:"s"`
	}
	tests := []struct {
		body string
		ok   bool
		want int
	}{
		{"", true, 7}, // empty: parameters left as they are
		{"  \n", true, 7},
		{"{}", true, 7},
		{`{"a": 1}`, true, 1},
		{"null", false, 0},
		{"[]", false, 0},
		{`"a"`, false, 0},
		{"1", false, 0},
		{`{"a": 1, "b": 2}`, false, 0}, // unknown field
		{`{"a": 1} {}`, false, 0},      // trailing data
		{`{"a": "x"}`, false, 0},
		{`{"a": 1`, false, 0},
		{`{"a":` + strings.Repeat(" ", MaxBody) + `1}`, false, 0},
		// A lone surrogate escape decoded to U+FFFD: "x\ud800" and
		// "x\ufffd" were one string. A pair is one character.
		{`{"a": 1, "s": "x\ud800"}`, false, 0},
		{`{"a": 1, "s": "x\udfff"}`, false, 0},
		{`{"a": 1, "s": "x\ud83d\ude00"}`, true, 1},
		{`{"a": 1, "s": "x\\ud800"}`, true, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%.20q", tt.body), func(t *testing.T) {
			v := req{A: 7}
			err := DecodeJSON([]byte(tt.body), &v)
			if (err == nil) != tt.ok {
				t.Fatalf("err %v, want ok %v", err, tt.ok)
			}
			if err != nil {
				status, body := reply(err, protocol.ServedBy{})
				if status != http.StatusBadRequest || body.Code != protocol.CodeBadRequest || body.Outcome != protocol.Fail {
					t.Fatalf("refused as %d %+v, want 400 bad-request fail", status, body)
				}
				return
			}
			if v.A != tt.want {
				t.Fatalf("a = %d, want %d", v.A, tt.want)
			}
		})
	}
}

// Every protocol code answers with its table's status and outcome; only a
// code whose outcome is fail is a definite failure, and an error that is
// not the kit's is unknown (it may have had an effect).
func TestErrorOutcomes(t *testing.T) {
	sb := protocol.ServedBy{Node: "n1", Incarnation: "x"}
	for _, c := range protocol.Codes() {
		status, body := reply(Errorf(c.Code, "because"), sb)
		if status != c.Status || body.Outcome != c.Outcome || body.Code != c.Code || body.ServedBy != sb || body.Error != "because" {
			t.Errorf("%s: %d %+v, want %d %s", c.Code, status, body, c.Status, c.Outcome)
		}
	}
	tests := []struct {
		name    string
		err     error
		status  int
		code    string
		outcome protocol.Outcome
	}{
		{"a plain error", errors.New("boom"), 504, protocol.CodeUnknownOutcome, protocol.Unknown},
		{"a deadline", fmt.Errorf("ask: %w", context.DeadlineExceeded), 504, protocol.CodeUnknownOutcome, protocol.Unknown},
		{"wrapped kit error", fmt.Errorf("outer: %w", Errorf(protocol.CodeDropped, "full")), 503, protocol.CodeDropped, protocol.Fail},
		{"a custom fail", Custom(409, "my-conflict", protocol.Fail, "no"), 409, "my-conflict", protocol.Fail},
		{"a custom code without status or outcome", &Error{Code: "mine", Message: "?"}, 504, "mine", protocol.Unknown},
		{"a custom code with a made-up outcome", Custom(400, "mine", "maybe", "?"), 504, "mine", protocol.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := reply(tt.err, sb)
			if status != tt.status || body.Code != tt.code || body.Outcome != tt.outcome {
				t.Fatalf("%d %+v, want %d %s %s", status, body, tt.status, tt.code, tt.outcome)
			}
		})
	}
}

func TestEventLogKeepsTheLast(t *testing.T) {
	l := NewEventLog(nil, 3)
	l.SetIncarnation("a")
	for range 5 {
		l.Append(protocol.Event{Type: protocol.EventMemberUp})
	}
	tests := []struct {
		after    uint64
		max      int
		wantSeqs []uint64
	}{
		{0, 0, []uint64{3, 4, 5}}, // the first two were forgotten
		{3, 0, []uint64{4, 5}},
		{3, 1, []uint64{4}},
		{5, 0, nil},
		{99, 0, nil},
		{^uint64(0), 0, nil},
	}
	for _, tt := range tests {
		got, last := l.Since(tt.after, tt.max)
		if last != 5 {
			t.Fatalf("last = %d, want 5", last)
		}
		var seqs []uint64
		for _, e := range got {
			seqs = append(seqs, e.Seq)
			if e.Incarnation != "a" || e.Time.IsZero() {
				t.Fatalf("event %+v not stamped", e)
			}
		}
		if !slices.Equal(seqs, tt.wantSeqs) {
			t.Errorf("Since(%d, %d) = %v, want %v", tt.after, tt.max, seqs, tt.wantSeqs)
		}
	}
	select {
	case <-l.Changed():
		t.Fatal("changed before an append")
	default:
	}
	ch := l.Changed()
	l.Append(protocol.Event{Type: "x", Incarnation: "b"})
	<-ch
	if evs, _ := l.Since(5, 0); len(evs) != 1 || evs[0].Incarnation != "b" || evs[0].Seq != 6 {
		t.Fatalf("after the append: %+v", evs)
	}
}

func TestConfigFrom(t *testing.T) {
	env := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	c, err := ConfigFrom(env("SHARDTEST_NAME", "n1", "SHARDTEST_HTTP", "0.0.0.0:7500", "SHARDTEST_GOSSIP_BIND", "10.0.0.11",
		"SHARDTEST_GOSSIP_PORT", "7946", "SHARDTEST_SEEDS", "10.0.0.11:7946, 10.0.0.12:7946", "SHARDTEST_JOURNAL", "http://10.0.0.2:7400",
		"SHARDTEST_STABLE_AFTER", "60s", "SHARDTEST_PASSIVATE_IDLE_AFTER", "30ms"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "n1" || c.GossipPort != 7946 || len(c.Seeds) != 2 || c.Seeds[1] != "10.0.0.12:7946" || c.StableAfter != time.Minute || c.PassivateIdleAfter != 30*time.Millisecond || c.Journal != "http://10.0.0.2:7400" {
		t.Fatalf("config %+v", c)
	}
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"SHARDTEST_HTTP", ":1"}, "SHARDTEST_NAME is required"},
		{[]string{"SHARDTEST_NAME", "a b", "SHARDTEST_HTTP", ":1"}, "SHARDTEST_NAME"},
		{[]string{"SHARDTEST_NAME", "a"}, "SHARDTEST_HTTP is required"},
		{[]string{"SHARDTEST_NAME", "a", "SHARDTEST_HTTP", "nope"}, "SHARDTEST_HTTP"},
		{[]string{"SHARDTEST_NAME", "a", "SHARDTEST_HTTP", ":1", "SHARDTEST_GOSSIP_PORT", "x"}, "SHARDTEST_GOSSIP_PORT"},
		{[]string{"SHARDTEST_NAME", "a", "SHARDTEST_HTTP", ":1", "SHARDTEST_SEEDS", "nohost"}, "SHARDTEST_SEEDS"},
		{[]string{"SHARDTEST_NAME", "a", "SHARDTEST_HTTP", ":1", "SHARDTEST_STABLE_AFTER", "soon"}, "SHARDTEST_STABLE_AFTER"},
	} {
		if _, err := ConfigFrom(env(tt.env...)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %s", tt.env, err, tt.want)
		}
	}
}

// fakeNode is a small implementation on the kit: members with ages, a
// register-only entity type, no tell, events.
type fakeNode struct {
	self    string
	members []protocol.Member
	events  *EventLog
	entity  func(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error)
}

func (f *fakeNode) node() *Node {
	return &Node{
		Implementation: "fake",
		Name:           "n1",
		Incarnation:    func() string { return "inc1" },
		View: func() View {
			v := View{Members: f.members}
			for _, m := range f.members {
				if m.UID == f.self {
					v.Self = m
				}
			}
			if v.Self.UID == "" {
				v.Self = protocol.Member{Name: "n1", Status: protocol.StatusJoining}
			}
			return v
		},
		Age: true,
		// "probe" is a type of the implementation's own: its ops and
		// payloads are the implementation's to check.
		EntityTypes: []string{protocol.TypeRegister, "probe"},
		Entity:      f.entity,
		ShardingStatus: func() []protocol.ShardingStatus {
			return []protocol.ShardingStatus{{Type: protocol.TypeRegister, CoordinatorRunning: true}}
		},
		Coordinator: true,
		Events:      f.events,
	}
}

func call(t *testing.T, h http.Handler, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

func TestHandler(t *testing.T) {
	up := func(name string, age int64, reachable bool) protocol.Member {
		return protocol.Member{UID: name + "@i", Name: name, Incarnation: "i", UpNumber: age, Status: protocol.StatusUp, Reachable: reachable}
	}
	f := &fakeNode{self: "n1@i", members: []protocol.Member{up("n1", 2, true), up("n3", 3, false), up("n2", 1, true)}, events: NewEventLog(nil, 0),
		entity: func(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
			switch req.Op {
			case "read", "cas":
				return protocol.EntityReply{Shard: "1", Node: "n1@i", EntityIncarnation: "n1@i/1", Result: json.RawMessage(`{"value":null}`)}, nil
			case "slow":
				<-ctx.Done()
				return protocol.EntityReply{}, ctx.Err()
			case "panic":
				panic("the entity broke")
			}
			return protocol.EntityReply{}, Errorf(protocol.CodeBadRequest, "unknown op %q", req.Op)
		}}
	n := f.node()
	n.RequestTimeout = 50 * time.Millisecond
	h := n.Handler()
	if got, want := n.Capabilities(), []string{"membership", "age", "sharding", "coordinator", "events"}; !slices.Equal(got, want) {
		t.Fatalf("capabilities %v, want %v", got, want)
	}
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
		outcome                  protocol.Outcome
	}{
		{"status", "GET", "/v1/status", "", 200, "", ""},
		{"an ask", "POST", "/v1/entity", `{"type":"register","id":"k","op":"read"}`, 200, "", ""},
		{"unknown entity type", "POST", "/v1/entity", `{"type":"log","id":"k","op":"read"}`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"an id too long", "POST", "/v1/entity", `{"type":"register","id":"` + strings.Repeat("k", 257) + `","op":"read"}`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"a tell without the capability", "POST", "/v1/entity", `{"type":"register","id":"k","op":"read","mode":"tell"}`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"null body", "POST", "/v1/entity", `null`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"an unknown field", "POST", "/v1/entity", `{"type":"register","id":"k","op":"read","x":1}`, 400, protocol.CodeBadRequest, protocol.Fail},
		// Lone surrogate escapes decoded to U+FFFD: "k\ud800", "k\udfff"
		// and "k\ufffd" were one entity. A pair is a character.
		{"an id with a lone high surrogate", "POST", "/v1/entity", `{"type":"register","id":"k\ud800","op":"read"}`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"an id with a lone low surrogate", "POST", "/v1/entity", `{"type":"register","id":"k\udfff","op":"read"}`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"an id with a surrogate pair", "POST", "/v1/entity", `{"type":"register","id":"k\ud83d\ude00","op":"read"}`, 200, "", ""},
		{"an id with U+FFFD", "POST", "/v1/entity", `{"type":"register","id":"k\ufffd","op":"read"}`, 200, "", ""},
		// The protocol's types' payloads are the kit's to check
		// (payload_test.go has the rules), before the entity is asked.
		{"a cas", "POST", "/v1/entity", `{"type":"register","id":"k","op":"cas","payload":{"expect":null,"value":1}}`, 200, "", ""},
		{"a cas without expect", "POST", "/v1/entity", `{"type":"register","id":"k","op":"cas","payload":{"value":1}}`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"a register op the protocol does not define", "POST", "/v1/entity", `{"type":"register","id":"k","op":"fly"}`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"the implementation refuses", "POST", "/v1/entity", `{"type":"probe","id":"k","op":"fly"}`, 400, protocol.CodeBadRequest, protocol.Fail},
		{"no answer in time", "POST", "/v1/entity", `{"type":"probe","id":"k","op":"slow"}`, 504, protocol.CodeUnknownOutcome, protocol.Unknown},
		{"a panic", "POST", "/v1/entity", `{"type":"probe","id":"k","op":"panic"}`, 500, protocol.CodeInternal, protocol.Unknown},
		{"no singleton capability", "POST", "/v1/singleton/next-id", `{}`, 404, protocol.CodeNotFound, protocol.Fail},
		{"no clock capability", "POST", "/v1/admin/clock", `{}`, 404, protocol.CodeNotFound, protocol.Fail},
		{"no such endpoint", "GET", "/v2/x", ``, 404, protocol.CodeNotFound, protocol.Fail},
		{"wrong method", "POST", "/v1/status", ``, 405, protocol.CodeMethodNotAllowed, protocol.Fail},
		{"events: a bad query", "GET", "/v1/events?limit=0", ``, 400, protocol.CodeBadRequest, protocol.Fail},
		{"events: an unknown parameter", "GET", "/v1/events?since=3", ``, 400, protocol.CodeBadRequest, protocol.Fail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := call(t, h, tt.method, tt.path, tt.body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			if res.Header.Get(protocol.NodeHeader) != "n1" || res.Header.Get(protocol.IncarnationHeader) != "inc1" {
				t.Fatalf("served-by headers %v", res.Header)
			}
			var sb struct {
				ServedBy protocol.ServedBy `json:"served_by"`
			}
			if err := json.Unmarshal(body, &sb); err != nil || sb.ServedBy != (protocol.ServedBy{Node: "n1", Incarnation: "inc1"}) {
				t.Fatalf("body %s lacks served_by (%v)", body, err)
			}
			if tt.code == "" {
				return
			}
			var eb protocol.ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil || eb.Code != tt.code || eb.Outcome != tt.outcome || eb.Error == "" {
				t.Fatalf("error body %s, want code %s outcome %s", body, tt.code, tt.outcome)
			}
		})
	}

	// The status: members oldest first, the oldest up member named, the
	// unreachable listed, coordinator_running kept (declared).
	_, body := call(t, h, "GET", "/v1/status", "")
	var st protocol.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range st.Members {
		order = append(order, m.Name)
	}
	if !slices.Equal(order, []string{"n2", "n1", "n3"}) || st.Oldest != "n2@i" || !slices.Equal(st.Unreachable, []string{"n3@i"}) ||
		!st.Ready || st.Protocol != protocol.Version || len(st.Sharding) != 1 || !st.Sharding[0].CoordinatorRunning {
		t.Fatalf("status %s", body)
	}

	// Without age nobody is older: no up_number, no oldest; without the
	// coordinator capability no coordinator_running.
	n2 := f.node()
	n2.Age, n2.Without = false, []string{protocol.CapCoordinator}
	_, body = call(t, n2.Handler(), "GET", "/v1/status", "")
	st = protocol.Status{}
	json.Unmarshal(body, &st)
	if st.Oldest != "" || st.Members[0].UpNumber != 0 || st.Self.UpNumber != 0 || st.Sharding[0].CoordinatorRunning {
		t.Fatalf("status without age: %s", body)
	}

	// Not joined: client requests are refused, definitely.
	f.self = "nobody"
	res, body := call(t, h, "POST", "/v1/entity", `{"type":"register","id":"k","op":"read"}`)
	if res.StatusCode != 503 || !strings.Contains(string(body), `"not-ready"`) || !strings.Contains(string(body), `"fail"`) {
		t.Fatalf("not joined: %d %s", res.StatusCode, body)
	}
}

// A long poll waits for the next event and answers as soon as it comes.
func TestEventsLongPoll(t *testing.T) {
	f := &fakeNode{events: NewEventLog(nil, 0)}
	h := f.node().Handler()
	srv := httptest.NewServer(h)
	defer srv.Close()
	go func() {
		time.Sleep(100 * time.Millisecond)
		f.events.Append(protocol.Event{Type: protocol.EventMemberUp})
	}()
	start := time.Now()
	res, err := http.Get(srv.URL + "/v1/events?after=0&wait_ms=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var r protocol.EventsReply
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); len(r.Events) != 1 || r.Last != 1 || took > 4*time.Second {
		t.Fatalf("events %+v after %v", r, took)
	}
}

// A server made by the kit bounds how long a request may take to arrive
// (a slow body held connections open forever).
func TestServerTimeouts(t *testing.T) {
	srv := NewServer(http.NotFoundHandler())
	if srv.ReadTimeout != ReadTimeout || srv.ReadHeaderTimeout == 0 || srv.ReadTimeout == 0 {
		t.Fatalf("read timeouts %v / %v", srv.ReadHeaderTimeout, srv.ReadTimeout)
	}
}

// Connections are bounded so that silent ones cannot keep a client that
// speaks waiting: 4,200 silent connections filled the node's 4,096, and a
// new request (a member's on the peer port too) waited ~9.5 s for the
// header timeout to free a slot. Each case opens silent connections from
// 127.0.0.1 (one source), then a probe request from a source address.
func TestSlots(t *testing.T) {
	const other = "127.0.0.2" // another source on Linux's loopback
	isOther := func(ip netip.Addr) bool { return ip == netip.MustParseAddr(other) }
	tests := []struct {
		name  string
		slots Slots
		busy  int  // requests in progress from 127.0.0.1 (never silent)
		flood int  // silent connections from 127.0.0.1
		age   bool // wait past Grace: the flood is silent
		more  int  // silent connections from 127.0.0.1 after that
		from  string
		// served: the probe is answered at once; else its connection is
		// closed at once.
		served bool
		closed int // flood connections closed by the end
	}{
		{name: "a silent flood fills every slot: a new source takes the longest silent one's",
			slots: Slots{Max: 8, Grace: 50 * time.Millisecond}, flood: 8, age: true, from: other, served: true, closed: 1},
		{name: "and one of the flood's own source too",
			slots: Slots{Max: 8, Grace: 50 * time.Millisecond}, flood: 8, age: true, from: "127.0.0.1", served: true, closed: 1},
		{name: "a flood younger than Grace is not yet silent: the next is refused at once, not kept waiting",
			slots: Slots{Max: 8, Grace: time.Hour}, flood: 8, from: other, closed: 0},
		{name: "requests in progress are not silent",
			slots: Slots{Max: 4, Grace: 50 * time.Millisecond}, busy: 4, age: true, from: other},
		// The 6 and the probe's: the 6 are silent by the probe.
		{name: "a source holding more than PerSource silent connections gives up its oldest for each new one",
			slots: Slots{PerSource: 4, Grace: 50 * time.Millisecond}, flood: 10, age: true, more: 6, from: "127.0.0.1", served: true, closed: 7},
		{name: "a burst younger than Grace is let in whole",
			slots: Slots{PerSource: 2, Grace: time.Hour}, flood: 20, from: "127.0.0.1", served: true},
		{name: "the reserved slots are the preferred source's",
			slots: Slots{Max: 8, Reserved: 2, Grace: time.Hour, Preferred: isOther}, flood: 6, from: other, served: true},
		{name: "and no one else's",
			slots: Slots{Max: 8, Reserved: 2, Grace: time.Hour, Preferred: isOther}, flood: 6, from: "127.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/busy" {
					<-release
				}
				w.WriteHeader(http.StatusNoContent)
			}))
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- tt.slots.Serve(srv, l) }()
			defer func() {
				srv.Close()
				<-served
			}()
			addr := l.Addr().String()
			busy := make(chan error, tt.busy)
			for range tt.busy {
				c := dialFrom(t, "127.0.0.1", addr)
				go func() { _, err := roundTrip(c, "/busy"); busy <- err }()
			}
			var flood []net.Conn
			open := func(n int) {
				for range n {
					flood = append(flood, dialFrom(t, "127.0.0.1", addr))
				}
			}
			open(tt.flood)
			// Wait until the server has accepted them all: a probe
			// before then would find slots free.
			time.Sleep(200 * time.Millisecond)
			if tt.age {
				time.Sleep(tt.slots.Grace)
			}
			open(tt.more)
			time.Sleep(100 * time.Millisecond)

			start := time.Now()
			status, err := roundTrip(dialFrom(t, tt.from, addr), "/probe")
			took := time.Since(start)
			switch {
			case took > 2*time.Second:
				t.Errorf("the probe from %s took %v (%d, %v): kept waiting", tt.from, took, status, err)
			case tt.served && status != http.StatusNoContent:
				t.Errorf("the probe from %s: %d %v, want it served", tt.from, status, err)
			case !tt.served && err == nil:
				t.Errorf("the probe from %s was served (%d), want its connection closed", tt.from, status)
			}
			closed := 0
			for _, c := range flood {
				c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
				if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
					closed++
				}
				c.Close()
			}
			if closed != tt.closed {
				t.Errorf("%d of the flood's %d connections closed, want %d", closed, len(flood), tt.closed)
			}
			close(release)
			for range tt.busy {
				if err := <-busy; err != nil {
					t.Errorf("a request in progress: %v", err)
				}
			}
		})
	}
}

// dialFrom opens a connection to addr from the source address ip.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends GET path on c and reads the reply's status, within 3 s.
func roundTrip(c net.Conn, path string) (int, error) {
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

// A node that sets no RequestTimeout answers before the harness stops
// waiting: its handlers' deadline is DefaultRequestTimeout away, below
// the harness's default op timeout.
func TestDefaultDeadlineIsBelowTheOpTimeout(t *testing.T) {
	var left time.Duration
	f := &fakeNode{self: "n1@i", members: []protocol.Member{{UID: "n1@i", Name: "n1", Status: protocol.StatusUp, Reachable: true}},
		entity: func(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
			d, ok := ctx.Deadline()
			if !ok {
				return protocol.EntityReply{}, Errorf(protocol.CodeInternal, "no deadline")
			}
			left = time.Until(d)
			return protocol.EntityReply{}, nil
		}}
	res, body := call(t, f.node().Handler(), "POST", "/v1/entity", `{"type":"register","id":"k","op":"read"}`)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
	if left > DefaultRequestTimeout || left < DefaultRequestTimeout-time.Second || DefaultRequestTimeout >= protocol.DefaultOpTimeout {
		t.Fatalf("the handler had %v left; want about DefaultRequestTimeout (%v), below the op timeout (%v)", left, DefaultRequestTimeout, protocol.DefaultOpTimeout)
	}
}

package conform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/internal/testbin"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// fakeCluster is a small implementation of shardtest/1 built on the kit: n
// members with ages, one register entity type kept in a map all members
// share (so it reads back everywhere), events. Each test breaks it in one
// way and expects conform to name the rule that way breaks.
type fakeCluster struct {
	mu      sync.Mutex
	values  map[string]int64
	perNode bool // each node keeps its own values: no read-back
	local   []map[string]int64
	ages    func(i int) int64 // up_number of member i
	// headerTimeout, if set, cuts a request header that has not arrived
	// by then (the probes' slow client).
	headerTimeout time.Duration
	servers       []*httptest.Server
	revision      int // the revision the capabilities name
}

func (f *fakeCluster) start(t *testing.T, n int, wrap func(i int, h http.Handler) http.Handler) []Node {
	t.Helper()
	f.values = map[string]int64{}
	if f.ages == nil {
		f.ages = func(i int) int64 { return int64(i + 1) }
	}
	members := func() []protocol.Member {
		var out []protocol.Member
		for i := range n {
			name := fmt.Sprintf("n%d", i+1)
			out = append(out, protocol.Member{UID: name + "@inc", Name: name, Incarnation: "inc", UpNumber: f.ages(i), Status: protocol.StatusUp, Reachable: true})
		}
		return out
	}
	var nodes []Node
	for i := range n {
		f.local = append(f.local, map[string]int64{})
		name := fmt.Sprintf("n%d", i+1)
		events := kit.NewEventLog(nil, 0)
		events.SetIncarnation("inc")
		events.Append(protocol.Event{Type: protocol.EventMemberUp, Member: name + "@inc"})
		incs := map[string]string{}
		kn := &kit.Node{
			Implementation: "fake",
			Revision:       f.revision,
			Name:           name,
			Incarnation:    func() string { return "inc" },
			View: func() kit.View {
				ms := members()
				return kit.View{Self: ms[i], Members: ms}
			},
			Age:         true,
			EntityTypes: []string{protocol.TypeRegister},
			Entity: func(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
				f.mu.Lock()
				defer f.mu.Unlock()
				vals := f.values
				if f.perNode {
					vals = f.local[i]
				}
				incs[req.ID] = name + "@inc/" + req.ID
				rep := protocol.EntityReply{Node: name + "@inc", EntityIncarnation: incs[req.ID]}
				cur, set := vals[req.ID]
				result := func(ok *bool) json.RawMessage {
					r := protocol.RegisterResult{OK: ok}
					if v, set := vals[req.ID]; set {
						r.Value = &v
					}
					b, _ := json.Marshal(r)
					return b
				}
				// The kit has refused what ParseRegister refuses
				// before Entity runs.
				op, err := kit.ParseRegister(req.Op, req.Payload)
				if err != nil {
					return rep, err
				}
				switch op.Op {
				case protocol.OpRead:
					rep.Result = result(nil)
				case protocol.OpWrite:
					vals[req.ID] = op.Value
					rep.Result = result(nil)
				case protocol.OpCAS:
					ok := (op.Expect == nil && !set) || (op.Expect != nil && set && *op.Expect == cur)
					if ok {
						vals[req.ID] = op.Value
					}
					rep.Result = result(&ok)
				}
				return rep, nil
			},
			ShardingStatus: func() []protocol.ShardingStatus {
				f.mu.Lock()
				defer f.mu.Unlock()
				sh := protocol.ShardStatus{ID: "", Entities: []protocol.EntityStatus{}}
				for id, inc := range incs {
					sh.Entities = append(sh.Entities, protocol.EntityStatus{ID: id, Incarnation: inc})
				}
				return []protocol.ShardingStatus{{Type: protocol.TypeRegister, Region: protocol.RegionStatus{Shards: []protocol.ShardStatus{sh}}}}
			},
			Events: events,
		}
		h := kn.Handler()
		if wrap != nil {
			h = wrap(i, h)
		}
		srv := httptest.NewUnstartedServer(h)
		srv.Config.ReadHeaderTimeout = f.headerTimeout
		srv.Start()
		t.Cleanup(srv.Close)
		f.servers = append(f.servers, srv)
		nodes = append(nodes, Node{Name: name, Addr: strings.TrimPrefix(srv.URL, "http://")})
	}
	return nodes
}

// verdicts maps rule names to verdicts.
func verdicts(rep Report) map[string]Result {
	out := map[string]Result{}
	for _, r := range rep.Results {
		out[r.Rule] = r
	}
	return out
}

func TestConformNamesTheBrokenRule(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(f *fakeCluster)
		wrap   func(i int, h http.Handler) http.Handler
		broken string // "" : every applicable rule passes
	}{
		{name: "a correct implementation on the kit"},
		{name: "a proxy strips the served-by headers", broken: "served-by-everywhere",
			wrap: func(_ int, h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					h.ServeHTTP(headerless{w}, r)
				})
			}},
		{name: "two members share an age", broken: "members-oldest-first",
			setup: func(f *fakeCluster) { f.ages = func(int) int64 { return 7 } }},
		// The kit refuses an unknown register op itself: a front that
		// answers it first, as an unknown outcome, breaks the rule.
		{name: "an unknown op answered as unknown outcome", broken: "entity-bad-requests",
			wrap: func(i int, h http.Handler) http.Handler {
				name := fmt.Sprintf("n%d", i+1)
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					var req protocol.EntityRequest
					json.Unmarshal(body, &req)
					if r.URL.Path != "/v1/entity" || req.Op == "" || req.Op == protocol.OpRead || req.Op == protocol.OpWrite || req.Op == protocol.OpCAS {
						r.Body = io.NopCloser(bytes.NewReader(body))
						h.ServeHTTP(w, r)
						return
					}
					w.Header().Set(protocol.NodeHeader, name)
					w.Header().Set(protocol.IncarnationHeader, "inc")
					w.WriteHeader(http.StatusGatewayTimeout)
					json.NewEncoder(w).Encode(protocol.ErrorBody{Error: "no op " + req.Op, Code: protocol.CodeUnknownOutcome,
						Outcome: protocol.Unknown, ServedBy: protocol.ServedBy{Node: name, Incarnation: "inc"}})
				})
			}},
		{name: "each node keeps its own state", broken: "read-back-everywhere",
			setup: func(f *fakeCluster) { f.perNode = true }},
		{name: "events with a gap", broken: "events-consecutive",
			wrap: func(i int, h http.Handler) http.Handler {
				name := fmt.Sprintf("n%d", i+1)
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path != "/v1/events" || r.URL.Query().Get("after") != "0" || r.URL.Query().Get("wait_ms") != "" {
						h.ServeHTTP(w, r)
						return
					}
					w.Header().Set(protocol.NodeHeader, name)
					w.Header().Set(protocol.IncarnationHeader, "inc")
					json.NewEncoder(w).Encode(protocol.EventsReply{ServedBy: protocol.ServedBy{Node: name, Incarnation: "inc"},
						Events: []protocol.Event{{Seq: 1, Incarnation: "inc", Type: "member-up"}, {Seq: 3, Incarnation: "inc", Type: "member-up"}}, Last: 3})
				})
			}},
		{name: "declares a capability it does not serve", broken: "clock",
			wrap: func(_ int, h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path != "/v1/capabilities" || r.Method != http.MethodGet {
						h.ServeHTTP(w, r)
						return
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					var c protocol.Capabilities
					json.Unmarshal(rec.Body.Bytes(), &c)
					c.Capabilities = append(c.Capabilities, protocol.CapClock)
					for k, v := range rec.Header() {
						w.Header()[k] = v
					}
					json.NewEncoder(w).Encode(c)
				})
			}},
		{name: "a front that decodes and re-encodes entity requests", broken: "lone-surrogates-refused",
			wrap: func(_ int, h http.Handler) http.Handler { return reencoding(h) }},
		{name: "a node that holds a request too long", broken: "answers-in-time",
			wrap: func(i int, h http.Handler) http.Handler {
				var once sync.Once
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if i == 1 && r.URL.Path == "/v1/entity" {
						once.Do(func() { time.Sleep(AnswerLimit + 500*time.Millisecond) })
					}
					h.ServeHTTP(w, r)
				})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeCluster{}
			if tt.setup != nil {
				tt.setup(f)
			}
			rep := Run(context.Background(), f.start(t, 2, tt.wrap))
			got := verdicts(rep)
			for _, r := range rep.Results {
				if r.Verdict == Fail && r.Rule != tt.broken && !(tt.broken != "" && alsoBreaks(tt.broken, r.Rule)) {
					t.Errorf("rule %s failed too: %s", r.Rule, r.Detail)
				}
			}
			if tt.broken == "" {
				if !rep.OK() {
					t.Fatalf("a correct implementation failed: %+v", rep)
				}
				return
			}
			if r := got[tt.broken]; r.Verdict != Fail || r.Detail == "" {
				t.Fatalf("rule %s: %s %q, want it failed with the reason", tt.broken, r.Verdict, r.Detail)
			}
			if rep.OK() {
				t.Fatal("the report is OK with a failed rule")
			}
		})
	}
}

// alsoBreaks lists the rules one breakage is allowed to take down with it.
func alsoBreaks(broken, rule string) bool {
	switch broken {
	case "clock":
		// An endpoint declared but not served fails every rule that
		// sends it something.
		return rule == "errors-are-definite" || rule == "unknown-fields-refused" || rule == "non-object-bodies-refused"
	}
	return false
}

// reencoding hands h each entity request's body decoded and encoded again,
// as a careless front would: a lone surrogate escape comes out as U+FFFD,
// which the kit cannot tell from one sent as such. Bodies it cannot decode
// pass as they are.
func reencoding(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/entity" {
			body, _ := io.ReadAll(r.Body)
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber() // register values stay exact
			var v any
			if dec.Decode(&v) == nil {
				if again, err := json.Marshal(v); err == nil {
					body = again
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		h.ServeHTTP(w, r)
	})
}

// headerless drops the served-by headers a handler sets.
type headerless struct{ http.ResponseWriter }

func (h headerless) WriteHeader(status int) {
	h.Header().Del(protocol.NodeHeader)
	h.Header().Del(protocol.IncarnationHeader)
	h.ResponseWriter.WriteHeader(status)
}

func (h headerless) Write(b []byte) (int, error) {
	h.Header().Del(protocol.NodeHeader)
	h.Header().Del(protocol.IncarnationHeader)
	return h.ResponseWriter.Write(b)
}

// conformBasePort is this package's port range: 27400..27799 (each
// package's tests have their own, so packages tested in parallel do not
// collide).
const conformBasePort = 27400

// The reference node passes every rule; started without some
// capabilities, it still conforms, and their endpoints are shown to 404.
// With every capability it passes every probe too (the slow client's
// wait included).
func TestConformReferenceNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	binary, cleanup, err := testbin.Build("shardtest-conform-test")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	for k, tt := range []struct {
		name    string
		args    []string
		nodes   int
		applies string // a rule that must pass (not skip)
		broken  string // a rule that must fail ("": none may)
		probes  bool   // every probe must pass too
	}{
		{"every capability", nil, 3, "members-oldest-first", "", true},
		{"without events, clock, age and coordinator", []string{"--without-capabilities=events,clock,age,coordinator"}, 2, "undeclared-capabilities-404", "", false},
		// Membership is what every implementation needs: without it the
		// node breaks the protocol, and the rule says which part.
		{"without membership", []string{"--without-capabilities=membership"}, 1, "health", "capabilities", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cl, err := local.Start(ctx, local.Options{Binary: binary, Nodes: tt.nodes, BasePort: conformBasePort + 200*k, Dir: dir, NodeArgs: tt.args})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Stop()
			var nodes []Node
			for _, n := range cl.NodeList() {
				nodes = append(nodes, Node{Name: n.Name, Addr: n.HTTPAddr})
			}
			rep := Run(ctx, nodes)
			if tt.broken != "" {
				if r := verdicts(rep)[tt.broken]; r.Verdict != Fail || !strings.Contains(r.Detail, "membership is not declared") {
					t.Errorf("%s: %s %q, want it failed for the missing membership", tt.broken, r.Verdict, r.Detail)
				}
			}
			for _, r := range rep.Results {
				if r.Verdict == Fail && tt.broken == "" {
					t.Errorf("%s failed: %s", r.Rule, r.Detail)
				}
			}
			if r := verdicts(rep)[tt.applies]; r.Verdict != Pass {
				t.Errorf("%s: %s %s, want pass", tt.applies, r.Verdict, r.Detail)
			}
			if tt.probes {
				checkProbesOnReferenceNode(ctx, t, cl, nodes)
			}
			if t.Failed() {
				logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
				for _, l := range logs {
					b, _ := os.ReadFile(l)
					t.Logf("%s:\n%s", l, b)
				}
			}
		})
	}
}

// A failed rule newer than the revision the implementation names is
// labelled new since that revision (and still fails); one it already had,
// or with no revision named, is not; a revision the harness does not know
// fails the capabilities rule.
func TestConformLabelsRulesNewSinceYourRevision(t *testing.T) {
	tests := []struct {
		revision  int
		wantNew   bool
		badRevErr bool
	}{
		{revision: 0},
		{revision: 2, wantNew: true},
		{revision: 3},
		{revision: protocol.Revision},
		{revision: protocol.Revision + 1, badRevErr: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("revision ", tt.revision), func(t *testing.T) {
			t.Parallel()
			f := &fakeCluster{revision: tt.revision}
			rep := Run(context.Background(), f.start(t, 2, func(_ int, h http.Handler) http.Handler { return reencoding(h) }))
			got := verdicts(rep)
			r := got["lone-surrogates-refused"]
			if r.Verdict != Fail || r.Since != 3 {
				t.Fatalf("lone-surrogates-refused: %+v, want failed, since revision 3", r)
			}
			if r.New != tt.wantNew {
				t.Errorf("new since your revision: %v, want %v", r.New, tt.wantNew)
			}
			if want := map[bool]int{true: 1}[tt.wantNew]; rep.NewFailed() != want {
				t.Errorf("%d failed rules new since your revision, want %d", rep.NewFailed(), want)
			}
			if rep.Revision != tt.revision || rep.Current != protocol.Revision {
				t.Errorf("report revisions %d (current %d), want %d (%d)", rep.Revision, rep.Current, tt.revision, protocol.Revision)
			}
			if c := got["capabilities"]; (c.Verdict == Fail) != tt.badRevErr {
				t.Errorf("capabilities: %s %q", c.Verdict, c.Detail)
			}
		})
	}
}

// Every rule names a revision that exists, and docs/protocol.md lists
// every revision with its date.
func TestRulesNameTheirRevision(t *testing.T) {
	for _, r := range Rules() {
		if r.Since < 1 || r.Since > protocol.Revision {
			t.Errorf("rule %s: since revision %d, want 1..%d", r.Name, r.Since, protocol.Revision)
		}
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	revs := protocol.Revisions()
	if last := revs[len(revs)-1].Revision; last != protocol.Revision {
		t.Fatalf("the last revision listed is %d, Revision is %d", last, protocol.Revision)
	}
	for i, rv := range revs {
		if rv.Revision != i+1 {
			t.Errorf("revision %d listed as number %d", i+1, rv.Revision)
		}
		if h := fmt.Sprintf("### Revision %d (%s)", rv.Revision, rv.Date); !strings.Contains(string(doc), h) {
			t.Errorf("docs/protocol.md has no heading %q", h)
		}
	}
}

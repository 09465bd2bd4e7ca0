package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

func TestIsDefinite(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"dropped", fmt.Errorf("x: %w", ErrDropped), true},
		{"not running", ErrNotRunning, true},
		{"bad request", ErrBadRequest, true},
		{"unavailable", ErrUnavailable, true},
		{"unknown", fmt.Errorf("%w: %w", ErrUnknownOutcome, context.DeadlineExceeded), false},
		{"unknown wins", fmt.Errorf("%w: %w", ErrUnknownOutcome, ErrNotRunning), false},
		{"fenced", fmt.Errorf("%w: %w", ErrInstanceFailed, journal.ErrFenced), true},
		{"instance failed alone", ErrInstanceFailed, false},
		{"remote fail", &peer.RemoteError{Status: 400, Body: protocol.ErrorBody{Outcome: protocol.Fail}}, true},
		{"remote unknown", &peer.RemoteError{Status: 503, Body: protocol.ErrorBody{Outcome: protocol.Unknown}}, false},
		{"deadline", context.DeadlineExceeded, false},
		{"other", errTest, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsDefinite(tt.err); got != tt.want {
				t.Errorf("IsDefinite(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestProxyForwardsToOldest(t *testing.T) {
	rec := newRecorder()
	c := newCluster(t, 2, testConfig(), func(n string) Factory { return rec.factory(n, 0) })
	n1, n2 := c.node("n1"), c.node("n2")
	c.setAll(allUp("n1", "n2"))
	c.start()
	for _, from := range []*tnode{n2, n1} {
		p, err := NewProxy(ProxyConfig{Name: "test-singleton", RetryInterval: 10 * time.Millisecond},
			ProxyDeps{Membership: from.mem, Peers: from.peers, Clock: c.clock, Events: from.ev, Local: from.mgr})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		res, err := p.Call(ctx, Request{Op: "echo", Payload: json.RawMessage(`"via ` + from.name + `"`)})
		cancel()
		if err != nil {
			t.Fatalf("via %s: %v", from.name, err)
		}
		var r struct {
			Node    string `json:"node"`
			Payload string `json:"payload"`
		}
		if err := json.Unmarshal(res, &r); err != nil || r.Node != "n1" || r.Payload != "via "+from.name {
			t.Errorf("via %s: reply %s", from.name, res)
		}
		st := p.Status()
		if st.Target != n1.uid() || st.Forwarded < 1 || st.Buffered != 0 || st.Dropped != 0 {
			t.Errorf("via %s: status %+v", from.name, st)
		}
		// A definite error from the instance is returned, not retried.
		_, err = p.Call(context.Background(), Request{Op: "nope"})
		if !errors.Is(err, ErrBadRequest) || !IsDefinite(err) {
			t.Errorf("via %s: bad op: %v", from.name, err)
		}
	}
	if got := strings.Join(rec.handled("n1"), ","); got != "echo,nope,echo,nope" {
		t.Errorf("n1 handled %q", got)
	}
}

func TestProxyBuffersUntilSingletonRuns(t *testing.T) {
	rec := newRecorder()
	c := newCluster(t, 2, testConfig(), func(n string) Factory { return rec.factory(n, 0) })
	n2 := c.node("n2")
	// Nobody is up yet: the oldest is unknown.
	c.setAll(view{"n1": cluster.StatusJoining, "n2": cluster.StatusJoining})
	c.start()
	p, err := NewProxy(ProxyConfig{Name: "test-singleton", RetryInterval: 20 * time.Millisecond},
		ProxyDeps{Membership: n2.mem, Peers: n2.peers, Clock: c.clock, Local: n2.mgr})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res json.RawMessage
		err error
	}
	out := make(chan answer, 2)
	for i := range 2 {
		go func() {
			res, err := p.Call(context.Background(), Request{Op: "echo", Payload: mustJSON(t, i)})
			out <- answer{res, err}
		}()
	}
	eventually(t, wait, func() bool { return p.Status().Buffered == 2 }, "two requests buffered")
	if p.Status().Forwarded != 0 {
		t.Fatal("forwarded while no oldest is known")
	}
	c.setAll(allUp("n1", "n2"))
	for range 2 {
		select {
		case a := <-out:
			if a.err != nil || !strings.Contains(string(a.res), `"node":"n1"`) {
				t.Errorf("buffered request: %s, %v", a.res, a.err)
			}
		case <-time.After(wait):
			t.Fatal("buffered requests not delivered")
		}
	}
	if st := p.Status(); st.Buffered != 0 || st.Dropped != 0 {
		t.Errorf("status %+v", st)
	}
}

// lonelyProxy is a proxy whose view has no oldest, and a way to give it one.
func lonelyProxy(t *testing.T, size int) (*Proxy, *fakeMembership, *kit.EventLog) {
	t.Helper()
	mem := newFakeMembership()
	self := cluster.Member{Name: "p", Incarnation: "1", UpNumber: 9, GossipAddr: "gossip-p", HTTPAddr: "127.0.0.1:1", PeerAddr: "127.0.0.1:1"}
	mem.Set(cluster.Snapshot{Self: cluster.MemberState{Member: self, Status: cluster.StatusJoining}})
	ev := kit.NewEventLog(clock.Real().Now, 0)
	p, err := NewProxy(ProxyConfig{Name: "test-singleton", BufferSize: size, RetryInterval: 5 * time.Millisecond},
		ProxyDeps{Membership: mem, Peers: peer.NewClient(peer.Self{UID: "gossip-p@1", GossipAddr: "gossip-p"}, nil), Clock: clock.Real(), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	return p, mem, ev
}

func TestProxyBufferDropsOldest(t *testing.T) {
	p, _, ev := lonelyProxy(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make([]chan error, 4)
	for i := range errs {
		errs[i] = make(chan error, 1)
		go func() {
			_, err := p.Call(ctx, Request{Op: "echo"})
			errs[i] <- err
		}()
		if i < 2 {
			eventually(t, wait, func() bool { return p.Status().Buffered == i+1 }, "request %d buffered", i)
			continue
		}
		// The buffer is full: the oldest waiting request (i-2) is dropped.
		select {
		case err := <-errs[i-2]:
			if !errors.Is(err, ErrDropped) || !IsDefinite(err) {
				t.Fatalf("request %d: %v, want ErrDropped", i-2, err)
			}
		case <-time.After(wait):
			t.Fatalf("request %d not dropped", i-2)
		}
		eventually(t, wait, func() bool { return p.Status().Buffered == 2 }, "buffer full again")
	}
	st := p.Status()
	if st.Dropped != 2 || st.Buffered != 2 || st.Forwarded != 0 || st.Target != "" {
		t.Errorf("status %+v", st)
	}
	if n := len(eventsOf(ev, protocol.EventProxyDropped)); n != 2 {
		t.Errorf("%d ProxyDropped events, want 2", n)
	}
	// The rest expire while only buffered: definite.
	cancel()
	for _, i := range []int{2, 3} {
		err := <-errs[i]
		if !errors.Is(err, ErrNotRunning) || !IsDefinite(err) || errors.Is(err, ErrDropped) {
			t.Errorf("request %d: %v, want a definite not-running error", i, err)
		}
	}
	eventually(t, wait, func() bool { return p.Status().Buffered == 0 }, "buffer empty")
}

func TestProxyDeadlineWhileBuffered(t *testing.T) {
	p, _, _ := lonelyProxy(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Call(ctx, Request{Op: "echo"})
	if !errors.Is(err, ErrNotRunning) || !errors.Is(err, context.DeadlineExceeded) || !IsDefinite(err) {
		t.Fatalf("err %v", err)
	}
	if _, err := p.Call(context.Background(), Request{}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty op: %v", err)
	}
}

// TestProxyRemoteOutcomes drives the proxy against a scripted remote
// manager: definite "not running" answers are retried, anything with an
// unknown outcome is returned after a single attempt.
func TestProxyRemoteOutcomes(t *testing.T) {
	notRunning := func(w http.ResponseWriter) {
		peer.WriteJSON(w, 503, protocol.ErrorBody{Error: "no", Code: protocol.CodeSingletonNotRunning, Outcome: protocol.Fail})
	}
	tests := []struct {
		name        string
		handler     func(hit int, w http.ResponseWriter, r *http.Request)
		timeout     time.Duration
		closed      bool // the server is gone (connection refused)
		wantHits    int64
		wantErr     error // nil: success
		wantDefined bool
	}{
		{
			name: "not running twice then ok",
			handler: func(hit int, w http.ResponseWriter, r *http.Request) {
				if hit <= 2 {
					notRunning(w)
					return
				}
				peer.WriteJSON(w, 200, map[string]int{"id": 7})
			},
			wantHits: 3,
		},
		{
			name: "failed instance is retried",
			handler: func(hit int, w http.ResponseWriter, r *http.Request) {
				if hit == 1 {
					peer.WriteJSON(w, 503, protocol.ErrorBody{Error: "fenced", Code: protocol.CodeSingletonFailed, Outcome: protocol.Fail})
					return
				}
				peer.WriteJSON(w, 200, map[string]int{"id": 7})
			},
			wantHits: 2,
		},
		{
			name: "unknown outcome answer",
			handler: func(hit int, w http.ResponseWriter, r *http.Request) {
				peer.WriteJSON(w, 503, protocol.ErrorBody{Error: "journal down", Code: protocol.CodeSingletonOutcomeUnknown, Outcome: protocol.Unknown})
			},
			wantHits: 1, wantErr: ErrUnknownOutcome,
		},
		{
			name: "plain 500",
			handler: func(hit int, w http.ResponseWriter, r *http.Request) {
				http.Error(w, "boom", 500)
			},
			wantHits: 1, wantErr: ErrUnknownOutcome,
		},
		{
			name: "no answer before the deadline",
			handler: func(hit int, w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body) // lets the server notice the client hanging up
				select {
				case <-r.Context().Done():
				case <-time.After(wait):
				}
			},
			timeout:  100 * time.Millisecond,
			wantHits: 1, wantErr: ErrUnknownOutcome,
		},
		{
			name: "garbled success",
			handler: func(hit int, w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(200)
				_, _ = w.Write([]byte("{"))
			},
			wantHits: 1, wantErr: ErrUnknownOutcome,
		},
		{
			name: "bad request",
			handler: func(hit int, w http.ResponseWriter, r *http.Request) {
				peer.WriteJSON(w, 400, protocol.ErrorBody{Error: "op", Code: protocol.CodeBadRequest, Outcome: protocol.Fail})
			},
			wantHits: 1, wantErr: ErrBadRequest, wantDefined: true,
		},
		{
			name:    "connection refused until the deadline",
			closed:  true,
			timeout: 100 * time.Millisecond,
			wantErr: ErrNotRunning, wantDefined: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hits atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := hits.Add(1)
				if r.URL.Path != "/internal/v1/singleton/test-singleton/request" || r.Method != http.MethodPost {
					t.Errorf("request %s %s", r.Method, r.URL.Path)
				}
				tt.handler(int(n), w, r)
			})
			streams := peer.NewStreamServer(nil, nil, h, nil)
			srv := httptest.NewServer(streams.Handler(h))
			defer srv.Close()
			defer streams.Close()
			addr := strings.TrimPrefix(srv.URL, "http://")
			if tt.closed {
				srv.Close()
			}
			p, mem, _ := lonelyProxy(t, 10)
			s := mem.Snapshot()
			s.Self.Status = cluster.StatusUp
			target := cluster.MemberState{Member: cluster.Member{Name: "o", Incarnation: "1", UpNumber: 1, GossipAddr: "gossip-o", HTTPAddr: addr, PeerAddr: addr}, Status: cluster.StatusUp}
			s.Members = []cluster.MemberState{target, s.Self}
			mem.Set(s)

			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			res, err := p.Call(ctx, Request{Op: OpNextID})
			if tt.wantErr == nil {
				if err != nil || string(res) != `{"id":7}` {
					t.Fatalf("got %s, %v", res, err)
				}
			} else {
				if !errors.Is(err, tt.wantErr) || IsDefinite(err) != tt.wantDefined {
					t.Fatalf("err %v (definite %v), want %v (definite %v)", err, IsDefinite(err), tt.wantErr, tt.wantDefined)
				}
			}
			if tt.closed {
				if p.Status().Forwarded < 2 {
					t.Errorf("refused connections not retried: forwarded %d", p.Status().Forwarded)
				}
			} else if got := hits.Load(); got != tt.wantHits {
				t.Errorf("%d attempts reached the server, want %d", got, tt.wantHits)
			}
		})
	}
}

func TestProxyConfig(t *testing.T) {
	mem := newFakeMembership()
	d := ProxyDeps{Membership: mem, Peers: peer.NewClient(peer.Self{UID: "g@1", GossipAddr: "g"}, nil), Clock: clock.Real()}
	if _, err := NewProxy(ProxyConfig{Name: "Bad Name"}, d); err == nil {
		t.Error("bad name accepted")
	}
	if _, err := NewProxy(ProxyConfig{Name: "x", BufferSize: -1}, d); err == nil {
		t.Error("negative buffer accepted")
	}
	if _, err := NewProxy(ProxyConfig{Name: "x"}, ProxyDeps{}); err == nil {
		t.Error("missing deps accepted")
	}
	p, err := NewProxy(ProxyConfig{Name: "x"}, d)
	if err != nil || p.cfg.BufferSize != 1000 || p.cfg.RetryInterval != 200*time.Millisecond {
		t.Errorf("defaults: %+v, %v", p.cfg, err)
	}
}

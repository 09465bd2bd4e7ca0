package peer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestFilterDirections(t *testing.T) {
	var f Filter
	f.Set(Rules{DropIn: []string{"a:1"}, DropOut: []string{"b:2"}})
	tests := []struct {
		peer             string
		from, to, stream bool
	}{
		{"a:1", false, true, false},
		{"b:2", true, false, false},
		{"c:3", true, true, true},
	}
	for _, tt := range tests {
		if got := f.AllowsFrom(tt.peer); got != tt.from {
			t.Errorf("AllowsFrom(%s) = %v", tt.peer, got)
		}
		if got := f.AllowsTo(tt.peer); got != tt.to {
			t.Errorf("AllowsTo(%s) = %v", tt.peer, got)
		}
		if got := f.AllowsStream(tt.peer); got != tt.stream {
			t.Errorf("AllowsStream(%s) = %v", tt.peer, got)
		}
	}
	f.Set(Rules{})
	if !f.AllowsStream("a:1") || len(f.Rules().DropIn) != 0 {
		t.Fatal("heal did not clear the rules")
	}
	var nilFilter *Filter
	if !nilFilter.AllowsStream("x:1") {
		t.Fatal("a nil filter must allow everything")
	}
}

func TestClientThroughFilter(t *testing.T) {
	var serverFilter Filter
	srv := httptest.NewServer(serverFilter.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte(`{"v":7}`))
		case "/fail":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"no","code":"x","outcome":"fail"}`))
		default:
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("plain text"))
		}
	})))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var clientFilter Filter
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, &clientFilter)
	defer c.Close()
	ctx := context.Background()

	var out struct{ V int }
	if err := c.Call(ctx, Target{UID: "peer@1", GossipAddr: "peer:1", Addr: addr}, "/ok", struct{}{}, &out); err != nil || out.V != 7 {
		t.Fatalf("ok call: %v %+v", err, out)
	}
	err := c.Call(ctx, Target{UID: "peer@1", GossipAddr: "peer:1", Addr: addr}, "/fail", struct{}{}, nil)
	if !IsDefiniteFailure(err) {
		t.Fatalf("a fail answer is not definite: %v", err)
	}
	err = c.Call(ctx, Target{UID: "peer@1", GossipAddr: "peer:1", Addr: addr}, "/other", struct{}{}, nil)
	if err == nil || IsDefiniteFailure(err) {
		t.Fatalf("a plain-text 502 must be an unknown outcome: %v", err)
	}
	// The receiver drops requests from a cut peer: the connection closes.
	serverFilter.Set(Rules{DropIn: []string{"me:1"}})
	if err := c.Call(ctx, Target{UID: "peer@1", GossipAddr: "peer:1", Addr: addr}, "/ok", struct{}{}, nil); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("request from a cut peer: %v, want ErrUnreachable", err)
	}
	serverFilter.Set(Rules{})
	// The sender's own cut waits out the deadline, as a lossy network does.
	clientFilter.Set(Rules{DropOut: []string{"peer:1"}})
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.Call(cctx, Target{UID: "peer@1", GossipAddr: "peer:1", Addr: addr}, "/ok", struct{}{}, nil)
	if !errors.Is(err, ErrUnreachable) || time.Since(start) < 90*time.Millisecond {
		t.Fatalf("cut call: %v after %v, want ErrUnreachable after the deadline", err, time.Since(start))
	}
}

package client

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// A request that got no reply is a failure only when it never left: the
// node is down (connection refused). Once sent, it may have taken effect.
func TestTransportOutcomes(t *testing.T) {
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the client leave.
		io.ReadAll(r.Body)
		<-r.Context().Done()
	}))
	defer hang.Close()
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the request, then drop the connection without a reply.
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer reset.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error": "not ready", "code": "not-ready", "outcome": "fail"}`))
	}))
	defer failing.Close()
	tests := []struct {
		name string
		addr string
		want protocol.Outcome
	}{
		{"connection refused", closed(), protocol.Fail},
		{"no reply before the timeout", hang.Listener.Addr().String(), protocol.Unknown},
		{"connection dropped after the request", reset.Listener.Addr().String(), protocol.Unknown},
		{"the node says fail", failing.Listener.Addr().String(), protocol.Fail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := New(tt.addr, nil).Entity(ctx, protocol.EntityRequest{Type: "register", ID: "a", Op: "read"})
			if got := protocol.OutcomeOf(err); got != tt.want {
				t.Fatalf("outcome %s, want %s (err %v)", got, tt.want, err)
			}
		})
	}
}

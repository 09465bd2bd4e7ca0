package bench

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/internal/testbin"
)

var binary string

func TestMain(m *testing.M) { testbin.Main(m, "shardtest-bench-test", &binary) }

// Route measures each kind of request on a real two-node cluster, and the
// remote reads reach the other node (else the figure would be a local one).
func TestRoute(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := Route(context.Background(), RouteOptions{Binary: binary, BasePort: 21400, Dir: t.TempDir(), Requests: 200, Warmup: 20, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]Latency{"raw": r.Raw, "local": r.Local, "remote": r.Remote, "relay": r.Relay, "framed": r.Framed} {
		if l.N != 200 || l.P50 <= 0 || l.P99 < l.P50 {
			t.Errorf("%s: %+v", name, l)
		}
	}
	// A remote read is a raw round trip and then some: a hop that cost
	// nothing would mean it never left node A.
	if r.Remote.P50 <= r.Raw.P50 {
		t.Errorf("remote p50 %v not above raw p50 %v", r.Remote.P50, r.Raw.P50)
	}
	// Likewise through the relays: one more process on the way.
	if r.Relay.P50 <= r.Raw.P50 {
		t.Errorf("relay p50 %v not above raw p50 %v", r.Relay.P50, r.Raw.P50)
	}
	if r.Framed.P50 <= r.Raw.P50 {
		t.Errorf("framed relay p50 %v not above raw p50 %v", r.Framed.P50, r.Raw.P50)
	}
	// Each node did work for the requests it took part in: CPU is counted
	// in ticks of 10 ms, so 200 requests show at least some, and a
	// request wakes a node at least once.
	if r.CostErr != nil {
		t.Fatalf("cost: %v", r.CostErr)
	}
	for name, c := range map[string]Cost{"raw B": r.RawB, "local A": r.LocalA, "remote A": r.RemoteA, "remote B": r.RemoteB} {
		if c.Switches < 1 || c.CPU < 0 {
			t.Errorf("%s: %+v", name, c)
		}
	}
	if r.RemoteA.CPU+r.RemoteB.CPU == 0 {
		t.Errorf("remote reads cost the nodes no CPU: %+v %+v", r.RemoteA, r.RemoteB)
	}
}

func TestRouteRefusesBadOptions(t *testing.T) {
	_, err := Route(context.Background(), RouteOptions{Binary: binary, BasePort: 21400, Dir: t.TempDir(), Requests: 0})
	if err == nil || !strings.Contains(err.Error(), "--requests") {
		t.Fatalf("err %v", err)
	}
}

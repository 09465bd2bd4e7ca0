package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// RouteOptions shape a routed-request measurement.
type RouteOptions struct {
	// Binary is the shardtest executable that runs the relays and the
	// echo process, and the nodes unless NodeBinary is set (default: this
	// executable).
	Binary string
	// NodeBinary, if set, runs the nodes instead: another build of the
	// reference node measured by this one's bench, e.g. an earlier
	// commit's, for a before-and-after on the same machine.
	NodeBinary string
	// BasePort and Dir as local.Options's.
	BasePort int
	Dir      string
	// Requests of each kind measured, after Warmup of each.
	Requests, Warmup int
	// NodeArgs are extra flags for both nodes.
	NodeArgs []string
	Logger   *slog.Logger
}

// RouteResult holds the latency figures of one measurement.
type RouteResult struct {
	// Raw is a round trip to node B's /v1/health from the client; Local a
	// register read through node A of an entity A hosts; Remote the same
	// through A of an entity B hosts (client → A → B → A → client); Relay
	// a round trip to B's /v1/health through a relay process that does
	// nothing else (client → relay → B → relay → client), over HTTP both
	// ways; Framed the same through a relay that sends one frame to an
	// echo process over a kept-open connection (ServeFramedRelay): what
	// any routing through a second process costs at the least on this
	// machine.
	Raw, Local, Remote, Relay, Framed Latency
	// RawB, LocalA, RemoteA and RemoteB are what one request of each kind
	// costs node A or B (the other node takes no part in raw and local),
	// measured apart after the latencies: Requests of one kind back to back,
	// the nodes' usage read from /proc before and after (CostErr says why
	// not, where there is no /proc).
	RawB, LocalA, RemoteA, RemoteB Cost
	CostErr                        error
}

// Latency summarises one kind of request.
type Latency struct {
	P50, P99 time.Duration
	N        int
}

func summarise(d []time.Duration) Latency {
	s := slices.Clone(d)
	slices.Sort(s)
	return Latency{P50: s[(len(s)-1)/2], P99: s[(len(s)-1)*99/100], N: len(s)}
}

// Route starts a local cluster of two nodes, the two relays and the echo
// process, and measures from one client with kept-alive connections the
// five kinds of request of RouteResult, interleaved (raw, local, remote,
// relay, framed, raw, ...) so that a slow moment of the machine weighs on
// each alike; then what raw, local and remote requests cost the nodes
// (RouteResult.RawB ...). The cluster is stopped before it returns.
func Route(ctx context.Context, o RouteOptions) (RouteResult, error) {
	if o.Requests < 1 || o.Warmup < 0 {
		return RouteResult{}, fmt.Errorf("route: --requests must be at least 1 and --warmup at least 0 (%d, %d)", o.Requests, o.Warmup)
	}
	c, err := local.Start(ctx, local.Options{Binary: cmp.Or(o.NodeBinary, o.Binary), Nodes: 2, BasePort: o.BasePort, Dir: o.Dir, NodeArgs: o.NodeArgs, Logger: o.Logger})
	if err != nil {
		return RouteResult{}, fmt.Errorf("route: %w", err)
	}
	defer c.Stop()
	binary := o.Binary
	if binary == "" {
		if binary, err = os.Executable(); err != nil {
			return RouteResult{}, fmt.Errorf("route: %w", err)
		}
	}
	relayAddr, stopRelay, err := startHelper(ctx, binary, []string{"bench", "relay", "--to", c.Nodes[1].HTTPAddr}, relayReady)
	if err != nil {
		return RouteResult{}, fmt.Errorf("route: %w", err)
	}
	defer stopRelay()
	echoAddr, stopEcho, err := startHelper(ctx, binary, []string{"bench", "echo"}, echoReady)
	if err != nil {
		return RouteResult{}, fmt.Errorf("route: %w", err)
	}
	defer stopEcho()
	framedAddr, stopFramed, err := startHelper(ctx, binary, []string{"bench", "relay", "--framed", "--to", echoAddr}, relayReady)
	if err != nil {
		return RouteResult{}, fmt.Errorf("route: %w", err)
	}
	defer stopFramed()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()
	a, b := client.New(c.Nodes[0].HTTPAddr, hc), client.New(c.Nodes[1].HTTPAddr, hc)
	localID, remoteID, err := findEntities(ctx, a, b)
	if err != nil {
		return RouteResult{}, err
	}
	raw := func() error { _, err := b.Health(ctx); return err }
	read := func(id string) func() error {
		return func() error {
			_, err := a.Entity(ctx, protocol.EntityRequest{Type: "register", ID: id, Op: "read"})
			return err
		}
	}
	relay := client.New(relayAddr, hc)
	viaRelay := func() error { _, err := relay.Health(ctx); return err }
	framed := client.New(framedAddr, hc)
	viaFramed := func() error { _, err := framed.Health(ctx); return err }
	kinds := []func() error{raw, read(localID), read(remoteID), viaRelay, viaFramed}
	lat := make([][]time.Duration, len(kinds))
	for i := range o.Warmup + o.Requests {
		for k, f := range kinds {
			start := time.Now()
			if err := f(); err != nil {
				return RouteResult{}, fmt.Errorf("route: request %d: %w", i, err)
			}
			if i >= o.Warmup {
				lat[k] = append(lat[k], time.Since(start))
			}
		}
	}
	res := RouteResult{Raw: summarise(lat[0]), Local: summarise(lat[1]), Remote: summarise(lat[2]), Relay: summarise(lat[3]), Framed: summarise(lat[4])}
	pa, pb := c.Nodes[0].Pid(), c.Nodes[1].Pid()
	for _, k := range []struct {
		f    func() error
		a, b *Cost
	}{{raw, nil, &res.RawB}, {read(localID), &res.LocalA, nil}, {read(remoteID), &res.RemoteA, &res.RemoteB}} {
		ua, erra := readUsage(pa)
		ub, errb := readUsage(pb)
		if err := errors.Join(erra, errb); err != nil {
			res.CostErr = err
			break
		}
		for i := range o.Requests {
			if err := k.f(); err != nil {
				return RouteResult{}, fmt.Errorf("route: request %d: %w", i, err)
			}
		}
		va, erra := readUsage(pa)
		vb, errb := readUsage(pb)
		if err := errors.Join(erra, errb); err != nil {
			res.CostErr = err
			break
		}
		if k.a != nil {
			*k.a = per(ua, va, o.Requests)
		}
		if k.b != nil {
			*k.b = per(ub, vb, o.Requests)
		}
	}
	return res, nil
}

// findEntities finds a register entity hosted by A's member and one hosted
// by B's, creating them by reading through A.
func findEntities(ctx context.Context, a, b *client.Client) (onA, onB string, err error) {
	sa, err := a.Status(ctx)
	if err != nil {
		return "", "", fmt.Errorf("route: status of A: %w", err)
	}
	sb, err := b.Status(ctx)
	if err != nil {
		return "", "", fmt.Errorf("route: status of B: %w", err)
	}
	for i := 0; i < 1000 && (onA == "" || onB == ""); i++ {
		id := "route" + strconv.Itoa(i)
		rep, err := a.Entity(ctx, protocol.EntityRequest{Type: "register", ID: id, Op: "read"})
		if err != nil {
			return "", "", fmt.Errorf("route: read %s: %w", id, err)
		}
		switch rep.Node {
		case sa.Self.UID:
			onA = cmp.Or(onA, id)
		case sb.Self.UID:
			onB = cmp.Or(onB, id)
		}
	}
	if onA == "" || onB == "" {
		return "", "", errors.New("route: no entity found on each node in 1000 ids")
	}
	return onA, onB, nil
}

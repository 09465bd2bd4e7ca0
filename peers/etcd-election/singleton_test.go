package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/shardtest/shardtest/protocol"
)

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testEtcd starts a one-member etcd in a temporary directory and returns
// a client of it.
func testEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "t"
	cfg.Dir = t.TempDir()
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	client := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(freePort(t))}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = "t=" + peer.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.Logger = "zap"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready in 30 s")
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// win campaigns with a new session and returns the running instance.
func win(t *testing.T, ctx context.Context, cli *clientv3.Client, s *singleton, name string) (*concurrency.Session, *instance) {
	t.Helper()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Orphan() })
	el := concurrency.NewElection(sess, electionName)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := el.Campaign(cctx, name); err != nil {
		t.Fatalf("%s campaign: %v", name, err)
	}
	counter, rev, err := readCounter(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	inst := &instance{id: protocol.SingletonInstance{Node: name, Incarnation: "i", Instance: 1}, key: el.Key(), rev: el.Rev(),
		fenced: make(chan struct{})}
	inst.counter.Store(counter)
	s.start(inst, rev)
	return sess, inst
}

// A leader whose lease is gone but which has not noticed (a thawed
// process) hands out the new leader's ids again when it writes unguarded;
// fenced, its write is refused and nothing is written.
func TestStaleLeaderWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member")
	}
	for _, tt := range []struct {
		fenced bool
		// wantDup: the stale leader's next id is one the new leader
		// already handed out.
		wantDup bool
	}{{fenced: false, wantDup: true}, {fenced: true, wantDup: false}} {
		t.Run(map[bool]string{false: writesUnguarded, true: writesFenced}[tt.fenced], func(t *testing.T) {
			ctx := context.Background()
			cli := testEtcd(t)
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			var events []protocol.Event
			ev := func(e protocol.Event) { events = append(events, e) }
			old := &singleton{cli: cli, fence: tt.fenced, log: log, event: ev}
			oldSess, oldInst := win(t, ctx, cli, old, "old")
			for want := int64(1); want <= 3; want++ {
				r, err := old.next(ctx)
				if err != nil || r.ID != want {
					t.Fatalf("old leader's id %d: %+v, %v", want, r, err)
				}
			}
			// The old leader's lease expires (revoked here, as etcd's
			// lessor does at expiry) while it does not look: it still
			// runs its instance.
			if _, err := cli.Revoke(ctx, oldSess.Lease()); err != nil {
				t.Fatal(err)
			}
			cur := &singleton{cli: cli, fence: tt.fenced, log: log, event: ev}
			_, _ = win(t, ctx, cli, cur, "new")
			r, err := cur.next(ctx)
			if err != nil || r.ID != 4 {
				t.Fatalf("new leader's first id: %+v, %v (want 4)", r, err)
			}
			stale, err := old.next(ctx)
			switch {
			case tt.wantDup && (err != nil || stale.ID != 4):
				t.Fatalf("unguarded stale leader: %+v, %v; want id 4 again", stale, err)
			case !tt.wantDup && !errors.Is(err, errFenced):
				t.Fatalf("fenced stale leader: %+v, %v; want errFenced", stale, err)
			}
			if !tt.wantDup {
				select {
				case <-oldInst.fenced:
				default:
					t.Error("a fenced write did not mark the instance fenced")
				}
				counter, _, err := readCounter(ctx, cli)
				if err != nil || counter != 4 {
					t.Errorf("counter after the refused write: %d, %v; want 4", counter, err)
				}
				if r, err := cur.next(ctx); err != nil || r.ID != 5 {
					t.Errorf("new leader after the refused write: %+v, %v; want 5", r, err)
				}
			}
		})
	}
}

func nopEvent(protocol.Event) {}

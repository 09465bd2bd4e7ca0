package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

// What a forward comes back with: refused before anything ran (the
// secret, no connection) and "no instance here" are definite, so the
// asker may try elsewhere; an id names its instance.
func TestForward(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member")
	}
	ctx := context.Background()
	cli := testEtcd(t)
	s := &singleton{cli: cli, log: slog.New(slog.NewTextHandler(io.Discard, nil)), event: nopEvent}
	srv := httptest.NewServer((&forwarder{secret: "s3cret"}).handler(s))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	f := newForwarder("s3cret")

	if _, err := f.forward(ctx, addr); !errors.Is(err, errNotHere) {
		t.Errorf("no instance running: %v, want errNotHere", err)
	}
	if _, err := newForwarder("wrong").forward(ctx, addr); !errors.Is(err, errNotSent) {
		t.Errorf("wrong secret: %v, want errNotSent", err)
	}
	closed := httptest.NewServer(nil)
	closedAddr := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()
	if _, err := f.forward(ctx, closedAddr); !errors.Is(err, errNotSent) {
		t.Errorf("nothing listening: %v, want errNotSent", err)
	}
	_, inst := win(t, ctx, cli, s, "n1")
	r, err := f.forward(ctx, addr)
	if err != nil || r.ID != 1 || r.Singleton != inst.id {
		t.Errorf("forward to the running instance: %+v, %v; want id 1 from %s", r, err, inst.id)
	}
}

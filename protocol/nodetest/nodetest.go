// Package nodetest holds test helpers that watch nodes through the node
// protocol: poll until a condition holds, and the conditions the runtime
// and nemesis tests share.
package nodetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// Cond reports whether a condition holds, and if not, why not.
type Cond func(ctx context.Context) (bool, string)

// Eventually polls cond until it holds, or fails the test once timeout
// has passed with cond's last reason.
func Eventually(t testing.TB, ctx context.Context, timeout time.Duration, what string, cond Cond) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond(ctx)
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: not after %v: %s", what, timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Status asks the node at addr for its status, giving up after timeout.
func Status(ctx context.Context, addr string, timeout time.Duration) (protocol.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return client.New(addr, nil).Status(ctx)
}

// SeesUnreachable holds when the node at addr has name (any incarnation)
// as a member it cannot reach.
func SeesUnreachable(addr, name string) Cond {
	return func(ctx context.Context) (bool, string) {
		st, err := Status(ctx, addr, 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		for _, u := range st.Unreachable {
			if strings.HasPrefix(u, name+"@") {
				return true, ""
			}
		}
		for _, m := range st.Members {
			if m.Name == name && !m.Reachable {
				return true, ""
			}
		}
		return false, fmt.Sprintf("members %v, unreachable %v", Members(st), st.Unreachable)
	}
}

// SeesAllUp holds when the node at addr is ready and has every named node
// as an up, reachable member.
func SeesAllUp(addr string, names ...string) Cond {
	return func(ctx context.Context) (bool, string) {
		st, err := Status(ctx, addr, 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		if !st.Ready {
			return false, "not ready: " + st.Self.Status
		}
		for _, name := range names {
			ok := false
			for _, m := range st.Members {
				ok = ok || m.Name == name && m.Status == "up" && m.Reachable
			}
			if !ok {
				return false, fmt.Sprintf("%s is not up and reachable: members %v", name, Members(st))
			}
		}
		return true, ""
	}
}

// Members describes a status's members for a failure message.
func Members(st protocol.Status) []string {
	var out []string
	for _, m := range st.Members {
		out = append(out, fmt.Sprintf("%s(%s,reachable=%v)", m.UID, m.Status, m.Reachable))
	}
	return out
}

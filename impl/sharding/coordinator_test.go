package sharding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/shardtest/shardtest/protocol/journal"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/persistence"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
)

// TestCoordinatorFenced: once a newer coordinator has fenced the journal
// id, the old instance's next write fails as ErrInstanceFailed (so its
// manager stops it) and it refuses everything after that.
func TestCoordinatorFenced(t *testing.T) {
	store, err := persistence.Open(filepath.Join(t.TempDir(), "j.db"), persistence.StoreOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	mem := newFakeMembership()
	self := cluster.MemberState{Member: cluster.Member{Name: "n1", Incarnation: "i1", UpNumber: 1}, Status: cluster.StatusUp, Reachable: true}
	other := cluster.MemberState{Member: cluster.Member{Name: "n2", Incarnation: "i1", UpNumber: 2}, Status: cluster.StatusUp, Reachable: true}
	mem.Set(cluster.Snapshot{Self: self, Members: []cluster.MemberState{self, other}})
	s := testSettings()
	d := Deps{Membership: mem, Peers: peer.NewClient(peer.Self{UID: "gossip-n1@1", GossipAddr: "gossip-n1"}, nil), Clock: clock.Real(), Journal: store}
	factory := CoordinatorFactory(s, d, nil)
	ctx := context.Background()
	old, err := factory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Stop(ctx)
	call := func(inst singleton.Instance, op string, v any) (json.RawMessage, error) {
		b, _ := json.Marshal(v)
		return inst.Handle(ctx, singleton.Request{Op: op, Payload: b})
	}
	if _, err := call(old, OpRegister, RegisterRequest{Region: self.UID()}); err != nil {
		t.Fatal(err)
	}
	// A new coordinator takes over and recovers the registration.
	cur, err := factory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Stop(ctx)
	res, err := call(cur, OpState, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st CoordinatorState
	if err := json.Unmarshal(res, &st); err != nil || len(st.Regions) != 1 {
		t.Fatalf("recovered state %s (%v)", res, err)
	}
	_, err = call(old, OpRegister, RegisterRequest{Region: other.UID()})
	if !errors.Is(err, singleton.ErrInstanceFailed) || !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("stale write: err = %v, want ErrInstanceFailed wrapping ErrFenced", err)
	}
	_, err = call(old, OpState, nil)
	if !errors.Is(err, singleton.ErrInstanceFailed) || !singleton.IsDefinite(err) {
		t.Fatalf("stale instance after failure: err = %v, want definite ErrInstanceFailed", err)
	}
	if _, err := call(cur, OpRegister, RegisterRequest{Region: other.UID()}); err != nil {
		t.Fatalf("current coordinator: %v", err)
	}
	// Bad requests are definite and harmless.
	for _, req := range []singleton.Request{
		{Op: OpRegister}, {Op: OpRegister, Payload: json.RawMessage(`{"region":""}`)},
		{Op: OpGetShardHome, Payload: json.RawMessage(`{"shard":""}`)}, {Op: "nope"},
		{Op: OpGracefulShutdown, Payload: json.RawMessage(`[`)},
	} {
		if _, err := cur.Handle(ctx, req); !errors.Is(err, singleton.ErrBadRequest) {
			t.Errorf("%s %s: err = %v, want ErrBadRequest", req.Op, req.Payload, err)
		}
	}
	// Unknown members may not register yet.
	if _, err := call(cur, OpRegister, RegisterRequest{Region: "stranger@x"}); err == nil || !singleton.IsDefinite(err) {
		t.Fatalf("unknown member registered: %v", err)
	}
}

func TestIsDefinite(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{ErrBufferFull, true},
		{fmt.Errorf("x: %w", ErrNotDelivered), true},
		{ErrShardNotHere, true},
		{ErrBadMessage, true},
		{ErrRegionStopped, true},
		{fmt.Errorf("%w: %w", ErrUnknownOutcome, ErrShardNotHere), false},
		{&EntityError{Entity: "e", Err: ErrBufferFull}, false},
		{&peer.RemoteError{Status: 503, Body: protocol.ErrorBody{Code: "x", Outcome: protocol.Fail}}, true},
		{&peer.RemoteError{Status: 500, Body: protocol.ErrorBody{Code: "x", Outcome: protocol.Unknown}}, false},
		{singleton.ErrDropped, true},
		{errors.New("mystery"), false},
	}
	for _, tt := range tests {
		if got := IsDefinite(tt.err); got != tt.want {
			t.Errorf("IsDefinite(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestCoordinatorName(t *testing.T) {
	for in, want := range map[string]string{
		"counter":  "shard-coordinator-counter",
		"Big_Type": "shard-coordinator-big-type",
	} {
		if got := CoordinatorName(in); got != want {
			t.Errorf("CoordinatorName(%q) = %q, want %q", in, got, want)
		}
	}
	if got := CoordinatorName(string(make([]byte, 100))); len(got) != 64 {
		t.Errorf("long name has %d characters", len(got))
	}
}

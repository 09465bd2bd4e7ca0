package run

import (
	"testing"

	"github.com/shardtest/shardtest/protocol"
)

// ViewConverged is the one judge of a node's view having converged: the
// recovery wait and bench cluster both ask it.
func TestViewConverged(t *testing.T) {
	up := func(names ...string) []protocol.Member {
		var ms []protocol.Member
		for _, n := range names {
			ms = append(ms, protocol.Member{Name: n, UID: n + "@1", Status: protocol.StatusUp, Reachable: true})
		}
		return ms
	}
	leaving := up("n1", "n2")
	leaving[1].Status = protocol.StatusLeaving
	names := []string{"n1", "n2"}
	for _, tt := range []struct {
		name string
		st   protocol.Status
		want string
	}{
		{"converged", protocol.Status{Ready: true, Members: up("n1", "n2")}, ""},
		{"a third member is no obstacle", protocol.Status{Ready: true, Members: up("n1", "n2", "n3")}, ""},
		{"not ready", protocol.Status{Self: protocol.Member{Status: protocol.StatusJoining}, Members: up("n1", "n2")}, "is not ready (joining)"},
		{"unreachable", protocol.Status{Ready: true, Members: up("n1", "n2"), Unreachable: []string{"n2@1"}}, "cannot reach [n2@1]"},
		{"missing", protocol.Status{Ready: true, Members: up("n1")}, "does not count n2 as up"},
		{"leaving is not up", protocol.Status{Ready: true, Members: leaving}, "does not count n2 as up"},
	} {
		if got := ViewConverged(tt.st, names); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

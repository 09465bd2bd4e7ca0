// Package clustertest has test doubles for code that runs on a cluster
// member: a Membership whose view the test sets, and a polling helper.
package clustertest

import (
	"sync"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
)

// Membership is a cluster.Membership whose view the test sets.
type Membership struct {
	mu   sync.Mutex
	snap cluster.Snapshot
	ch   chan struct{}
}

// NewMembership returns a Membership with an empty view.
func NewMembership() *Membership { return &Membership{ch: make(chan struct{})} }

// Snapshot implements cluster.Membership.
func (f *Membership) Snapshot() cluster.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snap
}

// Find implements cluster.Membership.
func (f *Membership) Find(uid string) (cluster.MemberState, bool) { return f.Snapshot().Find(uid) }

// Changed implements cluster.Membership.
func (f *Membership) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch
}

// Set replaces the view (bumping its version) and wakes Changed waiters.
func (f *Membership) Set(s cluster.Snapshot) {
	f.mu.Lock()
	s.Version = f.snap.Version + 1
	f.snap = s
	close(f.ch)
	f.ch = make(chan struct{})
	f.mu.Unlock()
}

// Eventually polls cond until it holds, failing t after timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	machine := clock.Machine{}
	deadline := machine.Now().Add(timeout)
	for !cond() {
		if machine.Now().After(deadline) {
			t.Fatalf("timed out after %v: "+format, append([]any{timeout}, args...)...)
		}
		<-machine.NewTimer(5 * time.Millisecond).C()
	}
}

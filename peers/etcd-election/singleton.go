package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardtest/shardtest/protocol"
)

// The id generator's keys in etcd.
const (
	// electionName is the election's prefix as concurrency.NewElection
	// takes it; its keys are electionName/<lease id>.
	electionName = "/shardtest/id-generator/election"
	// electionPrefix is what every key of the election starts with.
	electionPrefix = electionName + "/"
	// counterKey holds the last id handed out (decimal).
	counterKey = "/shardtest/id-generator/counter"
)

// instance is one run of the id generator on this member: from a won
// election to the end of its session (or a fenced write).
type instance struct {
	id protocol.SingletonInstance
	// key and rev are the leader key and its create revision (what a
	// fenced write compares).
	key string
	rev int64
	// counter is the last id this instance handed out (or spent);
	// written under singleton.mu, read by stop's log.
	counter atomic.Int64
	// fenced is closed when a fenced write found the leader key gone.
	fenced     chan struct{}
	fencedOnce sync.Once
}

// errNotHere: no instance runs here (any more); nothing was written.
var errNotHere = errors.New("the id generator does not run on this member")

// errFenced: the instance's leader key is gone; nothing was written.
var errFenced = errors.New("fenced: the leader key this instance won with is gone")

// singleton is the id generator on this member: at most one instance at
// a time, serving next-id one request after another under mu, each
// checking right before its write that the instance still runs. With
// stepDownWaits, stepping down takes mu too (the common way: one lock
// over the generator's state), so it comes after the requests already
// waiting for mu; without, it clears cur at once.
type singleton struct {
	cli           *clientv3.Client
	fence         bool
	stepDownWaits bool
	log           *slog.Logger
	event         func(protocol.Event)
	starts        int64 // instances started in this incarnation (live's goroutine only)

	// cur is the running instance (nil: none).
	cur atomic.Pointer[instance]
	// mu serializes next-id (each a write to etcd) and guards lastWrite,
	// when the last id was written (for the log: a write after a long
	// gap is logged, such as the first after a pause).
	mu        sync.Mutex
	lastWrite time.Time
}

// logGap is the gap between two writes after which the second is logged.
const logGap = time.Second

// readCounter reads the counter: 0 if it was never written.
func readCounter(ctx context.Context, cli *clientv3.Client) (int64, int64, error) {
	resp, err := cli.Get(ctx, counterKey)
	if err != nil {
		return 0, 0, fmt.Errorf("read the counter: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, resp.Header.Revision, nil
	}
	n, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("the counter %s holds %q: %w", counterKey, resp.Kvs[0].Value, err)
	}
	return n, resp.Header.Revision, nil
}

// start makes inst the running instance (the election was won and the
// counter read).
func (s *singleton) start(inst *instance, readRev int64) {
	s.mu.Lock()
	s.lastWrite = time.Time{}
	s.mu.Unlock()
	s.cur.Store(inst)
	s.event(protocol.Event{Type: protocol.EventSingletonStarted, Singleton: protocol.IDGenerator,
		Detail: fmt.Sprintf("instance %s won the election with key %s (create revision %d); counter %d read at revision %d", inst.id, inst.key, inst.rev, inst.counter.Load(), readRev)})
	s.log.Info("won the election: the id generator runs here", "instance", inst.id.String(), "leader_key", inst.key,
		"leader_rev", inst.rev, "counter", inst.counter.Load(), "counter_read_rev", readRev, "fenced_writes", s.fence)
}

// stop ends inst (if it still runs), saying why.
func (s *singleton) stop(inst *instance, failed bool, why string) {
	if s.stepDownWaits {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	if !s.cur.CompareAndSwap(inst, nil) {
		return
	}
	typ := protocol.EventSingletonStopped
	if failed {
		typ = protocol.EventSingletonFailed
	}
	s.event(protocol.Event{Type: typ, Singleton: protocol.IDGenerator, Detail: fmt.Sprintf("instance %s: %s", inst.id, why)})
	s.log.Info("the id generator stopped here", "instance", inst.id.String(), "why", why, "last_id", inst.counter.Load())
}

// running is the instance running here, if any.
func (s *singleton) running() (protocol.SingletonInstance, bool) {
	inst := s.cur.Load()
	if inst == nil {
		return protocol.SingletonInstance{}, false
	}
	return inst.id, true
}

// next hands out the next id: the counter plus one, written to etcd
// before the reply. Unguarded, a plain Put; fenced, a transaction that
// writes only while the leader key still has the create revision this
// instance won with. An id whose write has an unknown outcome is spent
// (never handed out again by this instance). errNotHere and errFenced
// mean nothing was written.
func (s *singleton) next(ctx context.Context) (protocol.NextID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.cur.Load()
	if inst == nil {
		return protocol.NextID{}, errNotHere
	}
	n := inst.counter.Add(1)
	val := strconv.FormatInt(n, 10)
	var rev int64
	if s.fence {
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(inst.key), "=", inst.rev)).
			Then(clientv3.OpPut(counterKey, val)).
			Commit()
		if err != nil {
			return protocol.NextID{}, fmt.Errorf("write id %d: %w", n, err)
		}
		if !resp.Succeeded {
			s.log.Warn("fenced: the leader key is gone, the counter was not written", "instance", inst.id.String(), "id", n,
				"leader_key", inst.key, "leader_rev", inst.rev, "revision", resp.Header.Revision)
			inst.fencedOnce.Do(func() { close(inst.fenced) })
			return protocol.NextID{}, errFenced
		}
		rev = resp.Header.Revision
	} else {
		resp, err := s.cli.Put(ctx, counterKey, val)
		if err != nil {
			return protocol.NextID{}, fmt.Errorf("write id %d: %w", n, err)
		}
		rev = resp.Header.Revision
	}
	now := time.Now()
	if !s.lastWrite.IsZero() && now.Sub(s.lastWrite) > logGap {
		s.log.Info("wrote an id after a gap", "instance", inst.id.String(), "id", n, "revision", rev, "gap", now.Sub(s.lastWrite).Round(time.Millisecond).String())
	} else if s.lastWrite.IsZero() {
		s.log.Info("wrote the instance's first id", "instance", inst.id.String(), "id", n, "revision", rev)
	}
	s.lastWrite = now
	return protocol.NextID{ID: n, Singleton: inst.id}, nil
}

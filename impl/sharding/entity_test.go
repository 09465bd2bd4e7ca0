package sharding

import (
	"context"
	"errors"
	"testing"
	"time"
)

// parkedEntity starts a one-node cluster and entity id on it, and waits
// until the entity has parked (no goroutine serves it).
func parkedEntity(t *testing.T, id string) *scluster {
	t.Helper()
	c := newShardCluster(t, 1, testSettings())
	c.setAll(allUp("n1"))
	c.start("n1")
	c.awaitRegistered("n1")
	if _, err := c.deliver("n1", id, "s", 0); err != nil {
		t.Fatal(err)
	}
	r := c.node("n1").region
	eventually(t, 5*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		sh := r.local[r.extract(id)]
		if sh == nil {
			return false
		}
		return sh.st.Parked(id)
	}, "entity %s never parked", id)
	return c
}

func (c *scluster) handledSeqs(id string) []int {
	var seqs []int
	for _, h := range c.entities.of(id) {
		seqs = append(seqs, h.Seq)
	}
	return seqs
}

// A caller that finds its entity parked serves the entity's mailbox
// itself, but only up to its own message: a message queued behind it is
// served by the entity's own goroutine, and the caller has its reply
// while that message is still being handled.
func TestCallerServesItsParkedEntityOnlyUpToItsOwnMessage(t *testing.T) {
	c := parkedEntity(t, "e")
	r := c.node("n1").region
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	own := make(chan error, 1)
	go func() {
		_, err := r.Deliver(ctx, Message{EntityID: "e", Op: "block", Payload: mustJSON(t, payload{Seq: 1})})
		own <- err
	}()
	eventually(t, 5*time.Second, func() bool { return len(c.handledSeqs("e")) == 2 }, "message 1 never reached the entity")
	behind := r.Submit(ctx, Message{EntityID: "e", Op: "block", Payload: mustJSON(t, payload{Seq: 2})})

	close(c.entities.gate(1))
	select {
	case err := <-own:
		if err != nil {
			t.Fatalf("message 1: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller of message 1 has no reply while message 2, queued behind it, is blocked: it served another caller's message")
	}
	eventually(t, 5*time.Second, func() bool { return len(c.handledSeqs("e")) == 3 }, "message 2 was never handled after message 1")
	close(c.entities.gate(2))
	if _, err := behind(); err != nil {
		t.Fatalf("message 2: %v", err)
	}
	if got := c.handledSeqs("e"); len(got) != 3 || got[1] != 1 || got[2] != 2 {
		t.Fatalf("handled %v, want [0 1 2]", got)
	}
	// The entity parked again and a caller can take its turn once more.
	if _, err := c.deliver("n1", "e", "s", 3); err != nil {
		t.Fatal(err)
	}
}

// A caller that has given up before its message's turn does not have it
// handled: the failure is definite, as for a message given up while it
// waited in a mailbox, and the entity goes on serving.
func TestGivenUpCallerLeavesItsMessageUnhandled(t *testing.T) {
	c := parkedEntity(t, "e")
	r := c.node("n1").region
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := r.Deliver(ctx, Message{EntityID: "e", Op: "count", Payload: mustJSON(t, payload{Seq: 1})})
	if !errors.Is(err, ErrNotDelivered) || !IsDefinite(err) {
		t.Fatalf("a message whose caller gave up: %v, want a definite ErrNotDelivered", err)
	}
	if got := c.handledSeqs("e"); len(got) != 1 {
		t.Fatalf("handled %v, want only the first message", got)
	}
	if _, err := c.deliver("n1", "e", "s", 2); err != nil {
		t.Fatalf("the entity after a given-up message: %v", err)
	}
}

// An idle entity holds no context: the one its factory got has ended once
// it started. (A context kept for the incarnation's life cost an idle
// entity about 360 bytes on a node with a remote journal: every timeout
// derived from it left it a children map and a Done channel.)
func TestIdleEntityHoldsNoContext(t *testing.T) {
	c := parkedEntity(t, "e")
	c.entities.mu.Lock()
	ctx := c.entities.startCtx["e"]
	c.entities.mu.Unlock()
	if ctx == nil {
		t.Fatal("the factory was never called")
	}
	if ctx.Err() == nil {
		t.Fatal("the factory's context is still live while its entity idles")
	}
}

// entityRun's contexts: each start or stop gets one that ends when it
// returns, or before that when the shard gives up on the incarnation; once
// given up, an action's context is born ended.
func TestEntityRunContexts(t *testing.T) {
	for _, tc := range []struct {
		name string
		// giveUp before begin, during the action, or never.
		giveUpBefore, giveUpDuring bool
		wantLiveDuring             bool
	}{
		{name: "runs until it returns", wantLiveDuring: true},
		{name: "given up while it runs", giveUpDuring: true},
		{name: "given up before it begins", giveUpBefore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := &entityRun{}
			if tc.giveUpBefore {
				run.giveUp()
			}
			ctx, end := run.begin(context.Background())
			if tc.giveUpDuring {
				run.giveUp()
			}
			if live := ctx.Err() == nil; live != tc.wantLiveDuring {
				t.Fatalf("during the action: live %v, want %v", live, tc.wantLiveDuring)
			}
			end()
			if ctx.Err() == nil {
				t.Fatal("the action's context outlives the action")
			}
			run.giveUp() // after the action: nothing in flight to end
		})
	}
}

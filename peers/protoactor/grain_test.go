package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"
)

// fakeJournal is an in-memory journal server: append and replay, and a
// switch that stores an append but answers 503 (an unknown outcome).
type fakeJournal struct {
	mu         sync.Mutex
	events     map[string][][]byte
	lostAnswer bool
}

func (f *fakeJournal) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, _ := io.ReadAll(r.Body)
	reply := func(status int, v any) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	switch r.URL.Path {
	case journal.PathAppend:
		var req journal.AppendRequest
		json.Unmarshal(body, &req)
		if *req.ExpectedSeq != int64(len(f.events[req.PID])) {
			reply(http.StatusConflict, protocol.ErrorBody{Error: "conflict", Code: protocol.CodeSeqConflict, Outcome: protocol.Fail})
			return
		}
		f.events[req.PID] = append(f.events[req.PID], req.Events...)
		if f.lostAnswer {
			reply(http.StatusServiceUnavailable, protocol.ErrorBody{Error: "timed out", Code: protocol.CodeUnavailable, Outcome: protocol.Unknown})
			return
		}
		reply(http.StatusOK, journal.AppendReply{LastSeq: int64(len(f.events[req.PID]))})
	case journal.PathReplay:
		var req journal.ReplayRequest
		json.Unmarshal(body, &req)
		out := []journal.Event{}
		for i, d := range f.events[req.PID] {
			if seq := int64(i + 1); seq >= req.From {
				out = append(out, journal.Event{PersistenceID: req.PID, Seq: seq, Data: d})
			}
		}
		reply(http.StatusOK, journal.ReplayReply{Events: out})
	default:
		reply(http.StatusNotFound, protocol.ErrorBody{Code: protocol.CodeNotFound, Outcome: protocol.Fail})
	}
}

// testGrain is a started activation of register id on the fake journal.
func testGrain(t *testing.T, j *journal.Client, id, inc string) *grain {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	deps := &grainDeps{ctx: ctx, journal: j, acts: newActivations("n1@x", kit.NewEventLog(nil, 0)), node: "n1@x", log: slog.New(slog.DiscardHandler)}
	g := &grain{deps: deps, id: id, inc: inc, ctx: ctx, cancel: cancel}
	if err := g.sync(); err != nil {
		t.Fatal(err)
	}
	return g
}

func ask(t *testing.T, g *grain, req, op, payload string) (string, error) {
	t.Helper()
	res, err := g.serve(grainRequest{Request: req, Op: op, Payload: json.RawMessage(payload)})
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(res)
	return string(b), nil
}

func code(err error) string {
	var ke *kit.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return "plain error: " + err.Error()
}

func TestTwoActivationsConflictInsteadOfLosingWrites(t *testing.T) {
	fj := &fakeJournal{events: map[string][][]byte{}}
	srv := httptest.NewServer(fj)
	defer srv.Close()
	j := journal.NewClient(srv.URL, journal.ClientOptions{Retries: -1})

	a := testGrain(t, j, "k", "a")
	b := testGrain(t, j, "k", "b")
	if got, err := ask(t, a, "r1", "write", `{"value":1}`); err != nil || got != `{"value":1}` {
		t.Fatalf("write on a: %s %v", got, err)
	}
	// b has not seen a's write: its read is stale (what the linearizability
	// checker catches), and its append conflicts: a definite failure.
	if got, _ := ask(t, b, "r2", "read", ""); got != `{"value":null}` {
		t.Fatalf("read on b: %s", got)
	}
	if _, err := ask(t, b, "r3", "cas", `{"expect":null,"value":2}`); code(err) != protocol.CodeEntityStale {
		t.Fatalf("cas on b: %v, want entity-stale", err)
	}
	// After the conflict b has re-read: it sees a's write.
	if got, err := ask(t, b, "r4", "cas", `{"expect":1,"value":2}`); err != nil || got != `{"ok":true,"value":2}` {
		t.Fatalf("cas on b after the conflict: %s %v", got, err)
	}
	// A retry of a request that took effect elsewhere is answered with
	// its effect once the state has caught up: a conflicts, re-reads, and
	// then knows r4.
	if _, err := ask(t, a, "r5", "write", `{"value":3}`); code(err) != protocol.CodeEntityStale {
		t.Fatalf("write on a: %v, want entity-stale", err)
	}
	if got, err := ask(t, a, "r4", "cas", `{"expect":1,"value":2}`); err != nil || got != `{"ok":true,"value":2}` {
		t.Fatalf("retried cas on a: %s %v", got, err)
	}
	if n := len(fj.events["register/k"]); n != 2 {
		t.Fatalf("%d events stored, want 2", n)
	}
}

func TestAnAppendOfUnknownOutcomeIsUnknownAndReRead(t *testing.T) {
	fj := &fakeJournal{events: map[string][][]byte{}, lostAnswer: true}
	srv := httptest.NewServer(fj)
	defer srv.Close()
	j := journal.NewClient(srv.URL, journal.ClientOptions{Retries: -1})
	g := testGrain(t, j, "k", "a")
	if _, err := ask(t, g, "r1", "write", `{"value":1}`); code(err) != protocol.CodeUnknownOutcome {
		t.Fatalf("write with a lost answer: %v, want unknown-outcome", err)
	}
	if !g.dirty {
		t.Fatal("the grain does not know it must re-read")
	}
	fj.lostAnswer = false
	// The write was stored: the grain re-reads before acting again.
	if got, err := ask(t, g, "r2", "read", ""); err != nil || got != `{"value":1}` {
		t.Fatalf("read after the unknown write: %s %v", got, err)
	}
	if got, err := ask(t, g, "r3", "write", `{"value":2}`); err != nil || got != `{"value":2}` {
		t.Fatalf("write after re-reading: %s %v", got, err)
	}
}

func TestAGrainWithoutItsJournalFailsDefinitely(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deps := &grainDeps{ctx: ctx, journal: journal.NewClient(url, journal.ClientOptions{Retries: -1}), log: slog.New(slog.DiscardHandler)}
	g := &grain{deps: deps, id: "k", inc: "a", ctx: ctx, cancel: cancel}
	if _, err := ask(t, g, "r1", "write", `{"value":1}`); code(err) != protocol.CodeJournalUnavailable {
		t.Fatalf("write with no journal: %v, want journal-unavailable", err)
	}
	if _, err := ask(t, g, "r2", "write", `{"value":"x"}`); code(err) != protocol.CodeBadRequest {
		t.Fatalf("malformed write: %v, want bad-request", err)
	}
}

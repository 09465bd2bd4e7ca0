package persistence

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"

	bolt "go.etcd.io/bbolt"
)

// FuzzServerRequests throws arbitrary bodies at every endpoint. Whatever
// arrives, the server must answer (no panic) with JSON, never a 5xx, refuse
// with outcome "fail" and write nothing, or succeed exactly as asked; and
// the journal must stay gapless.
func FuzzServerRequests(f *testing.F) {
	fuzzPaths := []string{journal.PathAppend, journal.PathReplay, journal.PathFence, journal.PathHighest, journal.PathHealth, "/v1/nope"}
	fuzzMethods := []string{http.MethodPost, http.MethodGet, http.MethodPut}
	seeds := []struct {
		path, method uint8
		body         string
	}{
		{0, 0, `{"pid":"p","expected_seq":0,"events":["eA=="]}`},
		{0, 0, `{"pid":"p","expected_seq":1,"epoch":1,"events":["eA==","","eQ=="]}`},
		{0, 0, `{"pid":"q","expected_seq":-1,"events":[null]}`},
		{0, 0, `{"pid":"p","expected_seq":-2,"events":["eA=="]}`},
		{0, 0, `{"pid":"p","expected_seq":0,"events":["eA=="],"x":1}`},
		{0, 0, `{"pid":"","expected_seq":0,"events":["eA=="]}`},
		{0, 0, `{"pid":"p","expected_seq":0,"events":["eA=="]}{}`},
		{1, 0, `{"pid":"p","from":1,"max":0}`},
		{1, 0, `{"pid":"p","from":-9,"max":-1}`},
		{2, 0, `{"pid":"p"}`},
		{3, 0, `{"pid":"p"}`},
		{4, 1, ``},
		{4, 0, `{}`},
		{5, 0, `{}`},
		{0, 1, `{"pid":"p"}`},
		{0, 0, `{"pid":"\ud800","expected_seq":0,"events":["eA=="]}`},
		{0, 0, "\xff\xfe"},
		{2, 2, `[`},
	}
	for _, s := range seeds {
		f.Add(s.path, s.method, []byte(s.body))
	}

	store, err := Open(f.TempDir()+"/journal.db", StoreOptions{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = store.Close() })
	handler := NewServer(store, slog.New(slog.DiscardHandler))
	// Local to this fuzz run: how many inputs since the last full check.
	sinceFullCheck := 0

	f.Fuzz(func(t *testing.T, pathIdx, methodIdx uint8, body []byte) {
		path := fuzzPaths[int(pathIdx)%len(fuzzPaths)]
		method := fuzzMethods[int(methodIdx)%len(fuzzMethods)]
		globalBefore := globalCounter(t, store)

		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)

		if rec.Code >= 500 {
			t.Fatalf("%s %s %q: status %d: %s", method, path, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s %s %q: response is not JSON: %q", method, path, body, rec.Body)
		}
		written := globalCounter(t, store) - globalBefore
		if rec.Code != http.StatusOK {
			var e protocol.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || e.Error == "" || e.Outcome != protocol.Fail {
				t.Fatalf("%s %s %q: bad error response %d %q", method, path, body, rec.Code, rec.Body)
			}
			if written != 0 {
				t.Fatalf("%s %s %q: refused with %d but wrote %d events", method, path, body, rec.Code, written)
			}
		} else if path == journal.PathAppend {
			checkFuzzAppend(t, store, body, rec.Body.Bytes(), written)
		} else if written != 0 {
			t.Fatalf("%s %s %q wrote %d events", method, path, body, written)
		}

		if sinceFullCheck++; sinceFullCheck >= 200 {
			sinceFullCheck = 0
			checkConsistent(t, store)
		}
	})
}

// checkFuzzAppend checks a successful append wrote exactly the events of
// the request, at the sequence numbers it reported.
func checkFuzzAppend(t *testing.T, store *Store, reqBody, respBody []byte, written uint64) {
	t.Helper()
	var req journal.AppendRequest
	var resp journal.AppendReply
	if err := json.Unmarshal(reqBody, &req); err != nil {
		t.Fatalf("append %q succeeded but does not decode: %v", reqBody, err)
	}
	if err := json.Unmarshal(respBody, &resp); err != nil {
		t.Fatalf("append response %q: %v", respBody, err)
	}
	if written != uint64(len(req.Events)) {
		t.Fatalf("append of %d events wrote %d", len(req.Events), written)
	}
	first := resp.LastSeq - int64(len(req.Events)) + 1
	if req.ExpectedSeq != nil && *req.ExpectedSeq != journal.AnySeq && first != *req.ExpectedSeq+1 {
		t.Fatalf("append after %d landed at %d", *req.ExpectedSeq, first)
	}
	evs, err := store.Replay(context.Background(), req.PID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(evs)) != resp.LastSeq {
		t.Fatalf("pid %q holds %d events, last seq reported %d", req.PID, len(evs), resp.LastSeq)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("pid %q: gap at %d (seq %d)", req.PID, i+1, ev.Seq)
		}
	}
	for i, d := range req.Events {
		if got := evs[first-1+int64(i)]; !bytes.Equal(got.Data, d) || got.Epoch != req.Epoch {
			t.Fatalf("pid %q seq %d = %+v, want data %q epoch %d", req.PID, got.Seq, got, d, req.Epoch)
		}
	}
}

// globalCounter reads the journal-wide commit counter: it moves iff
// events were written.
func globalCounter(t *testing.T, s *Store) uint64 {
	t.Helper()
	var g uint64
	if err := s.db.View(func(tx *bolt.Tx) error {
		g = getUint64(tx.Bucket(bucketMeta), keyGlobal)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return g
}

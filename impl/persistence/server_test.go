package persistence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
)

// repeatReader yields n copies of one byte without allocating them.
type repeatReader struct {
	b byte
	n int64
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	for i := range p {
		p[i] = r.b
	}
	r.n -= int64(len(p))
	return len(p), nil
}

// doRaw sends a raw request and decodes the JSON answer.
func doRaw(t *testing.T, url, method, path string, body io.Reader) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: status %d, body is not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

func TestServerBadRequests(t *testing.T) {
	s, _ := openTestStore(t, true)
	_, srv := serveStore(t, s)
	// A pid with one event, fenced twice so epoch 1 is stale: conflicts
	// and fencing then have something to hit.
	mustAppend(t, s, "p", 0, journal.NoEpoch, []byte("x"))
	for range 2 {
		if _, _, err := s.Fence(context.Background(), "p"); err != nil {
			t.Fatal(err)
		}
	}

	huge := io.MultiReader(
		strings.NewReader(`{"pid":"p","expected_seq":1,"events":["`),
		&repeatReader{b: 'A', n: journal.MaxRequestBytes + 1},
		strings.NewReader(`"]}`),
	)
	tests := []struct {
		name       string
		method     string
		path       string
		body       io.Reader
		wantStatus int
		wantCode   string
	}{
		{"unknown path", "POST", "/v1/nope", strings.NewReader(`{}`), 404, protocol.CodeNotFound},
		{"root", "GET", "/", nil, 404, protocol.CodeNotFound},
		{"GET append", "GET", "/v1/append", nil, 405, protocol.CodeMethodNotAllowed},
		{"PUT replay", "PUT", "/v1/replay", strings.NewReader(`{"pid":"p"}`), 405, protocol.CodeMethodNotAllowed},
		{"POST health", "POST", "/v1/health", strings.NewReader(`{}`), 405, protocol.CodeMethodNotAllowed},
		{"DELETE fence", "DELETE", "/v1/fence", nil, 405, protocol.CodeMethodNotAllowed},
		{"malformed append", "POST", "/v1/append", strings.NewReader(`{"pid":`), 400, protocol.CodeInvalid},
		{"malformed replay", "POST", "/v1/replay", strings.NewReader(`[1,2`), 400, protocol.CodeInvalid},
		{"malformed fence", "POST", "/v1/fence", strings.NewReader(`nope`), 400, protocol.CodeInvalid},
		{"malformed highest", "POST", "/v1/highest", strings.NewReader(`{"pid":1}`), 400, protocol.CodeInvalid},
		{"empty body", "POST", "/v1/append", strings.NewReader(``), 400, protocol.CodeInvalid},
		{"null body", "POST", "/v1/append", strings.NewReader(`null`), 400, protocol.CodeInvalid},
		// Invalid UTF-8 in a pid was replaced by U+FFFD: distinct pids
		// collided.
		{"invalid UTF-8 pid", "POST", "/v1/append", strings.NewReader("{\"pid\":\"p\xff\",\"expected_seq\":0,\"events\":[\"eA==\"]}"), 400, protocol.CodeInvalid},
		// So was a lone surrogate escape: "p\ud800", "p\udfff" and
		// "p\ufffd" appended to one stream.
		{"lone high surrogate pid", "POST", "/v1/append", strings.NewReader(`{"pid":"p\ud800","expected_seq":0,"events":["eA=="]}`), 400, protocol.CodeInvalid},
		{"lone low surrogate pid", "POST", "/v1/append", strings.NewReader(`{"pid":"p\udfff","expected_seq":0,"events":["eA=="]}`), 400, protocol.CodeInvalid},
		{"lone surrogate fence", "POST", "/v1/fence", strings.NewReader(`{"pid":"p\udbff"}`), 400, protocol.CodeInvalid},
		{"trailing data", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":1,"events":["eA=="]} {}`), 400, protocol.CodeInvalid},
		{"unknown field append", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":1,"events":["eA=="],"force":true}`), 400, protocol.CodeInvalid},
		{"unknown field replay", "POST", "/v1/replay", strings.NewReader(`{"pid":"p","limit":3}`), 400, protocol.CodeInvalid},
		{"unknown field fence", "POST", "/v1/fence", strings.NewReader(`{"pid":"p","epoch":9}`), 400, protocol.CodeInvalid},
		{"unknown field highest", "POST", "/v1/highest", strings.NewReader(`{"id":"p"}`), 400, protocol.CodeInvalid},
		{"empty pid append", "POST", "/v1/append", strings.NewReader(`{"pid":"","expected_seq":0,"events":["eA=="]}`), 400, protocol.CodeInvalid},
		{"empty pid replay", "POST", "/v1/replay", strings.NewReader(`{"pid":""}`), 400, protocol.CodeInvalid},
		{"empty pid fence", "POST", "/v1/fence", strings.NewReader(`{}`), 400, protocol.CodeInvalid},
		{"bad fence token", "POST", "/v1/fence", strings.NewReader(`{"pid":"p","token":"a b"}`), 400, protocol.CodeInvalid},
		{"long fence token", "POST", "/v1/fence", strings.NewReader(`{"pid":"p","token":"` + strings.Repeat("a", 65) + `"}`), 400, protocol.CodeInvalid},
		{"empty pid highest", "POST", "/v1/highest", strings.NewReader(`{"pid":""}`), 400, protocol.CodeInvalid},
		{"missing expected_seq", "POST", "/v1/append", strings.NewReader(`{"pid":"p","events":["eA=="]}`), 400, protocol.CodeInvalid},
		{"expected_seq -2", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":-2,"events":["eA=="]}`), 400, protocol.CodeInvalid},
		{"expected_seq overflow", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":1e30,"events":["eA=="]}`), 400, protocol.CodeInvalid},
		{"expected_seq fraction", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":0.5,"events":["eA=="]}`), 400, protocol.CodeInvalid},
		{"negative epoch", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":1,"epoch":-1,"events":["eA=="]}`), 400, protocol.CodeInvalid},
		{"no events", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":1,"events":[]}`), 400, protocol.CodeInvalid},
		{"bad base64", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":1,"events":["!!"]}`), 400, protocol.CodeInvalid},
		{"negative max", "POST", "/v1/replay", strings.NewReader(`{"pid":"p","max":-1}`), 400, protocol.CodeInvalid},
		{"huge body", "POST", "/v1/append", huge, 413, protocol.CodeTooLarge},
		{"seq conflict", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":0,"events":["eA=="]}`), 409, protocol.CodeSeqConflict},
		{"fenced", "POST", "/v1/append", strings.NewReader(`{"pid":"p","expected_seq":1,"epoch":1,"events":["eA=="]}`), 409, protocol.CodeFenced},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := doRaw(t, srv.URL, tc.method, tc.path, tc.body)
			if status != tc.wantStatus || body["code"] != tc.wantCode || body["outcome"] != string(protocol.Fail) {
				t.Errorf("got %d %v, want %d code %q outcome fail", status, body, tc.wantStatus, tc.wantCode)
			}
			if msg, _ := body["error"].(string); msg == "" {
				t.Errorf("no error message in %v", body)
			}
			if n := eventCount(t, s); n != 1 {
				t.Fatalf("%d events stored after a refused request, want 1", n)
			}
		})
	}
}

func TestServerGoodRequests(t *testing.T) {
	s, _ := openTestStore(t, true)
	_, srv := serveStore(t, s)
	steps := []struct {
		method, path, body string
		want               map[string]any
	}{
		{"GET", "/v1/health", "", map[string]any{"ok": true}},
		{"POST", "/v1/highest", `{"pid":"p"}`, map[string]any{"highest": 0.0}},
		{"POST", "/v1/append", `{"pid":"p","expected_seq":0,"events":["eA==","eQ=="]}`, map[string]any{"last_seq": 2.0}},
		{"POST", "/v1/append", `{"pid":"p","expected_seq":-1,"events":["eg=="]}`, map[string]any{"last_seq": 3.0}},
		{"POST", "/v1/fence", `{"pid":"p"}`, map[string]any{"epoch": 1.0, "highest": 3.0}},
		{"POST", "/v1/fence", `{"pid":"p","token":"t-1"}`, map[string]any{"epoch": 2.0, "highest": 3.0}},
		{"POST", "/v1/fence", `{"pid":"p","token":"t-1"}`, map[string]any{"epoch": 2.0, "highest": 3.0}},
		{"POST", "/v1/fence", `{"pid":"p"}`, map[string]any{"epoch": 3.0, "highest": 3.0}},
		{"POST", "/v1/highest", ` {"pid":"p"} `, map[string]any{"highest": 3.0}},
		// A surrogate pair is one character (U+1F600), its own stream.
		{"POST", "/v1/append", `{"pid":"p\ud83d\ude00","expected_seq":0,"events":["eA=="]}`, map[string]any{"last_seq": 1.0}},
		{"POST", "/v1/highest", `{"pid":"p\ud83d\ude00"}`, map[string]any{"highest": 1.0}},
	}
	for _, st := range steps {
		var body io.Reader
		if st.body != "" {
			body = strings.NewReader(st.body)
		}
		status, got := doRaw(t, srv.URL, st.method, st.path, body)
		if status != 200 {
			t.Fatalf("%s %s: status %d %v", st.method, st.path, status, got)
		}
		for k, v := range st.want {
			if got[k] != v {
				t.Errorf("%s %s: %s = %v, want %v", st.method, st.path, k, got[k], v)
			}
		}
	}
	status, got := doRaw(t, srv.URL, "POST", "/v1/replay", strings.NewReader(`{"pid":"p","from":2,"max":1}`))
	evs, _ := got["events"].([]any)
	if status != 200 || len(evs) != 1 || evs[0].(map[string]any)["data"] != "eQ==" || evs[0].(map[string]any)["seq"] != 2.0 {
		t.Fatalf("replay: %d %v", status, got)
	}
	status, got = doRaw(t, srv.URL, "POST", "/v1/replay", strings.NewReader(`{"pid":"empty"}`))
	if evs, ok := got["events"].([]any); status != 200 || !ok || len(evs) != 0 {
		t.Fatalf("replay of empty id: %d %v, want events []", status, got)
	}
}

// failingJournal fails every call with a storage error, counting calls.
type failingJournal struct {
	calls atomic.Int64
	err   error
}

func (f *failingJournal) Append(context.Context, string, int64, uint64, [][]byte) (int64, error) {
	f.calls.Add(1)
	return 0, f.err
}

func (f *failingJournal) Replay(context.Context, string, int64, int) ([]journal.Event, error) {
	f.calls.Add(1)
	return nil, f.err
}

func (f *failingJournal) Fence(context.Context, string) (uint64, int64, error) {
	f.calls.Add(1)
	return 0, 0, f.err
}

func (f *failingJournal) Highest(context.Context, string) (int64, error) {
	f.calls.Add(1)
	return 0, f.err
}

// TestClientErrorMapping checks each server answer becomes the right
// sentinel and that only safe calls are retried.
func TestClientErrorMapping(t *testing.T) {
	ctx := context.Background()
	one := [][]byte{[]byte("x")}

	t.Run("definite", func(t *testing.T) {
		s, _ := openTestStore(t, true)
		c, _ := serveStore(t, s)
		mustAppend(t, c, "p", 0, journal.NoEpoch, []byte("x"))
		_, err := c.Append(ctx, "p", 0, journal.NoEpoch, one)
		if !errors.Is(err, journal.ErrSeqConflict) || !strings.Contains(err.Error(), "highest is 1") {
			t.Errorf("conflict: %v", err)
		}
		if _, _, err := c.Fence(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Fence(ctx, "p"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Append(ctx, "p", 1, 1, one); !errors.Is(err, journal.ErrFenced) {
			t.Errorf("fenced: %v", err)
		}
		if _, err := c.Replay(ctx, "p", 0, -5); !errors.Is(err, journal.ErrInvalid) || !strings.Contains(err.Error(), "negative max") {
			t.Errorf("invalid: %v", err)
		}
	})

	t.Run("storage error", func(t *testing.T) {
		f := &failingJournal{err: errors.New("disk on fire")}
		c, _ := serveStore(t, f)
		if _, err := c.Append(ctx, "p", 0, journal.NoEpoch, one); !errors.Is(err, journal.ErrUnavailable) || journal.IsDefinite(err) || !strings.Contains(err.Error(), "disk on fire") {
			t.Errorf("append: %v, want journal.ErrUnavailable with the server's message", err)
		}
		if n := f.calls.Load(); n != 1 {
			t.Errorf("append reached the server %d times; a sent append must not be retried", n)
		}
		f.calls.Store(0)
		if _, err := c.Highest(ctx, "p"); !errors.Is(err, journal.ErrUnavailable) {
			t.Errorf("highest: %v", err)
		}
		if n := f.calls.Load(); n != 1+journal.DefaultRetries {
			t.Errorf("highest reached the server %d times, want %d", n, 1+journal.DefaultRetries)
		}
		f.calls.Store(0)
		if _, _, err := c.Fence(ctx, "p"); !errors.Is(err, journal.ErrUnavailable) || f.calls.Load() != 1+journal.DefaultRetries {
			t.Errorf("fence: %v after %d calls", err, f.calls.Load())
		}
	})

	t.Run("not a journal", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		defer srv.Close()
		c := journal.NewClient(srv.URL, journal.ClientOptions{Backoff: time.Millisecond})
		if _, err := c.Append(ctx, "p", 0, journal.NoEpoch, one); !errors.Is(err, journal.ErrUnavailable) {
			t.Errorf("plain-text 404: %v, want journal.ErrUnavailable (outcome unknown)", err)
		}
	})

	t.Run("garbled success", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "{not json")
		}))
		defer srv.Close()
		c := journal.NewClient(srv.URL, journal.ClientOptions{Backoff: time.Millisecond})
		if _, err := c.Append(ctx, "p", 0, journal.NoEpoch, one); !errors.Is(err, journal.ErrUnavailable) {
			t.Errorf("garbled 200: %v, want journal.ErrUnavailable", err)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		var calls atomic.Int64
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}))
		defer srv.Close()
		defer close(release)
		c := journal.NewClient(srv.URL, journal.ClientOptions{Timeout: 50 * time.Millisecond, Backoff: time.Millisecond})
		_, err := c.Append(ctx, "p", 0, journal.NoEpoch, one)
		if !errors.Is(err, journal.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("hung append: %v, want journal.ErrUnavailable wrapping the deadline", err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("hung append sent %d times, want 1", n)
		}
	})

	t.Run("caller cancels", func(t *testing.T) {
		s, _ := openTestStore(t, true)
		c, _ := serveStore(t, s)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := c.Highest(cctx, "p"); !errors.Is(err, journal.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled: %v", err)
		}
	})
}

// TestClientClosedServer: a journal that is down is reported quickly as
// unavailable, for writes and reads alike, with default options.
func TestClientClosedServer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := journal.NewClient(url, journal.ClientOptions{})
	ctx := context.Background()
	calls := map[string]func() error{
		"append": func() error {
			_, err := c.Append(ctx, "p", 0, journal.NoEpoch, [][]byte{[]byte("x")})
			return err
		},
		"replay":  func() error { _, err := c.Replay(ctx, "p", 1, 0); return err },
		"fence":   func() error { _, _, err := c.Fence(ctx, "p"); return err },
		"highest": func() error { _, err := c.Highest(ctx, "p"); return err },
		"health":  func() error { return c.Health(ctx) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := call()
			if !errors.Is(err, journal.ErrUnavailable) || journal.IsDefinite(err) {
				t.Errorf("%v, want journal.ErrUnavailable", err)
			}
		})
	}
}

// A fence whose answer is lost is retried by the client; the retry (or the
// lost request, arriving late) must not fence the very caller: with the
// client's token both get the same epoch.
func TestFenceRetryIsIdempotent(t *testing.T) {
	s, _ := openTestStore(t, true)
	api := NewServer(s, slog.New(slog.DiscardHandler))
	var mu sync.Mutex
	lost := 0
	var first []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		mu.Lock()
		lose := lost < 2
		lost++
		first = body
		mu.Unlock()
		if lose { // applied, but the answer is lost: the connection drops
			api.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		api.ServeHTTP(w, r) // the last retry: applied and answered
	}))
	defer srv.Close()
	c := journal.NewClient(srv.URL, journal.ClientOptions{Timeout: 5 * time.Second, Backoff: time.Millisecond})
	defer c.CloseIdleConnections()
	epoch, _, err := c.Fence(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if lost != 3 {
		t.Fatalf("%d attempts, want 3 (two answers lost)", lost)
	}
	// A copy of the request, held up in the network, arrives late.
	late := httptest.NewRecorder()
	api.ServeHTTP(late, httptest.NewRequest(http.MethodPost, "/v1/fence", bytes.NewReader(first)))
	if late.Code != http.StatusOK {
		t.Fatalf("late copy: %d %s", late.Code, late.Body)
	}
	// Four requests were applied; the caller holds the only epoch given.
	if next, _, err := s.Fence(context.Background(), "p"); err != nil || epoch != 1 || next != 2 {
		t.Fatalf("the client got epoch %d, the next fence %d (%v); want 1 and 2", epoch, next, err)
	}
}

// blockingJournal holds every Append until release closes, counting the
// calls in flight.
type blockingJournal struct {
	journal.Journal
	release          chan struct{}
	mu               sync.Mutex
	inFlight, maxSaw int
}

func (b *blockingJournal) Append(ctx context.Context, pid string, seq int64, epoch uint64, data [][]byte) (int64, error) {
	b.mu.Lock()
	b.inFlight++
	b.maxSaw = max(b.maxSaw, b.inFlight)
	b.mu.Unlock()
	<-b.release
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	return 1, nil
}

// Requests in flight are bounded (eight ~60 MB appends once took the
// journal to 1.09 GB): the rest wait for a slot.
func TestServerBoundsRequestsInFlight(t *testing.T) {
	s, _ := openTestStore(t, true)
	b := &blockingJournal{Journal: s, release: make(chan struct{})}
	srv := httptest.NewServer(NewServer(b, slog.New(slog.DiscardHandler)))
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 3 * MaxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"pid":"p%d","expected_seq":0,"events":["eA=="]}`, i)
			res, err := http.Post(srv.URL+"/v1/append", "application/json", strings.NewReader(body))
			if err == nil {
				res.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		n := b.inFlight
		b.mu.Unlock()
		if n == MaxInFlight || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // would more get in?
	close(b.release)
	wg.Wait()
	if b.maxSaw != MaxInFlight {
		t.Fatalf("%d appends were in the store at once, want at most (and, under this load, exactly) %d", b.maxSaw, MaxInFlight)
	}
}

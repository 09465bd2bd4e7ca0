package peer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

func TestFrameRoundTrip(t *testing.T) {
	tests := []frame{
		{kind: frameRequest, id: 1, path: "/internal/v1/x", to: "n1@abc", body: []byte(`{"a":1}`)},
		{kind: frameRequest, id: 1 << 40, path: "", to: "", body: nil},
		{kind: frameReply, id: 7, status: 200, body: []byte(`{}`)},
		{kind: frameReply, id: 8, status: 503, body: nil},
		{kind: frameCancel, id: 9},
		{kind: frameDropped, id: 10},
	}
	var buf []byte
	for _, f := range tests {
		buf = appendFrame(buf, f)
	}
	br := bufio.NewReader(bytes.NewReader(buf))
	for _, want := range tests {
		got, err := readFrame(br)
		if err != nil {
			t.Fatalf("read %+v: %v", want, err)
		}
		if got.kind != want.kind || got.id != want.id || got.path != want.path || got.to != want.to || got.status != want.status || !bytes.Equal(got.body, want.body) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	}
}

func TestBadFrames(t *testing.T) {
	withLen := func(p []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(p))), p...)
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"too short", withLen([]byte{frameCancel})},
		{"too long", binary.BigEndian.AppendUint32(nil, maxFrame+1)},
		{"unknown kind", withLen([]byte{99, 1})},
		{"path longer than the frame", withLen([]byte{frameRequest, 1, 50, 'a'})},
		{"bad id", withLen([]byte{frameCancel, 0xff, 0xff})},
		{"status out of range", withLen([]byte{frameReply, 1, 5})},
		{"cancel with a body", withLen([]byte{frameCancel, 1, 'x'})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readFrame(bufio.NewReader(bytes.NewReader(tt.data)))
			if !errors.Is(err, errBadFrame) {
				t.Fatalf("err %v, want a bad frame", err)
			}
		})
	}
	// Cut short: the stream ended inside a frame.
	data := appendFrame(nil, frame{kind: frameReply, id: 1, status: 200, body: []byte("0123456789")})
	if _, err := readFrame(bufio.NewReader(bytes.NewReader(data[:len(data)-3]))); err == nil || errors.Is(err, errBadFrame) {
		t.Fatalf("a frame cut short: %v, want unexpected EOF", err)
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add(appendFrame(nil, frame{kind: frameRequest, id: 3, path: "/p", to: "t", body: []byte("{}")})[4:])
	f.Add(appendFrame(nil, frame{kind: frameReply, id: 3, status: 200})[4:])
	f.Add([]byte{frameCancel, 1})
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p) == 0 {
			return
		}
		fr, err := parseFrame(p)
		if err != nil {
			return
		}
		// What parses writes back the same.
		if again := appendFrame(nil, fr)[4:]; !bytes.Equal(again, p) {
			if fr2, err := parseFrame(again); err != nil || fr2.id != fr.id || fr2.path != fr.path || !bytes.Equal(fr2.body, fr.body) {
				t.Fatalf("%x parsed as %+v, which writes %x", p, fr, again)
			}
		}
	})
}

// streamServer starts a stream server (and plain HTTP for other paths)
// around h.
func streamServer(t *testing.T, filter *Filter, guard *Guard, h http.Handler) (*httptest.Server, *StreamServer, string) {
	t.Helper()
	ss := NewStreamServer(filter, guard, h, nil)
	srv := httptest.NewServer(ss.Handler(filter.Middleware(h)))
	t.Cleanup(srv.Close)
	t.Cleanup(ss.Close)
	return srv, ss, strings.TrimPrefix(srv.URL, "http://")
}

func TestStreamCarriesConcurrentCalls(t *testing.T) {
	var served atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ N int }
		if err := jsonDecode(r, &in); err != nil {
			WriteError(w, protocol.CodeBadJSON, err.Error())
			return
		}
		// Later requests answer first: replies must find their caller.
		time.Sleep(time.Duration(50-in.N) * time.Millisecond / 10)
		served.Add(1)
		WriteJSON(w, 200, map[string]any{"n": in.N, "to": r.Header.Get(ToHeader), "from": r.Header.Get(MemberHeader)})
	})
	_, _, addr := streamServer(t, nil, nil, h)
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, nil)
	defer c.Close()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct {
				N        int
				To, From string
			}
			err := c.Call(context.Background(), Target{UID: fmt.Sprintf("peer@%d", i), GossipAddr: "peer:1", Addr: addr}, "/x", map[string]int{"n": i}, &out)
			if err != nil || out.N != i || out.To != fmt.Sprintf("peer@%d", i) || out.From != "me@1" {
				t.Errorf("call %d: %+v, %v", i, out, err)
			}
		}()
	}
	wg.Wait()
	c.mu.Lock()
	n := len(c.streams)
	c.mu.Unlock()
	if n != 1 || served.Load() != 50 {
		t.Fatalf("%d streams, %d served; want one stream carrying 50", n, served.Load())
	}
}

func jsonDecode(r *http.Request, v any) error { return json.NewDecoder(r.Body).Decode(v) }

// goroutineID is the id of the calling goroutine, from its stack's first
// line ("goroutine N [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := strings.Fields(string(buf))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// Requests one after another on a stream are served by a worker that
// stays for the next one, not by a new goroutine each (whose stack grew
// through the handler every time); once the stream ends, its idle
// workers end too (the server closes without waiting for their idle
// time).
func TestStreamWorkersServeOneRequestAfterAnother(t *testing.T) {
	var mu sync.Mutex
	workers := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		workers[goroutineID()]++
		mu.Unlock()
		WriteJSON(w, 200, struct{}{})
	})
	_, ss, addr := streamServer(t, nil, nil, h)
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, nil)
	to := Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}
	const calls = 50
	for i := range calls {
		if err := c.Call(context.Background(), to, "/x", struct{}{}, nil); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	mu.Lock()
	n := len(workers)
	mu.Unlock()
	if n == 0 || n > calls/5 {
		t.Fatalf("%d calls one after another were served by %d goroutines: %v", calls, n, workers)
	}
	c.Close()
	closed := make(chan struct{})
	go func() { ss.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(workerIdle / 2):
		t.Fatal("the server did not close: an idle worker of an ended stream is still waiting")
	}
}

func TestStreamCancelReachesHandler(t *testing.T) {
	cancelled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		close(cancelled)
	})
	_, _, addr := streamServer(t, nil, nil, h)
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, nil)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Call(ctx, Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}, "/wait", struct{}{}, nil)
	if !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrNotSent) {
		t.Fatalf("a call that timed out waiting: %v, want unreachable and maybe sent", err)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was not told the caller stopped waiting")
	}
}

func TestStreamRedialsAfterBreak(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, struct{}{}) })
	ss := NewStreamServer(nil, nil, h, nil)
	srv := httptest.NewServer(ss.Handler(h))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, nil)
	defer c.Close()
	to := Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}
	if err := c.Call(context.Background(), to, "/x", struct{}{}, nil); err != nil {
		t.Fatal(err)
	}
	// The server ends its streams (a restart): the next call gets a new
	// one, as a restarted peer's next HTTP request got a new connection.
	ss.mu.Lock()
	for conn := range ss.streams {
		conn.Close()
	}
	ss.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Call(context.Background(), to, "/x", struct{}{}, nil)
		if err == nil {
			break
		}
		// A call racing the break may fail as unknown; never for long.
		if time.Now().After(deadline) {
			t.Fatalf("no call succeeded after the stream broke: %v", err)
		}
	}
	ss.Close()
}

func TestNotSentIsDefiniteOnlyWhenNothingWasWritten(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, struct{}{}) })
	var serverFilter Filter
	_, _, addr := streamServer(t, &serverFilter, nil, h)
	closed := httptest.NewServer(h)
	closedAddr := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()
	var clientFilter Filter
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, &clientFilter)
	defer c.Close()
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	// Open the stream first, so the server's cut is met on a stream.
	if err := c.Call(context.Background(), Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}, "/x", struct{}{}, nil); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		setup   func()
		to      Target
		notSent bool
	}{
		{"connection refused", func() {}, Target{UID: "q@1", GossipAddr: "q:1", Addr: closedAddr}, true},
		{"no peer address", func() {}, Target{UID: "q@1", GossipAddr: "q:1"}, true},
		{"cut by the sender's filter", func() { clientFilter.Set(Rules{DropOut: []string{"p:1"}}) }, Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}, true},
		// The receiver dropped it: to the sender, as a lost packet either way.
		{"dropped by the receiver's filter", func() { serverFilter.Set(Rules{DropIn: []string{"me:1"}}) }, Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clientFilter.Set(Rules{})
			serverFilter.Set(Rules{})
			tt.setup()
			err := c.Call(short(), tt.to, "/x", struct{}{}, nil)
			if !errors.Is(err, ErrUnreachable) || errors.Is(err, ErrNotSent) != tt.notSent {
				t.Fatalf("err %v: want unreachable, not sent %v", err, tt.notSent)
			}
		})
	}
}

func TestStreamGuardedPerRequest(t *testing.T) {
	members := map[string]bool{"me@1": true}
	var mu sync.Mutex
	g := &Guard{
		Self: func() string { return "p@1" },
		Member: func(uid string) (string, bool) {
			mu.Lock()
			defer mu.Unlock()
			return "127.0.0.1", members[uid]
		},
		Secret: "s3cret",
	}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, struct{}{}) }))
	_, _, addr := streamServer(t, nil, g, h)
	good := NewClient(Self{UID: "me@1", GossipAddr: "me:1", Secret: "s3cret"}, nil)
	defer good.Close()
	bad := NewClient(Self{UID: "me@1", GossipAddr: "me:1", Secret: "guess"}, nil)
	defer bad.Close()
	to := Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}
	ctx := context.Background()
	if err := good.Call(ctx, to, "/x", struct{}{}, nil); err != nil {
		t.Fatalf("a member with the secret: %v", err)
	}
	var re *RemoteError
	if err := bad.Call(ctx, to, "/x", struct{}{}, nil); !errors.As(err, &re) || re.Body.Code != protocol.CodePeerRefused || !IsDefiniteFailure(err) {
		t.Fatalf("a wrong secret: %v, want refused", err)
	}
	if err := good.Call(ctx, Target{UID: "p@0", GossipAddr: "p:1", Addr: addr}, "/x", struct{}{}, nil); !errors.As(err, &re) || re.Body.Code != protocol.CodeWrongMember {
		t.Fatalf("for another incarnation: %v, want wrong-member", err)
	}
	// The sender stops being a member while its stream stays open.
	mu.Lock()
	members["me@1"] = false
	mu.Unlock()
	if err := good.Call(ctx, to, "/x", struct{}{}, nil); !errors.As(err, &re) || re.Body.Code != protocol.CodePeerRefused {
		t.Fatalf("from a former member on an open stream: %v, want refused", err)
	}
}

func TestStreamHandlerPanicIsAnUnknownOutcome(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/boom" {
			panic("boom")
		}
		WriteJSON(w, 200, struct{}{})
	})
	_, _, addr := streamServer(t, nil, nil, h)
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, nil)
	defer c.Close()
	to := Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}
	var re *RemoteError
	if err := c.Call(context.Background(), to, "/boom", struct{}{}, nil); !errors.As(err, &re) || re.Status != 500 || IsDefiniteFailure(err) {
		t.Fatalf("a panicking handler: %v, want 500 unknown", err)
	}
	if err := c.Call(context.Background(), to, "/ok", struct{}{}, nil); err != nil {
		t.Fatalf("the stream after a panic: %v", err)
	}
}

func TestStreamServerRefusesBadUpgradesAndFrames(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, struct{}{}) })
	srv, _, addr := streamServer(t, nil, nil, h)
	// An upgrade that names no sender is refused with a clear answer.
	res, err := http.Get(srv.URL + StreamPath)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a GET without Upgrade: %s", res.Status)
	}
	// A client that sends garbage on its stream loses only that stream.
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, nil)
	defer c.Close()
	to := Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}
	if err := c.Call(context.Background(), to, "/x", struct{}{}, nil); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	var s *stream
	for _, sl := range c.streams {
		s = sl.s
	}
	c.mu.Unlock()
	s.out.mu.Lock()
	s.conn.Write([]byte{0, 0, 0, 2, 99, 1})
	s.out.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for s.broken() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.broken() == nil {
		t.Fatal("the server kept a stream that sent a bad frame")
	}
	if err := c.Call(context.Background(), to, "/x", struct{}{}, nil); err != nil {
		t.Fatalf("a new stream after the bad one: %v", err)
	}
}

func TestClientFallsBackToHTTP(t *testing.T) {
	var upgrades, posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == StreamPath {
			upgrades.Add(1)
			http.NotFound(w, r)
			return
		}
		posts.Add(1)
		WriteJSON(w, 200, map[string]int{"v": 1})
	}))
	defer srv.Close()
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, nil)
	defer c.Close()
	to := Target{UID: "p@1", GossipAddr: "p:1", Addr: strings.TrimPrefix(srv.URL, "http://")}
	for range 3 {
		var out struct{ V int }
		if err := c.Call(context.Background(), to, "/x", struct{}{}, &out); err != nil || out.V != 1 {
			t.Fatalf("over HTTP: %+v %v", out, err)
		}
	}
	if upgrades.Load() != 1 || posts.Load() != 3 {
		t.Fatalf("%d upgrades asked, %d posts: want the upgrade asked once", upgrades.Load(), posts.Load())
	}
}

// askStream asks addr for a stream with headers h, as a stranger's raw
// client would; it returns the answer's status and code, and the
// connection (open if upgraded; the caller closes it).
func askStream(t *testing.T, addr string, h map[string]string) (int, string, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+StreamPath, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", StreamProtocol)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	var b protocol.ErrorBody
	if res.StatusCode != http.StatusSwitchingProtocols {
		data, _ := io.ReadAll(res.Body)
		json.Unmarshal(data, &b)
		if b.Outcome != protocol.Fail {
			t.Errorf("refused with outcome %q: %s", b.Outcome, data)
		}
	}
	conn.SetDeadline(time.Time{})
	return res.StatusCode, b.Code, conn
}

// httpOnlyAddrs counts the addresses c sends plain HTTP to.
func httpOnlyAddrs(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.httpOnly)
}

// The guard admits a stream before the upgrade, as it admits each request
// (a stranger was given a stream, with its buffer and workers, and refused
// only each call on it).
func TestStreamUpgradeGuarded(t *testing.T) {
	g := &Guard{
		Self:   func() string { return "p@1" },
		Member: func(uid string) (string, bool) { return "127.0.0.1", uid == "me@1" },
		Secret: "s3cret",
	}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, struct{}{}) }))
	_, _, addr := streamServer(t, nil, g, h)
	tests := []struct {
		name    string
		headers map[string]string
		status  int
		code    string
	}{
		{"no secret", map[string]string{MemberHeader: "me@1", FromHeader: "me:1"}, http.StatusForbidden, protocol.CodePeerRefused},
		{"a wrong secret", map[string]string{SecretHeader: "guess", MemberHeader: "me@1", FromHeader: "me:1"}, http.StatusForbidden, protocol.CodePeerRefused},
		{"a made-up member", map[string]string{SecretHeader: "s3cret", MemberHeader: "ghost@x", FromHeader: "me:1"}, http.StatusForbidden, protocol.CodePeerRefused},
		{"no member named", map[string]string{SecretHeader: "s3cret", FromHeader: "me:1"}, http.StatusBadRequest, protocol.CodeBadUpgrade},
		{"a member with the secret", map[string]string{SecretHeader: "s3cret", MemberHeader: "me@1", FromHeader: "me:1"}, http.StatusSwitchingProtocols, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if status, code, _ := askStream(t, addr, tt.headers); status != tt.status || code != tt.code {
				t.Fatalf("%d %s, want %d %s", status, code, tt.status, tt.code)
			}
		})
	}
	// A client refused at the upgrade learns the refusal each request
	// would get, as a definite failure, not that the peer serves no
	// streams.
	bad := NewClient(Self{UID: "ghost@x", GossipAddr: "me:1", Secret: "s3cret"}, nil)
	defer bad.Close()
	var re *RemoteError
	if err := bad.Call(context.Background(), Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}, "/x", struct{}{}, nil); !errors.As(err, &re) || re.Body.Code != protocol.CodePeerRefused || !IsDefiniteFailure(err) {
		t.Fatalf("a stranger's call: %v, want refused", err)
	}
	if httpOnlyAddrs(bad) != 0 {
		t.Fatal("a refused stream made the client send plain HTTP: the refusal is the guard's, not a peer without streams")
	}
}

// A member holds at most maxStreamsPerMember streams; past them it is
// refused with 429 and its client sends over plain HTTP, each request
// still served.
func TestStreamsBoundedPerMember(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, 200, struct{}{}) })
	_, _, addr := streamServer(t, nil, nil, h)
	me := map[string]string{MemberHeader: "me@1", FromHeader: "me:1"}
	var held []net.Conn
	for i := range maxStreamsPerMember {
		status, _, conn := askStream(t, addr, me)
		if status != http.StatusSwitchingProtocols {
			t.Fatalf("stream %d: %d, want 101", i+1, status)
		}
		held = append(held, conn)
	}
	if status, code, _ := askStream(t, addr, me); status != http.StatusTooManyRequests || code != protocol.CodeTooManyStreams {
		t.Fatalf("one stream more: %d %s, want 429 %s", status, code, protocol.CodeTooManyStreams)
	}
	// Another member is not held back by this one.
	if status, _, _ := askStream(t, addr, map[string]string{MemberHeader: "other@1", FromHeader: "other:1"}); status != http.StatusSwitchingProtocols {
		t.Fatalf("another member's stream: %d, want 101", status)
	}
	// The member's own client still gets through, over plain HTTP.
	c := NewClient(Self{UID: "me@1", GossipAddr: "me:1"}, nil)
	defer c.Close()
	if err := c.Call(context.Background(), Target{UID: "p@1", GossipAddr: "p:1", Addr: addr}, "/x", struct{}{}, nil); err != nil {
		t.Fatalf("a call past the bound: %v", err)
	}
	if httpOnlyAddrs(c) != 1 {
		t.Fatal("the call past the bound did not go over plain HTTP")
	}
	// A stream that ends frees its slot.
	held[0].Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		status, _, conn := askStream(t, addr, me)
		conn.Close()
		if status == http.StatusSwitchingProtocols {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a slot freed by a closed stream: still %d", status)
		}
	}
}

package peer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/protocol"
)

const (
	// serverIdle closes a stream that sent nothing for this long: its
	// client is gone without a word (clients close theirs after
	// clientIdle).
	serverIdle = 2 * time.Minute
	// maxInFlight bounds the requests one stream has being served at
	// once; past it the stream is not read until one ends.
	maxInFlight = 1024
	// maxStreamsPerMember bounds the streams one member may hold open
	// here at once. A member's client keeps one stream per peer address;
	// a few more cover the streams of a broken connection this side has
	// not noticed yet (a half-open one lingers up to serverIdle). More is
	// a sender that misbehaves, each stream costing a buffer and
	// workers: refused with 429 (the sender's doing, not this node's
	// state, which 503 would say), after which a client sends that
	// member's requests over plain HTTP, each guarded as before, so a
	// legitimate sender beyond the bound loses speed, not service.
	maxStreamsPerMember = 4
)

// StreamServer serves node-to-node streams: each request on one runs
// through the same handler an HTTP request of its path would, with the
// sender's headers the stream named at its start, and its packet filter
// applied per request (a cut sender's request is answered "dropped", as a
// connection closed without an answer). Its guard admits a stream before
// the upgrade, as it admits a request: a stranger gets no stream to hold
// open (only its refusal), and a member at most maxStreamsPerMember.
type StreamServer struct {
	filter  *Filter
	guard   *Guard
	handler http.Handler
	log     *slog.Logger

	mu       sync.Mutex
	closed   bool
	streams  map[net.Conn]struct{}
	byMember map[string]int // open streams (and upgrades under way) per member
	wg       sync.WaitGroup // streams and their requests
}

// NewStreamServer returns a server whose streams' requests h handles.
// guard admits each stream before its upgrade (h should guard each
// request too: a member may stop being one while its stream is open); nil
// admits every sender that names itself (tests of the transport alone).
func NewStreamServer(filter *Filter, guard *Guard, h http.Handler, log *slog.Logger) *StreamServer {
	if log == nil {
		log = slog.Default()
	}
	return &StreamServer{filter: filter, guard: guard, handler: h, log: log, streams: map[net.Conn]struct{}{}, byMember: map[string]int{}}
}

// Handler serves StreamPath and passes every other request to next.
func (s *StreamServer) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != StreamPath {
			next.ServeHTTP(w, r)
			return
		}
		s.upgrade(w, r)
	})
}

// Close ends every stream (their requests' contexts are cancelled) and
// waits for them.
func (s *StreamServer) Close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.streams {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *StreamServer) upgrade(w http.ResponseWriter, r *http.Request) {
	from, member := r.Header.Get(FromHeader), r.Header.Get(MemberHeader)
	if r.Method != http.MethodGet || r.Header.Get("Upgrade") != StreamProtocol {
		WriteError(w, protocol.CodeBadUpgrade, "GET "+StreamPath+" with Upgrade: "+StreamProtocol)
		return
	}
	if from == "" || member == "" {
		WriteError(w, protocol.CodeBadUpgrade, "a stream names its sender ("+FromHeader+", "+MemberHeader+")")
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		// The table's other status for this code: the fault is here.
		WriteErrorBody(w, http.StatusInternalServerError, protocol.ErrorBody{Code: protocol.CodeBadUpgrade, Error: "this server cannot hand over its connection"})
		return
	}
	if !s.filter.AllowsStream(from) {
		// As a cut network: no answer, whoever asks.
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	// Admitted before the upgrade, as each request is: a stranger was
	// given a stream (and its buffer and workers) and refused only each
	// call on it.
	if s.guard != nil {
		if _, no := s.guard.Admit(r.Header, r.RemoteAddr); no != nil {
			no.Write(w)
			return
		}
	}
	if no := s.reserve(member); no != nil {
		no.Write(w)
		return
	}
	defer s.release(member)
	conn, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.streams[conn] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.streams, conn)
		s.mu.Unlock()
		conn.Close()
	}()
	conn.SetDeadline(time.Time{}) // the server's read timeout was for the upgrade
	conn.SetWriteDeadline(clock.Machine{}.Now().Add(writeTimeout))
	if _, err := io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+StreamProtocol+"\r\n\r\n"); err != nil {
		return
	}
	if err := brw.Flush(); err != nil {
		return
	}
	ss := &serverStream{
		srv: s, conn: conn, out: frameWriter{conn: conn}, from: from, member: member,
		secret: r.Header.Get(SecretHeader), remote: r.RemoteAddr, host: r.Host,
		inflight: map[uint64]context.CancelFunc{},
	}
	ss.serve(brw.Reader)
}

// reserve takes one of member's stream slots until release, or refuses
// the stream (see maxStreamsPerMember).
func (s *StreamServer) reserve(member string) *Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.byMember[member]; n >= maxStreamsPerMember {
		return refuse(http.StatusTooManyRequests, protocol.CodeTooManyStreams,
			fmt.Sprintf("%s holds %d streams here, the most a member may; send over plain HTTP", member, n))
	}
	s.byMember[member]++
	return nil
}

func (s *StreamServer) release(member string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byMember[member]--; s.byMember[member] <= 0 {
		delete(s.byMember, member)
	}
}

// serverStream is one stream being served.
type serverStream struct {
	srv                  *StreamServer
	conn                 net.Conn
	from, member, secret string
	remote, host         string
	out                  frameWriter // the frames this side sends

	mu       sync.Mutex
	inflight map[uint64]context.CancelFunc
}

func (ss *serverStream) serve(br *bufio.Reader) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // every request still being served
	sem := make(chan struct{}, maxInFlight)
	var reqs sync.WaitGroup
	defer reqs.Wait()
	ended := make(chan struct{})
	defer close(ended) // idle workers end (before the wait for the busy ones)
	// Requests are served by workers that stay for the next one while
	// requests keep coming: a fresh goroutine per request grew its stack
	// through the handler every time (a tenth of a node's time on the
	// routed read).
	idle := make(chan work) // a worker waiting for a request receives
	for {
		ss.conn.SetReadDeadline(clock.Machine{}.Now().Add(serverIdle))
		f, err := readFrame(br)
		if err != nil {
			if !isClosed(err) {
				ss.srv.log.Debug("peer stream ended", "from", ss.from, "err", err)
			}
			return
		}
		switch f.kind {
		case frameRequest:
			if !ss.srv.filter.AllowsStream(ss.from) {
				if ss.out.write(frame{kind: frameDropped, id: f.id}) != nil {
					return
				}
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			rctx, rcancel := context.WithCancel(ctx)
			ss.mu.Lock()
			if _, dup := ss.inflight[f.id]; dup {
				ss.mu.Unlock()
				rcancel()
				ss.srv.log.Warn("peer stream: a request id in use twice; closing", "from", ss.from)
				return
			}
			ss.inflight[f.id] = rcancel
			ss.mu.Unlock()
			w := work{ctx: rctx, cancel: rcancel, f: f}
			select {
			case idle <- w:
			default:
				reqs.Add(1)
				go func() {
					defer reqs.Done()
					ss.work(w, idle, ended, sem)
				}()
			}
		case frameCancel:
			ss.mu.Lock()
			if c := ss.inflight[f.id]; c != nil {
				c()
			}
			ss.mu.Unlock()
		default:
			ss.srv.log.Warn("peer stream: a frame a client does not send; closing", "from", ss.from, "kind", f.kind)
			return
		}
	}
}

// work is one request for a worker.
type work struct {
	ctx    context.Context
	cancel context.CancelFunc
	f      frame
}

// workerIdle is how long a worker waits for another request before it
// ends.
const workerIdle = 10 * time.Second

// work serves w, then every request handed to it on idle, until none
// comes for workerIdle or the stream has ended.
func (ss *serverStream) work(w work, idle <-chan work, ended <-chan struct{}, sem <-chan struct{}) {
	t := clock.Machine{}.NewTimer(workerIdle)
	defer t.Stop()
	for {
		ss.handle(w.ctx, w.f)
		ss.mu.Lock()
		delete(ss.inflight, w.f.id)
		ss.mu.Unlock()
		w.cancel()
		<-sem
		t.Reset(workerIdle)
		select {
		case w = <-idle:
		case <-t.C():
			return
		case <-ended:
			return
		}
	}
}

// handle serves one request and writes its reply. A handler that panics
// answers 500 with an unknown outcome, as net/http would close the
// connection: no request crashes the node.
func (ss *serverStream) handle(ctx context.Context, f frame) {
	h := http.Header{
		FromHeader:     {ss.from},
		MemberHeader:   {ss.member},
		ToHeader:       {f.to},
		"Content-Type": {"application/json"},
	}
	if ss.secret != "" {
		h[SecretHeader] = []string{ss.secret}
	}
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Path: f.path},
		RequestURI:    f.path,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(f.body)),
		ContentLength: int64(len(f.body)),
		Host:          ss.host,
		RemoteAddr:    ss.remote,
	}).WithContext(ctx)
	rw := &replyWriter{header: http.Header{}}
	func() {
		defer func() {
			if p := recover(); p != nil {
				ss.srv.log.Error("peer request handler panicked", "path", f.path, "from", ss.from, "panic", p)
				status, data := errorAnswer(0, protocol.ErrorBody{Error: fmt.Sprint("handler panicked: ", p), Code: protocol.CodeInternal})
				rw.status, rw.body = status, bytes.NewBuffer(data)
			}
		}()
		ss.srv.handler.ServeHTTP(rw, req)
	}()
	status := rw.status
	if status == 0 {
		status = http.StatusOK
	}
	var body []byte
	if rw.body != nil {
		body = rw.body.Bytes()
	}
	if len(body) > maxFrame-64 {
		status, body = errorAnswer(0, protocol.ErrorBody{Error: fmt.Sprintf("answer of %d bytes is too long", len(body)), Code: protocol.CodeInternal})
	}
	if err := ss.out.write(frame{kind: frameReply, id: f.id, status: status, body: body}); err != nil {
		ss.conn.Close() // the reader ends the stream
	}
}

// replyWriter collects a handler's answer for a reply frame.
type replyWriter struct {
	header http.Header
	status int
	body   *bytes.Buffer
}

func (w *replyWriter) Header() http.Header { return w.header }

func (w *replyWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *replyWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body == nil {
		w.body = &bytes.Buffer{}
	}
	return w.body.Write(p)
}

// isClosed reports whether err is how a stream ends in the ordinary
// course (closed by either side, or idle).
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded)
}

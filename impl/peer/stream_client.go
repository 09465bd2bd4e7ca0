package peer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/protocol"
)

// StreamPath is the peer port's endpoint that turns a connection into a
// stream of framed node-to-node requests (an HTTP/1.1 Upgrade to
// StreamProtocol). One stream per peer address carries every request to
// it, any number at once: a request costs one frame each way instead of an
// HTTP exchange (headers, parsing, the transport's goroutines), which made
// the node-to-node hop dearer than a client's whole round trip.
const StreamPath = "/internal/v1/stream"

// StreamProtocol is the Upgrade token of a stream (StreamPath): a stranger
// probing the peer port sends it too (shardtest conform --probe).
const StreamProtocol = "shardtest-peer/1"

const (
	// dialTimeout bounds connecting and the upgrade.
	dialTimeout = 2 * time.Second
	// writeTimeout bounds one frame's write: a peer that stops reading
	// breaks the stream instead of blocking its senders.
	writeTimeout = 5 * time.Second
	// clientIdle closes a stream that carried nothing for this long (as
	// the HTTP transport closed idle connections).
	clientIdle = 30 * time.Second
	// httpOnlyFor is how long an address that refused the upgrade (a
	// peer that serves only HTTP) is sent HTTP requests before the upgrade
	// is tried again.
	httpOnlyFor = time.Minute
)

// errHTTPOnly: the peer answered the upgrade with plain HTTP.
var errHTTPOnly = errors.New("peer serves no streams")

// errClientClosed: the client was closed.
var errClientClosed = errors.New("peer client closed")

// errStreamIdle: the stream was closed for carrying nothing.
var errStreamIdle = errors.New("peer stream closed as idle")

// notSentError: the request was never written (the stream had broken
// before): it had no effect and can go on a new stream.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return "not sent: " + e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// streamSlot is the client's stream to one address: being dialled until
// ready is closed, then s or err.
type streamSlot struct {
	ready chan struct{}
	s     *stream
	err   error
}

// stream is one connection to a peer address, carrying requests and their
// replies by id.
type stream struct {
	addr string
	conn net.Conn
	out  frameWriter // the frames this side sends

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan frame
	err     error // set once the stream broke: no more requests
	idle    clock.Timer
}

// streamFor returns the stream to addr, dialling it if there is none
// (one dial at a time per address; every caller waits for it, each until
// its own ctx ends).
func (c *Client) streamFor(ctx context.Context, addr string) (*stream, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, errClientClosed
		}
		if until, ok := c.httpOnly[addr]; ok {
			if (clock.Machine{}).Now().Before(until) {
				c.mu.Unlock()
				return nil, errHTTPOnly
			}
			delete(c.httpOnly, addr)
		}
		sl := c.streams[addr]
		if sl == nil {
			sl = &streamSlot{ready: make(chan struct{})}
			c.streams[addr] = sl
			c.wg.Add(1)
			go c.dial(addr, sl)
		}
		c.mu.Unlock()
		select {
		case <-sl.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if sl.err != nil {
			return nil, sl.err
		}
		if sl.s.broken() == nil {
			return sl.s, nil
		}
		c.drop(addr, sl) // broke since: dial again
	}
}

// drop forgets sl if it is still addr's stream.
func (c *Client) drop(addr string, sl *streamSlot) {
	c.mu.Lock()
	if c.streams[addr] == sl {
		delete(c.streams, addr)
	}
	c.mu.Unlock()
}

// dial connects to addr and upgrades the connection; on success the
// stream's reader runs until the stream breaks.
func (c *Client) dial(addr string, sl *streamSlot) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.ctx, dialTimeout)
	defer cancel()
	s, br, err := c.upgrade(ctx, addr)
	sl.s, sl.err = s, err
	if err != nil {
		c.drop(addr, sl)
		if errors.Is(err, errHTTPOnly) {
			c.mu.Lock()
			c.httpOnly[addr] = clock.Machine{}.Now().Add(httpOnlyFor)
			c.mu.Unlock()
		}
		close(sl.ready)
		return
	}
	close(sl.ready)
	s.read(br)
	c.drop(addr, sl)
}

// upgrade dials addr and asks for a stream, naming the sender once for
// the stream (its requests each name the member they are for).
func (c *Client) upgrade(ctx context.Context, addr string) (*stream, *bufio.Reader, error) {
	d := net.Dialer{}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err // a *net.OpError "dial": nothing was sent
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+StreamPath, nil)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", StreamProtocol)
	req.Header.Set(FromHeader, c.self.GossipAddr)
	req.Header.Set(MemberHeader, c.self.UID)
	if c.self.Secret != "" {
		req.Header.Set(SecretHeader, c.self.Secret)
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("ask %s for a stream: %w", addr, err)
	}
	br := bufio.NewReaderSize(conn, 32<<10)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("ask %s for a stream: %w", addr, err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Upgrade") != StreamProtocol {
		data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		conn.Close()
		if re := guardRefusal(res.StatusCode, data); re != nil {
			return nil, nil, re
		}
		return nil, nil, fmt.Errorf("%w: %s answered the upgrade with %s", errHTTPOnly, addr, res.Status)
	}
	conn.SetDeadline(time.Time{})
	s := &stream{addr: addr, conn: conn, out: frameWriter{conn: conn}, pending: map[uint64]chan frame{}}
	s.idle = clock.Machine{}.AfterFunc(clientIdle, s.closeIfIdle)
	return s, br, nil
}

// guardRefusal is the peer guard's refusal of a stream (the answer each
// request would get: this member is not, or not yet, one of the peer's, or
// the secret is wrong), or nil for any other answer: a peer that serves no
// streams, or will not give this member another (too-many-streams), is
// sent plain HTTP requests instead.
func guardRefusal(status int, data []byte) *RemoteError {
	var b protocol.ErrorBody
	if json.Unmarshal(data, &b) != nil || b.Code != protocol.CodePeerRefused || b.Outcome != protocol.Fail {
		return nil
	}
	return &RemoteError{Status: status, Body: b}
}

// broken is why the stream can carry no more requests (nil: it can).
func (s *stream) broken() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// read delivers replies to their callers until the stream breaks; then
// every caller still waiting learns why.
func (s *stream) read(br *bufio.Reader) {
	for {
		f, err := readFrame(br)
		if err == nil && f.kind != frameReply && f.kind != frameDropped {
			err = fmt.Errorf("%w: kind %d from a server", errBadFrame, f.kind)
		}
		if err != nil {
			s.fail(err)
			return
		}
		s.mu.Lock()
		ch := s.pending[f.id]
		delete(s.pending, f.id)
		s.idleIfNone()
		s.mu.Unlock()
		if ch != nil {
			ch <- f // buffered: never blocks
		}
	}
}

// fail breaks the stream: the connection closes and every waiting caller
// gets err.
func (s *stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	pending := s.pending
	s.pending = map[uint64]chan frame{}
	s.idle.Stop()
	s.mu.Unlock()
	s.conn.Close()
	for _, ch := range pending {
		ch <- frame{} // kind 0: broken
	}
}

// idleIfNone arms the idle timer when nothing is pending (s.mu held).
func (s *stream) idleIfNone() {
	if len(s.pending) == 0 && s.err == nil {
		s.idle.Reset(clientIdle)
	}
}

// closeIfIdle closes the stream if nothing is pending; once it decided,
// no request can start on it (call sees err).
func (s *stream) closeIfIdle() {
	s.mu.Lock()
	idle := len(s.pending) == 0 && s.err == nil
	if idle {
		s.err = errStreamIdle
	}
	s.mu.Unlock()
	if idle {
		s.fail(errStreamIdle)
	}
}

// call sends one request and waits for its reply, or until ctx ends (then
// the receiver is told to stop working on it).
func (s *stream) call(ctx context.Context, path, to string, body []byte) (frame, error) {
	ch := make(chan frame, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return frame{}, &notSentError{err}
	}
	s.nextID++
	id := s.nextID
	s.pending[id] = ch
	s.idle.Stop()
	s.mu.Unlock()
	if err := s.out.write(frame{kind: frameRequest, id: id, path: path, to: to, body: body}); err != nil {
		s.fail(err)
		return frame{}, err
	}
	select {
	case f := <-ch:
		if f.kind == 0 {
			return frame{}, s.broken()
		}
		return f, nil
	case <-ctx.Done():
		s.mu.Lock()
		_, waiting := s.pending[id]
		delete(s.pending, id)
		s.idleIfNone()
		s.mu.Unlock()
		if waiting {
			if err := s.out.write(frame{kind: frameCancel, id: id}); err != nil {
				s.fail(err)
			}
		}
		return frame{}, ctx.Err()
	}
}

// closeStreams breaks every stream and waits for the client's goroutines.
func (c *Client) closeStreams() {
	c.mu.Lock()
	c.closed = true
	slots := c.streams
	c.streams = map[string]*streamSlot{}
	c.mu.Unlock()
	c.cancel()
	for _, sl := range slots {
		<-sl.ready
		if sl.s != nil {
			sl.s.fail(errClientClosed)
		}
	}
	c.wg.Wait()
}

package peer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/shardtest/shardtest/impl/clock"
)

// The frames of a node-to-node stream. Each is a 4-byte big-endian length
// of what follows, a kind byte, the request's id (uvarint, chosen by the
// sender of the request, unique on its stream), and by kind:
//
//	request: uvarint len, path; uvarint len, the member it is for (uid); body
//	reply:   uvarint HTTP status; body
//	cancel:  nothing (the sender no longer waits: stop working on it)
//	dropped: nothing (the receiver's packet filter cut the request)
//
// Bodies are the JSON an HTTP request or answer of the same path carries,
// so a handler serves both alike.
const (
	frameRequest byte = 1
	frameReply   byte = 2
	frameCancel  byte = 3
	frameDropped byte = 4
)

// maxFrame bounds a frame (an answer is read up to 16 MiB over HTTP too):
// a longer length is a broken or hostile stream, closed before allocating.
const maxFrame = 16<<20 + 1024

// errBadFrame: the stream carries something that is not a frame; it is
// closed.
var errBadFrame = errors.New("peer stream: bad frame")

type frame struct {
	kind   byte
	id     uint64
	path   string // request
	to     string // request
	status int    // reply
	body   []byte // request, reply
}

// appendFrame appends f, length first, to dst.
func appendFrame(dst []byte, f frame) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, f.kind)
	dst = binary.AppendUvarint(dst, f.id)
	switch f.kind {
	case frameRequest:
		dst = binary.AppendUvarint(dst, uint64(len(f.path)))
		dst = append(dst, f.path...)
		dst = binary.AppendUvarint(dst, uint64(len(f.to)))
		dst = append(dst, f.to...)
		dst = append(dst, f.body...)
	case frameReply:
		dst = binary.AppendUvarint(dst, uint64(f.status))
		dst = append(dst, f.body...)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	return dst
}

// readFrame reads one frame. Its body is its own (not shared with r's
// buffer).
func readFrame(r *bufio.Reader) (frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n < 2 || n > maxFrame {
		return frame{}, fmt.Errorf("%w: length %d", errBadFrame, n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	return parseFrame(p)
}

// parseFrame decodes the frame p (without its length).
func parseFrame(p []byte) (frame, error) {
	d := decoder{p: p[1:]}
	f := frame{kind: p[0], id: d.uvarint()}
	switch f.kind {
	case frameRequest:
		f.path = string(d.bytes())
		f.to = string(d.bytes())
		f.body = d.rest()
	case frameReply:
		st := d.uvarint()
		if st < 100 || st > 999 {
			d.err = true
		}
		f.status = int(st)
		f.body = d.rest()
	case frameCancel, frameDropped:
		if len(d.rest()) != 0 {
			d.err = true
		}
	default:
		return frame{}, fmt.Errorf("%w: kind %d", errBadFrame, f.kind)
	}
	if d.err {
		return frame{}, fmt.Errorf("%w: kind %d", errBadFrame, f.kind)
	}
	return f, nil
}

// decoder reads a frame's fields, remembering the first error.
type decoder struct {
	p   []byte
	err bool
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.err = true
		d.p = nil
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.p)) {
		d.err = true
		d.p = nil
		return nil
	}
	b := d.p[:n]
	d.p = d.p[n:]
	return b
}

func (d *decoder) rest() []byte {
	b := d.p
	d.p = nil
	return b
}

// frameWriter writes whole frames to a stream's connection, one at a time,
// each within writeTimeout: a peer that stops reading breaks the stream
// instead of blocking its writers.
type frameWriter struct {
	conn net.Conn
	mu   sync.Mutex
	buf  []byte
}

func (w *frameWriter) write(f frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = appendFrame(w.buf[:0], f)
	w.conn.SetWriteDeadline(clock.Machine{}.Now().Add(writeTimeout))
	_, err := w.conn.Write(w.buf)
	if cap(w.buf) > 64<<10 {
		w.buf = nil // keep no large buffer for small frames
	}
	return err
}

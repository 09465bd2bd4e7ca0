package bench

import (
	"bufio"
	"context"
	be "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// echoReady is the line an echo process prints once it listens, then its
// address.
const echoReady = "echo listening on "

// maxEchoFrame bounds a frame the echo process and the framed relay read.
const maxEchoFrame = 1 << 20

// ServeEcho answers every length-prefixed frame (a 4-byte big-endian
// length, then that many bytes) on each connection to ln with the same
// frame, on the connection's own goroutine: the far end of the framed
// relay, doing nothing.
func ServeEcho(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		mu.Lock()
		conns[c] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			br := bufio.NewReader(c)
			for {
				p, err := readEchoFrame(br)
				if err != nil {
					return
				}
				if _, err := c.Write(p); err != nil {
					return
				}
			}
		}()
	}
}

// readEchoFrame reads one frame, its length prefix included.
func readEchoFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := be.BigEndian.Uint32(hdr[:])
	if n > maxEchoFrame {
		return nil, fmt.Errorf("echo: frame of %d bytes", n)
	}
	p := make([]byte, 4+n)
	copy(p, hdr[:])
	if _, err := io.ReadFull(r, p[4:]); err != nil {
		return nil, err
	}
	return p, nil
}

// ServeFramedRelay answers every request on ln by sending one frame to the
// echo process at to, over one kept-open connection, and answering with
// what came back: the least any routing through a second process costs
// on this machine — HTTP in and out as the node's front does, one framed
// round trip to another process as the node-to-node stream does, and no
// work at all.
func ServeFramedRelay(ctx context.Context, ln net.Listener, to string) error {
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", to)
	if err != nil {
		return fmt.Errorf("framed relay: %w", err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	body := []byte(`{"ok":true,"ready":true,"status":"up"}`)
	req := be.BigEndian.AppendUint32(nil, uint32(len(body)))
	req = append(req, body...)
	var mu sync.Mutex // one request on the connection at a time
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := conn.Write(req); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			p, err := readEchoFrame(br)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(p[4:])
		}),
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// EchoReadyLine is what the echo command prints once ln listens.
func EchoReadyLine(ln net.Listener) string { return echoReady + ln.Addr().String() }

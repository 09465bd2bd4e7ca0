package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// relayReady is the line a relay prints once it listens, then its address.
const relayReady = "relay listening on "

// ServeRelay answers every request on ln with a GET of to's /v1/health,
// over a kept-alive connection: an HTTP hop in the middle that does no
// work, the floor of any design that routes through a node (client →
// relay → B → relay → client), measured beside the routed read.
func ServeRelay(ctx context.Context, ln net.Listener, to string) error {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, "http://"+to+"/v1/health", nil)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			res, err := hc.Do(req)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer res.Body.Close()
			w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
			w.WriteHeader(res.StatusCode)
			io.Copy(w, res.Body)
		}),
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startHelper starts binary with args (`bench relay --to ADDR`, `bench
// echo`) as a process of its own, as the nodes are, and returns the
// address it printed after ready; stop ends it. The process dies with
// this one.
func startHelper(ctx context.Context, binary string, args []string, ready string) (addr string, stop func(), err error) {
	cmd := exec.Command(binary, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", strings.Join(args[:2], " "), err)
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
		io.Copy(io.Discard, out) // until the process ends
	}()
	select {
	case s := <-line:
		if !strings.HasPrefix(s, ready) {
			stop()
			return "", nil, fmt.Errorf("%s did not start (it printed %q)", strings.Join(args[:2], " "), s)
		}
		return strings.TrimSpace(strings.TrimPrefix(s, ready)), stop, nil
	case <-time.After(10 * time.Second):
		stop()
		return "", nil, fmt.Errorf("%s did not start in 10s", strings.Join(args[:2], " "))
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
}

// RelayReadyLine is what the relay command prints once ln listens.
func RelayReadyLine(ln net.Listener) string { return relayReady + ln.Addr().String() }

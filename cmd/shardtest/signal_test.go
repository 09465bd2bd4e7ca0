package main

import (
	"bufio"
	"io"
	"net"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/shardtest/shardtest/internal/testbin"
)

// startServe starts the binary's serve on a free port and returns it
// running, with the address it serves at.
func startServe(t *testing.T, bin string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--results", t.TempDir(), "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`at http://([^/]+)/`).FindStringSubmatch(line)
	if err != nil || m == nil {
		t.Fatalf("serve said %q, %v", line, err)
	}
	go io.Copy(io.Discard, stdout)
	return cmd, m[1]
}

// exited waits for cmd in the background: its status arrives on the
// channel when it ends.
func exited(cmd *exec.Cmd) <-chan syscall.WaitStatus {
	ch := make(chan syscall.WaitStatus, 1)
	go func() {
		cmd.Wait()
		ch <- cmd.ProcessState.Sys().(syscall.WaitStatus)
	}()
	return ch
}

// SIGTERM stops every command as Ctrl-C does (timeout, kill and CI runners
// send SIGTERM): the command's context ends and it finishes its way. A
// second signal ends the process at once, so a command still stopping, or
// stuck where no context reaches, cannot swallow every signal (check on a
// named pipe once outlived timeout 60 and kill by 25 minutes).
func TestSignalsEndCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin, cleanup, err := testbin.Build("shardtest-signal-test")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("one "+sig.String()+" stops serve", func(t *testing.T) {
			cmd, _ := startServe(t, bin)
			end := exited(cmd)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case ws := <-end:
				if ws.Signaled() || ws.ExitStatus() != 0 {
					t.Fatalf("serve ended with %v, want exit status 0 (stopped its way)", ws)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("serve still runs 10 s after %v", sig)
			}
		})
		t.Run("a second "+sig.String()+" ends serve while it stops", func(t *testing.T) {
			cmd, addr := startServe(t, bin)
			// A request whose header never ends holds serve's graceful
			// shutdown for up to its 5 s.
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte("GET / HTTP/1.1\r\n")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // serve has the connection
			end := exited(cmd)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case ws := <-end:
				t.Fatalf("serve ended (%v) at once: nothing held it, so a second signal is not tested", ws)
			case <-time.After(time.Second):
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case ws := <-end:
				if !ws.Signaled() || ws.Signal() != sig {
					t.Fatalf("serve ended with %v, want ended by the second %v", ws, sig)
				}
			case <-time.After(3 * time.Second):
				t.Fatalf("serve still runs 3 s after a second %v", sig)
			}
		})
	}
}

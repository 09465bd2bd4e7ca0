// Package netnstest gives tests a fresh, throwaway Linux network namespace,
// so they can install real packet filters without touching the host's.
//
// A namespace is held by a file descriptor; New creates one, with lo up so
// 127.0.0.1 works, and closes it when the test ends. Code that must itself
// run inside the namespace (creating sockets, or the nftables calls of the
// current namespace) runs through Do, on an OS thread that is switched into
// the namespace and then thrown away, never handed back to the scheduler.
//
// Creating a namespace needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN). Without
// it New fails the test with a clear message, unless SHARDTEST_NO_NETADMIN=1,
// in which case it skips the test: that is the project's opt-out, like
// SHARDTEST_NO_DOCKER=1.
package netnstest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// OptOutEnv is the variable that turns a missing privilege into a skip.
const OptOutEnv = "SHARDTEST_NO_NETADMIN"

// NS is a network namespace that lives until the end of the test that made
// it (and as long as a socket created in it stays open).
type NS struct {
	f *os.File
}

// New creates a network namespace with lo up, closed at the end of t.
func New(t testing.TB) *NS {
	t.Helper()
	var f *os.File
	err := onThrowawayThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare a new network namespace: %w", err)
		}
		if err := loUp(); err != nil {
			return err
		}
		var err error
		f, err = os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			return fmt.Errorf("open the new network namespace: %w", err)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			if os.Getenv(OptOutEnv) == "1" {
				t.Skipf("%s=1: skipping a test that needs a network namespace of its own (%v)", OptOutEnv, err)
			}
			t.Fatalf("%v: these tests install real nftables rules in a fresh network namespace and need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); set %s=1 to skip them", err, OptOutEnv)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return &NS{f: f}
}

// FD is the namespace's file descriptor, e.g. for nftables.WithNetNSFd. It
// is valid until the test ends.
func (ns *NS) FD() int { return int(ns.f.Fd()) }

// Do runs fn on an OS thread inside the namespace and returns its error.
// Sockets fn creates belong to the namespace, wherever they are used
// afterwards; but goroutines fn starts run on other threads, outside it.
// fn runs on another goroutine than the test's, so it must report failure
// through its error, not t.Fatal.
func (ns *NS) Do(fn func() error) error {
	return onThrowawayThread(func() error {
		if err := unix.Setns(ns.FD(), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter the network namespace: %w", err)
		}
		return fn()
	})
}

// onThrowawayThread runs fn on a goroutine locked to its OS thread and
// never unlocked, so the Go runtime ends the thread with the goroutine
// instead of reusing it with whatever namespace fn left it in.
func onThrowawayThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer func() {
			// A panic in fn would otherwise leave the caller waiting.
			if p := recover(); p != nil {
				done <- fmt.Errorf("panic in network namespace: %v", p)
			}
		}()
		done <- fn()
	}()
	return <-done
}

// loUp brings the loopback interface of the calling thread's namespace up:
// it starts down in a new namespace.
func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring lo up: socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: read flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: set flags: %w", err)
	}
	return nil
}

package bench

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// readUsage sees this process's own CPU time grow as it works, and its
// threads' context switches; a process that does not exist is an error.
func TestReadUsage(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system: readUsage reports errNoProc here")
	}
	before, err := readUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Work until the kernel's own account (getrusage) says 100 ms of CPU
	// were spent: on a busy machine wall time says nothing.
	start := rusageCPU(t)
	for rusageCPU(t) < start+100*time.Millisecond {
		runtime.Gosched()
	}
	after, err := readUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.cpu < before.cpu+80*time.Millisecond { // ticks of 10 ms
		t.Errorf("100 ms of CPU: /proc says %v -> %v", before.cpu, after.cpu)
	}
	if after.switches < before.switches || after.switches == 0 {
		t.Errorf("context switches %d -> %d", before.switches, after.switches)
	}
	if _, err := readUsage(1 << 30); err == nil {
		t.Error("a process that does not exist: no error")
	}
	c := per(procUsage{cpu: time.Second, switches: 10}, procUsage{cpu: 3 * time.Second, switches: 30}, 4)
	if c.CPU != 500*time.Millisecond || c.Switches != 5 {
		t.Errorf("per: %+v", c)
	}
}

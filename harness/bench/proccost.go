package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Cost is what requests cost one process, per request: its CPU time (user
// and system) and its threads' context switches (voluntary and not).
type Cost struct {
	CPU      time.Duration
	Switches float64
}

// procUsage is a process's CPU time and context switches so far, read
// from /proc (Linux).
type procUsage struct {
	cpu      time.Duration
	switches int64
}

// clockTicks is the unit of /proc/PID/stat's times (USER_HZ, 100 on every
// Linux architecture Go runs on).
const clockTicks = 100

// errNoProc: this system has no /proc to read a process's usage from.
var errNoProc = errors.New("no /proc")

// readUsage reads pid's usage from /proc.
func readUsage(pid int) (procUsage, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if errors.Is(err, os.ErrNotExist) {
		if _, serr := os.Stat("/proc/self/stat"); serr != nil {
			return procUsage{}, errNoProc
		}
	}
	if err != nil {
		return procUsage{}, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted here start after its closing one (utime is the 14th of the
	// line, so the 12th after it).
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if i < 0 || len(f) < 13 {
		return procUsage{}, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, data)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procUsage{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	u := procUsage{cpu: time.Duration(utime+stime) * time.Second / clockTicks}
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "status"))
	if err != nil {
		return procUsage{}, err
	}
	for _, t := range tasks {
		n, err := taskSwitches(t)
		if err != nil {
			continue // a thread that ended meanwhile
		}
		u.switches += n
	}
	return u, nil
}

// taskSwitches is a thread's voluntary and nonvoluntary context switches.
func taskSwitches(statusFile string) (int64, error) {
	f, err := os.Open(statusFile)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
			x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, err
			}
			n += x
		}
	}
	return n, sc.Err()
}

// per is the cost of n requests between two readings.
func per(before, after procUsage, n int) Cost {
	return Cost{CPU: (after.cpu - before.cpu) / time.Duration(n), Switches: float64(after.switches-before.switches) / float64(n)}
}

package docker

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Labels naming the harness process that owns a run's resources, so that
// `shardtest cleanup` removes only what runs whose harness is gone left
// behind, and never the cluster of another run still going on the same
// engine (another CI job's, on a shared one).
const (
	LabelOwnerHost  = "shardtest.owner.host"
	LabelOwnerBoot  = "shardtest.owner.boot"
	LabelOwnerPID   = "shardtest.owner.pid"
	LabelOwnerStart = "shardtest.owner.start"
)

// Owner is a harness process: its host, the host's boot, its pid and its
// start (in clock ticks after the boot, as /proc says): together they name
// one process even after its pid is reused.
type Owner struct {
	Host, Boot string
	PID        int
	Start      uint64
}

func (o Owner) String() string {
	return fmt.Sprintf("pid %d on %s", o.PID, o.Host)
}

// Labels are the owner's labels.
func (o Owner) Labels() map[string]string {
	return map[string]string{
		LabelOwnerHost: o.Host, LabelOwnerBoot: o.Boot,
		LabelOwnerPID: strconv.Itoa(o.PID), LabelOwnerStart: strconv.FormatUint(o.Start, 10),
	}
}

// OwnerOf reads the owner from a resource's labels; ok false when they do
// not name one (a resource of an older shardtest).
func OwnerOf(labels map[string]string) (o Owner, ok bool) {
	pid, err1 := strconv.Atoi(labels[LabelOwnerPID])
	start, err2 := strconv.ParseUint(labels[LabelOwnerStart], 10, 64)
	o = Owner{Host: labels[LabelOwnerHost], Boot: labels[LabelOwnerBoot], PID: pid, Start: start}
	return o, err1 == nil && err2 == nil && o.Host != "" && o.Boot != "" && pid > 0
}

// Host is what /proc says of this host: its name and boot, and the start
// of any process on it.
type Host struct {
	Name, Boot string
	// StartOf is pid's start, ok false when there is no such process.
	StartOf func(pid int) (start uint64, ok bool)
}

// ThisHost reads /proc. On a system without it (not Linux) the harness
// cannot tell its owners apart: ok is false.
func ThisHost() (Host, bool) {
	name, err := os.Hostname()
	boot, err2 := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || err2 != nil {
		return Host{}, false
	}
	return Host{Name: name, Boot: strings.TrimSpace(string(boot)), StartOf: procStart}, true
}

// Self is this process as an owner.
func (h Host) Self() (Owner, bool) {
	pid := os.Getpid()
	start, ok := h.StartOf(pid)
	return Owner{Host: h.Name, Boot: h.Boot, PID: pid, Start: start}, ok
}

// Liveness is what the host can tell of an owner.
type Liveness int

const (
	// Alive: the owner runs on this host.
	Alive Liveness = iota
	// Gone: the owner ran on this host and has ended (its pid is free, or
	// another process's, or the host rebooted since).
	Gone
	// Elsewhere: the owner runs, or ran, on another host: this one cannot
	// tell.
	Elsewhere
)

// Liveness tells whether o is still running.
func (h Host) Liveness(o Owner) Liveness {
	switch {
	case o.Host != h.Name:
		return Elsewhere
	case o.Boot != h.Boot:
		return Gone
	}
	start, ok := h.StartOf(o.PID)
	if !ok || start != o.Start {
		return Gone
	}
	return Alive
}

// procStart reads a process's start time (field 22 of /proc/PID/stat, after
// the command name, which may itself hold spaces and parentheses).
func procStart(pid int) (uint64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is field 3 (the state): the start is field 22. A zombie
	// has ended; only its parent has not reaped it yet.
	if len(fields) < 20 || fields[0] == "Z" || fields[0] == "X" {
		return 0, false
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	return start, err == nil
}

// Selection is what a cleanup removes.
type Selection struct {
	// Run: only this run's resources, whoever owns them.
	Run string
	// All: every run's, whoever owns them.
	All bool
}

// Keeps says why a cleanup with sel leaves r in place ("": it removes it).
// Without Run or All it removes only what an owner that has ended left:
// not a run whose harness still runs, nor one whose owner it cannot check
// (another host's, or unrecorded).
func (h Host) Keeps(r Resource, sel Selection) string {
	switch {
	case sel.Run != "":
		if r.Run != sel.Run {
			return "of another run"
		}
		return ""
	case sel.All:
		return ""
	case !r.HasOwner:
		return "no owner recorded (made by an older shardtest): --run or --all removes it"
	}
	switch h.Liveness(r.Owner) {
	case Alive:
		return "its harness (" + r.Owner.String() + ") is still running"
	case Elsewhere:
		return "its harness ran on " + r.Owner.Host + ", which cannot be checked from here: --run or --all removes it"
	}
	return ""
}

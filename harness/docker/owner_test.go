package docker

import (
	"os"
	"os/exec"
	"testing"
)

func TestOwnerLabelsRoundTrip(t *testing.T) {
	o := Owner{Host: "ci-7", Boot: "b1", PID: 4242, Start: 987654}
	got, ok := OwnerOf(o.Labels())
	if !ok || got != o {
		t.Fatalf("%+v %v, want %+v", got, ok, o)
	}
	for name, labels := range map[string]map[string]string{
		"none":      {LabelManaged: "true"},
		"bad pid":   {LabelOwnerHost: "h", LabelOwnerBoot: "b", LabelOwnerPID: "x", LabelOwnerStart: "1"},
		"no start":  {LabelOwnerHost: "h", LabelOwnerBoot: "b", LabelOwnerPID: "1"},
		"no host":   {LabelOwnerBoot: "b", LabelOwnerPID: "1", LabelOwnerStart: "1"},
		"zero pid":  {LabelOwnerHost: "h", LabelOwnerBoot: "b", LabelOwnerPID: "0", LabelOwnerStart: "1"},
		"no boot":   {LabelOwnerHost: "h", LabelOwnerPID: "1", LabelOwnerStart: "1"},
		"neg start": {LabelOwnerHost: "h", LabelOwnerBoot: "b", LabelOwnerPID: "1", LabelOwnerStart: "-1"},
	} {
		if _, ok := OwnerOf(labels); ok {
			t.Errorf("%s: read as an owner", name)
		}
	}
}

// What a cleanup keeps: a run whose harness still runs here, one it cannot
// check (another host, or no owner recorded) — unless --run names it or
// --all; what an ended harness left goes.
func TestCleanupKeeps(t *testing.T) {
	host := Host{Name: "h1", Boot: "boot2", StartOf: func(pid int) (uint64, bool) {
		switch pid {
		case 100:
			return 5000, true
		case 200: // the pid was reused by a later process
			return 9999, true
		}
		return 0, false
	}}
	res := func(run string, o *Owner) Resource {
		r := Resource{Kind: "network", Name: run, Run: run}
		if o != nil {
			r.Owner, r.HasOwner = *o, true
		}
		return r
	}
	alive := &Owner{Host: "h1", Boot: "boot2", PID: 100, Start: 5000}
	ended := &Owner{Host: "h1", Boot: "boot2", PID: 300, Start: 1}
	reused := &Owner{Host: "h1", Boot: "boot2", PID: 200, Start: 7000}
	rebooted := &Owner{Host: "h1", Boot: "boot1", PID: 100, Start: 5000}
	other := &Owner{Host: "h2", Boot: "boot9", PID: 100, Start: 5000}
	for _, tc := range []struct {
		name string
		r    Resource
		sel  Selection
		kept bool
	}{
		{"alive", res("a", alive), Selection{}, true},
		{"ended", res("b", ended), Selection{}, false},
		{"pid reused", res("c", reused), Selection{}, false},
		{"rebooted since", res("d", rebooted), Selection{}, false},
		{"another host", res("e", other), Selection{}, true},
		{"no owner", res("f", nil), Selection{}, true},
		{"alive, --run it", res("a", alive), Selection{Run: "a"}, false},
		{"another host, --run it", res("e", other), Selection{Run: "e"}, false},
		{"alive, --run another", res("a", alive), Selection{Run: "b"}, true},
		{"alive, --all", res("a", alive), Selection{All: true}, false},
		{"no owner, --all", res("f", nil), Selection{All: true}, false},
	} {
		why := host.Keeps(tc.r, tc.sel)
		if (why != "") != tc.kept {
			t.Errorf("%s: kept %v (%q), want %v", tc.name, why != "", why, tc.kept)
		}
	}
}

// This process and a running child are alive by /proc; the child, killed
// and reaped, is gone.
func TestThisHost(t *testing.T) {
	h, ok := ThisHost()
	if !ok {
		t.Skip("no /proc here")
	}
	self, ok := h.Self()
	if !ok || self.PID != os.Getpid() || self.Start == 0 {
		t.Fatalf("self %+v %v", self, ok)
	}
	if h.Liveness(self) != Alive {
		t.Errorf("this process is not alive by its own labels")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, ok := procStart(cmd.Process.Pid)
	if !ok {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("no start time for a running child")
	}
	child := Owner{Host: h.Name, Boot: h.Boot, PID: cmd.Process.Pid, Start: start}
	if l := h.Liveness(child); l != Alive {
		t.Errorf("a running child is %v", l)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if l := h.Liveness(child); l != Gone {
		t.Errorf("a killed child is %v", l)
	}
}

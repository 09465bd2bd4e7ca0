package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/harness/conform"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/internal/testbin"
)

// Bad probe flags end `shardtest conform` with status 3 and a message
// that says what is wrong, before any folder or cluster exists.
func TestConformRefusesBadProbeFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--probes", "bad-bodies"}, "--probes needs --probe"},
		{[]string{"--probe", "--probes", "bad-bodies,nope"}, `no probe "nope"`},
		{[]string{"--probe", "--nodes", "0"}, "--nodes 0"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			results := t.TempDir()
			out, code := runCmd(t, append([]string{"conform", "--runtime", "local", "--results", results}, tt.args...)...)
			if code != exitCannotRun || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, want %d saying %q:\n%s", code, exitCannotRun, tt.want, out)
			}
			if left, _ := os.ReadDir(results); len(left) > 0 {
				t.Fatalf("a refused command left %v in the results folder", left)
			}
		})
	}
}

// `shardtest conform --probe --runtime local` reaches the reference
// node's peer port as a member would (the local runtime hands over the
// run's secret): a forged hand-over is refused and ids keep coming; it
// exits 0 and stores probe.json and junit.xml.
func TestConformProbeLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real nodes")
	}
	results := t.TempDir()
	cmd := exec.Command(testbin.ForTest(t, "shardtest-conform-probe-test"), "conform", "--probe", "--runtime", "local", "--base-port", "16400", "--results", results,
		"--probes", "internal-routes-404,forged-hand-over")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"PASS baseline", "PASS internal-routes-404", "PASS forged-hand-over", "3 passed, 0 failed, 0 skipped"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(results, "conform", "*"))
	if len(dirs) != 1 {
		t.Fatalf("result folders %v, want one", dirs)
	}
	b, err := os.ReadFile(filepath.Join(dirs[0], "probe.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep conform.ProbeReport
	if err := json.Unmarshal(b, &rep); err != nil || !rep.Reference || len(rep.Results) != 3 {
		t.Fatalf("probe.json: %v %+v", err, rep)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], report.JUnitFile)); err != nil {
		t.Fatal(err)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench route refuses what it cannot measure with, before it starts
// anything (exit status 3).
func TestBenchRouteRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--repeat", "0"}, "--repeat 0"},
		{[]string{"--node-binary", filepath.Join(dir, "missing")}, "not an executable file"},
		{[]string{"--node-binary", notExec}, "not an executable file"},
		{[]string{"--node-binary", dir}, "not an executable file"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := newRootCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{"bench", "route"}, tt.args...))
			err := cmd.ExecuteContext(context.Background())
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitCannotRun || !strings.Contains(err.Error()+out.String(), tt.want) {
				t.Fatalf("err = %v (output %q), want exit status 3 mentioning %q", err, out.String(), tt.want)
			}
		})
	}
}

// bench sim times simulated runs and ends with the speed-up; it refuses an
// unknown workload before it runs anything.
func TestBenchSim(t *testing.T) {
	out, code := runCmd(t, "bench", "sim", "--repeat", "1", "--nodes", "3,5", "--time-limit", "5s", "--results", t.TempDir())
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 4 || !strings.HasPrefix(lines[len(lines)-1], "speed-up (virtual / wall time), 3 nodes") || !strings.HasSuffix(lines[len(lines)-1], "×") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	if out, code := runCmd(t, "bench", "sim", "--workload", "nope", "--repeat", "1"); code != exitCannotRun || !strings.Contains(out, "register") {
		t.Fatalf("an unknown workload: exit %d, want %d naming the workloads; output:\n%s", code, exitCannotRun, out)
	}
}

// bench check refuses a bad --jobs or --repeat before it generates
// anything (exit status 3).
func TestBenchCheckRefusesBadInput(t *testing.T) {
	for _, tt := range []struct{ flag, want string }{{"--jobs=-1", "--jobs -1"}, {"--repeat=0", "--repeat 0"}} {
		dir := filepath.Join(t.TempDir(), "run")
		out, code := runCmd(t, "bench", "check", "--ops", "100", "--dir", dir, tt.flag)
		if code != exitCannotRun || !strings.Contains(out, tt.want) {
			t.Fatalf("%s: exit %d, want %d mentioning %q; output:\n%s", tt.flag, code, exitCannotRun, tt.want, out)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Fatalf("%s: generated %s", tt.flag, dir)
		}
	}
}

// bench cluster, load and entities refuse what they cannot measure with
// before they start a cluster (exit status 3).
func TestBenchScaleRefusesBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "cluster", "--nodes", "1"}, "--nodes 1"},
		{[]string{"bench", "cluster", "--repeat", "0"}, "--repeat 0"},
		{[]string{"bench", "cluster", "--idle", "10ms"}, "--idle 10ms"},
		{[]string{"bench", "load", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"bench", "load", "--window", "1ms"}, "--window 1ms"},
		{[]string{"bench", "entities", "--passivate-after", "1m", "--rest", "2m"}, "must exceed --rest"},
		{[]string{"bench", "entities", "--entities", "0"}, "--entities 0"},
	} {
		out, code := runCmd(t, tt.args...)
		if code != exitCannotRun || !strings.Contains(out, tt.want) {
			t.Errorf("%v: exit %d, want %d mentioning %q; output:\n%s", tt.args, code, exitCannotRun, tt.want, out)
		}
	}
}

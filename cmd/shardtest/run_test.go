package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/checker"

	"github.com/shardtest/shardtest/internal/testbin"
)

// Bad flags and a missing Docker engine end `shardtest run` with status 3
// and a message that says what is wrong, before anything is started.
func TestRunRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	sched := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := sched("good.json", `{"format":"shardtest-schedule","steps":[{"at":"2s","fault":"kill:one"},{"at":"5s","fault":"kill:one","heal":true}]}`)
	late := sched("late.json", `{"format":"shardtest-schedule","steps":[{"at":"2s","fault":"kill:one"},{"at":"50s","fault":"kill:one","heal":true}]}`)
	family := sched("family.json", `{"format":"shardtest-schedule","steps":[{"at":"2s","fault":"kill"}]}`)
	unknown := sched("unknown.json", `{"format":"shardtest-schedule","steps":[{"at":"2s","fault":"kill:everything"}]}`)
	garbled := sched("garbled.json", `{"format":"shardtest-schedule","steps":[{"at":"2 s","fault":"kill:one"}]}`)
	// Another run holds the reservation port (base+100) of this range.
	reserved := strconv.Itoa(testbin.TakePort(t) - 100)
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--schedule", filepath.Join(dir, "none.json")}, nil, "--schedule: open"},
		{[]string{"--schedule", garbled}, nil, `step 0: at "2 s"`},
		{[]string{"--schedule", good, "--nemesis", "kill"}, nil, "--schedule and --nemesis"},
		{[]string{"--schedule", good, "--scenario", "coordinator-crash"}, nil, "--schedule and --scenario"},
		{[]string{"--schedule", late, "--time-limit", "10s"}, nil, "outside the main phase"},
		{[]string{"--schedule", family}, nil, "name one fault in full"},
		{[]string{"--schedule", unknown}, nil, "kill:everything"},
		{[]string{"--nodes", "0"}, nil, "--nodes 0"},
		{[]string{"--concurrency", "0"}, nil, "--concurrency 0"},
		{[]string{"--time-limit", "0s"}, nil, "--time-limit"},
		{[]string{"--workload", "bank"}, nil, `unknown workload "bank"`},
		{[]string{"--runtime", "vm"}, nil, `--runtime "vm"`},
		{[]string{"--skew", "0.5"}, nil, "--skew"},
		{[]string{"--test-count", "0"}, nil, "--test-count 0"},
		{[]string{"--runtime", "local", "--image", "x"}, nil, "--image are for --runtime docker"},
		{[]string{"--runtime", "local", "--keep"}, nil, "--keep needs --runtime docker"},
		{[]string{"--time-limit", "1s"}, map[string]string{"DOCKER_HOST": "unix:///nonexistent.sock"}, "no Docker engine answered"},
		{[]string{"--scenario", "bogus"}, nil, `unknown scenario "bogus"`},
		{[]string{"--scenario", "coordinator-crash", "--workload", "idgen"}, nil, "--workload: scenario coordinator-crash sets it"},
		{[]string{"--scenario", "coordinator-crash", "--nemesis", "kill"}, nil, "--nemesis: scenario coordinator-crash sets it"},
		{[]string{"--scenario", "journal-cut", "--runtime", "local"}, nil, "needs --runtime docker or sim"},
		{[]string{"--runtime", "local", "--base-port", reserved}, nil, "held by another run"},
		{[]string{"--binary", good}, nil, "is not a static Linux executable"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cmd := newRootCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			results := t.TempDir()
			cmd.SetArgs(append([]string{"run", "--results", results}, tt.args...))
			err := cmd.ExecuteContext(context.Background())
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitCannotRun || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want exit status 3 mentioning %q", err, tt.want)
			}
			// Refused before any side effect: nothing in the results store.
			if left, _ := os.ReadDir(results); len(left) > 0 {
				t.Errorf("refused, but wrote %s into the results store", left[0].Name())
			}
		})
	}
}

func TestTestAllRefusesBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "bogus"}, `unknown scenario "bogus"`},
		{[]string{"--test-count", "0"}, "--test-count 0"},
		{[]string{"--scenario", "journal-cut", "--smoke"}, "no scenario selected"},
		{[]string{"--scenario", "clock-storm", "--with-bugs"}, "names a deliberate bug"},
		{[]string{"--scenario", "coordinator-crash", "--runtime", "vm"}, `--runtime "vm"`},
		{[]string{"--runtime", "local", "--image", "theirs:1"}, "--image are for --runtime docker"},
		{[]string{"--with-bugs", "--image", "theirs:1"}, "not with --image"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := newRootCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{"test-all", "--results", t.TempDir()}, tt.args...))
			err := cmd.ExecuteContext(context.Background())
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitCannotRun || !strings.Contains(err.Error()+out.String(), tt.want) {
				t.Fatalf("err = %v (output %q), want exit status 3 mentioning %q", err, out.String(), tt.want)
			}
		})
	}
}

// A run that cannot start still has its testcase in the suite's JUnit
// file, with the scenario's options as properties, and the suite exits 3.
func TestTestAllReportsARunThatCannotStart(t *testing.T) {
	results := t.TempDir()
	t.Setenv("DOCKER_HOST", "unix:///nonexistent.sock")
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"test-all", "--results", results, "--scenario", "passivation-churn", "--runtime", "docker", "--binary", "/nonexistent"})
	err := cmd.ExecuteContext(context.Background())
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitCannotRun || !strings.Contains(err.Error(), "could not start") {
		t.Fatalf("err = %v (output %q), want exit status 3: a run could not start", err, out.String())
	}
	files, _ := filepath.Glob(filepath.Join(results, "test-all", "*", "junit.xml"))
	if len(files) != 1 {
		t.Fatalf("junit files %v, want 1", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<property name="scenario" value="passivation-churn">`,
		`<property name="seed" value="1">`,
		`<testcase name="run" classname="shardtest.passivation-churn seed 1">`,
		`could not run: `,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("junit.xml lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), `value=""`) {
		t.Errorf("junit.xml has empty properties:\n%s", b)
	}
}

// Usage errors exit 3 ("could not run"), never 1 ("invalid": a bug found).
func TestUsageErrorsCannotRun(t *testing.T) {
	// The commands run two folders below the test's temporary one, so
	// that what they write by default (results/...), and even a refusal
	// that regressed (--name ../../escape once wrote outside --results:
	// this test's run of it landed in the source tree, cmd/escape), stays
	// under t.TempDir().
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, args := range [][]string{
		{"--bogus"}, {"nosuchcmd"}, {"run", "--time-limit", "abc"}, {"check"}, {"cluster", "--nodes", "0"},
		{"run", "--name", "../../escape", "--runtime", "local"}, {"test-all", "--test-count", "0"},
	} {
		root := newRootCmd()
		root.SetArgs(args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		cmd, err := root.ExecuteContextC(context.Background())
		if err == nil {
			t.Errorf("%v: no error", args)
			continue
		}
		if code := exitCode(cmd, err); code != exitCannotRun {
			t.Errorf("%v: exit %d (%v), want %d", args, code, err, exitCannotRun)
		}
	}
}

// The terminal summary: a line per checker, then, for those that did not
// pass, when, the smallest counterexample and three lines of evidence.
func TestPrintChecks(t *testing.T) {
	var b bytes.Buffer
	printChecks(&b, []checker.Result{
		{Checker: "single-instance", Verdict: checker.Valid, Summary: "fine", Evidence: []string{"counted"}},
		{Checker: "linearizable", Verdict: checker.Invalid, Summary: "2 entities not linearizable",
			Evidence:  []string{"e1", "e2", "e3", "e4", "e5"},
			Detection: &checker.Detection{Fault: "kill:one", FaultAt: 1e9, At: 3e9, After: 2e9},
			Smallest:  &checker.Counterexample{What: "register/a", Ops: 4, File: "linearizability/register_a.html"}},
	})
	want := "  single-instance valid    fine\n" +
		"  linearizable   invalid  2 entities not linearizable\n" +
		"linearizable (invalid):\n" +
		"    first violation proven at 3s, 2s after kill:one took effect (at 1s)\n" +
		"    smallest counterexample: register/a (4 operations): linearizability/register_a.html\n" +
		"    e1\n    e2\n    e3\n    ... 2 more lines in the report\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

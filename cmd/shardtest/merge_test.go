package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/harness/suite"
)

// runCmd runs shardtest with args and returns its output and exit status.
func runCmd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	c, err := cmd.ExecuteC()
	if err != nil {
		return out.String() + err.Error(), exitCode(c, err)
	}
	return out.String(), 0
}

// suiteDirIn is the one suite folder test-all wrote under results.
func suiteDirIn(t *testing.T, results string) string {
	t.Helper()
	dirs, _ := filepath.Glob(filepath.Join(results, "test-all", "*"))
	if len(dirs) != 1 {
		t.Fatalf("suite folders under %s: %v", results, dirs)
	}
	return dirs[0]
}

// junitCases is the set of a JUnit file's test cases, as suite/case.
func junitCases(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name string `xml:"name,attr"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &root); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range root.Suites {
		for _, c := range s.Cases {
			out = append(out, s.Name+"/"+c.Name)
		}
	}
	slices.Sort(out)
	return out
}

// The shard/merge round trip: the merged JUnit of --shard 1/2 and 2/2 holds
// the unsplit suite's test cases, each once. (The Docker-only scenarios on
// the local runtime are skipped runs: the suite's bookkeeping without
// clusters.)
func TestShardMergeRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	base := []string{"test-all", "--runtime", "local", "--scenario", "packet-loss,journal-cut,journal-cut-join", "--test-count", "3"}
	whole := filepath.Join(tmp, "whole")
	if out, code := runCmd(t, append(base, "--results", whole)...); code != 0 {
		t.Fatalf("unsplit suite: exit %d\n%s", code, out)
	}
	var parts []string
	for _, k := range []string{"1/2", "2/2"} {
		res := filepath.Join(tmp, strings.ReplaceAll(k, "/", "of"))
		// The first part also runs its runs two at a time: the summary
		// keeps the suite's order.
		args := slices.Concat(base, []string{"--results", res, "--shard", k})
		if k == "1/2" {
			args = append(args, "--parallel", "2", "--base-port", "23400")
		}
		out, code := runCmd(t, args...)
		if code != 0 || !strings.Contains(out, "shard "+k) {
			t.Fatalf("shard %s: exit %d\n%s", k, code, out)
		}
		parts = append(parts, suiteDirIn(t, res))
	}
	a, b := junitCases(t, filepath.Join(parts[0], "junit.xml")), junitCases(t, filepath.Join(parts[1], "junit.xml"))
	if len(a) == 0 || len(b) == 0 {
		t.Fatalf("a part is empty: %d and %d cases", len(a), len(b))
	}
	merged := filepath.Join(tmp, "merged")
	if out, code := runCmd(t, "merge", "--out", merged, parts[0], parts[1]); code != 0 {
		t.Fatalf("merge: exit %d\n%s", code, out)
	}
	got, want := junitCases(t, filepath.Join(merged, "junit.xml")), junitCases(t, filepath.Join(suiteDirIn(t, whole), "junit.xml"))
	if !slices.Equal(got, want) {
		t.Errorf("merged cases\n%v\nwant the unsplit suite's\n%v", got, want)
	}
	for _, f := range []string{"summary.md", "summary.json", "index.html"} {
		if _, err := os.Stat(filepath.Join(merged, f)); err != nil {
			t.Error(err)
		}
	}
	s, err := suite.ReadSummary(filepath.Join(merged, "summary.json"))
	if err != nil || len(s.Runs) != 9 || s.ExitStatus != exitValid {
		t.Errorf("merged summary: %v, %d runs, exit %d", err, len(s.Runs), s.ExitStatus)
	}

	// The worst part's status wins; what cannot be merged is refused
	// before anything is written.
	bad := filepath.Join(tmp, "bad")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bad, "summary.json"), []byte(`{"outcome":"invalid","exit_status":1,"runs":[{"scenario":"x","seed":1,"verdict":"invalid"}]}`), 0o644)
	os.WriteFile(filepath.Join(bad, "junit.xml"), []byte(`<testsuites><testsuite name="x seed 1" tests="1" failures="1" time="1.000"><testcase name="linearizable"><failure message="m"></failure></testcase></testsuite></testsuites>`), 0o644)
	if out, code := runCmd(t, "merge", "--out", filepath.Join(tmp, "m2"), parts[0], bad); code != exitInvalid {
		t.Errorf("merge with an invalid part: exit %d, want %d\n%s", code, exitInvalid, out)
	}
	bugs := filepath.Join(tmp, "bugs")
	os.MkdirAll(bugs, 0o755)
	os.WriteFile(filepath.Join(bugs, "summary.json"), []byte(`{"outcome":"caught","exit_status":0,"with_bugs":true,"runs":[]}`), 0o644)
	os.WriteFile(filepath.Join(bugs, "junit.xml"), []byte(`<testsuites></testsuites>`), 0o644)
	for name, args := range map[string][]string{
		"a missing part":         {"merge", "--out", filepath.Join(tmp, "m3"), parts[0], filepath.Join(tmp, "nope")},
		"with and without bugs":  {"merge", "--out", filepath.Join(tmp, "m4"), parts[0], bugs},
		"an --out that exists":   {"merge", "--out", merged, parts[0]},
		"a bad --shard":          append(base, "--results", filepath.Join(tmp, "m5"), "--shard", "3/2"),
		"a --timings not a file": append(base, "--results", filepath.Join(tmp, "m6"), "--timings", filepath.Join(tmp, "nope.json")),
	} {
		if out, code := runCmd(t, args...); code != exitCannotRun {
			t.Errorf("%s: exit %d, want %d\n%s", name, code, exitCannotRun, out)
		}
	}
	for _, m := range []string{"m3", "m4", "m5", "m6"} {
		if _, err := os.Stat(filepath.Join(tmp, m)); err == nil {
			t.Errorf("%s: written though refused", m)
		}
	}
}

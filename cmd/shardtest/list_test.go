package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/checker"
)

func TestListCmd(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    []string
		not     []string
		wantErr string
	}{
		{args: nil, want: []string{"Workloads:", "register", "Nemeses:", "partition:halves", "Checkers:"}},
		{args: []string{"workloads"}, want: []string{"register", "sharding"}, not: []string{"Nemeses:"}},
		{args: []string{"nemeses"}, want: []string{"Nemeses:", "kill:coordinator", "clock:strobe", "member:rolling-restart", "kill:journal"}, not: []string{"Workloads:"}},
		{args: []string{"checkers"}, want: []string{"Checkers", "linearizable", "append-log", "unique-ids"}},
		{args: []string{"scenarios"}, want: []string{"Scenarios:", "coordinator-crash [smoke]", "journal-cut [docker or sim]", "oldest-three-crash", "catches:"}, not: []string{"Workloads:"}},
		{args: []string{"bogus"}, wantErr: "unknown kind"},
		{args: []string{"workloads", "checkers"}, wantErr: "accepts at most 1 arg"},
	} {
		var out bytes.Buffer
		cmd := newRootCmd()
		cmd.SetArgs(append([]string{"list"}, tc.args...))
		cmd.SetOut(&out)
		err := cmd.ExecuteContext(context.Background())
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("list %v: err = %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("list %v: %v", tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("list %v lacks %q:\n%s", tc.args, w, out.String())
			}
		}
		for _, n := range tc.not {
			if strings.Contains(out.String(), n) {
				t.Errorf("list %v has %q", tc.args, n)
			}
		}
	}
}

// list checkers lists every checker of the registry with the runs it
// judges, and every one is reachable: a scenario-only checker names the
// scenarios that add it.
func TestListShowsEveryChecker(t *testing.T) {
	var out bytes.Buffer
	if err := writeList(&out, []string{"checkers"}); err != nil {
		t.Fatal(err)
	}
	for _, e := range checker.Registry() {
		if !strings.Contains(out.String(), "  "+e.Name+" ") {
			t.Errorf("list checkers lacks %s:\n%s", e.Name, out.String())
		}
		if runs := checkerRuns(e); runs == "" || strings.HasSuffix(runs, "added by scenarios: ") || strings.Contains(runs, "added by scenarios: ;") {
			t.Errorf("%s: judges no run (%q)", e.Name, runs)
		}
	}
}

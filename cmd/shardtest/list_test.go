package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
		{args: []string{"scenarios"}, want: []string{"Scenarios:", "coordinator-crash [smoke]", "journal-cut [docker only]", "oldest-three-crash", "catches:"}, not: []string{"Workloads:"}},
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

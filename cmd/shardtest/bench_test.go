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

package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// Bad flags and a missing Docker engine end `shardtest run` with status 3
// and a message that says what is wrong, before anything is started.
func TestRunRefusesBadInput(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
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
		{[]string{"--scenario", "journal-cut", "--runtime", "local"}, nil, "needs --runtime docker"},
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
			cmd.SetArgs(append([]string{"run", "--results", t.TempDir()}, tt.args...))
			err := cmd.ExecuteContext(context.Background())
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitCannotRun || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want exit status 3 mentioning %q", err, tt.want)
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

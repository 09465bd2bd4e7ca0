package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Every command that reads a stored run or suite refuses a named pipe
// where a file should be, naming it, with exit 3, at once: opening one
// blocks until a writer comes, which never does (check hung for 25
// minutes, and no signal ended it; check's own cases are
// TestCheckRefusesUntrustedFolder's).
func TestStoredReadersRefuseNamedPipes(t *testing.T) {
	testJSON := `{"name":"register","runtime":"local","workload":"register","nodes":3,"concurrency":6,"time_limit_ns":30000000000,"op_timeout_ns":5000000000,"entities":100,"per_entity":3,"seed":1}`
	summary := `{"outcome":"valid","exit_status":0,"runs":[]}`
	tests := []struct {
		name  string
		files map[string]string // the folder's regular files
		pipe  string            // the named pipe in it
		args  func(dir, results string) []string
	}{
		{"shrink: test.json", nil, "test.json",
			func(dir, results string) []string { return []string{"shrink", "--results", results, dir} }},
		{"shrink: results.json", map[string]string{"test.json": testJSON}, "results.json",
			func(dir, results string) []string { return []string{"shrink", "--results", results, dir} }},
		{"merge: summary.json", nil, "summary.json",
			func(dir, results string) []string { return []string{"merge", "--results", results, dir} }},
		{"merge: junit.xml", map[string]string{"summary.json": summary}, "junit.xml",
			func(dir, results string) []string { return []string{"merge", "--results", results, dir} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "stored")
			for name, body := range tt.files {
				writeFile(t, filepath.Join(dir, name), body)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			pipe := filepath.Join(dir, tt.pipe)
			mkfifo(t, pipe)
			results := t.TempDir()
			type answer struct {
				out  string
				code int
			}
			done := make(chan answer, 1)
			go func() {
				out, code := runCmd(t, tt.args(dir, results)...)
				done <- answer{out, code}
			}()
			select {
			case a := <-done:
				if a.code != exitCannotRun || !strings.Contains(a.out, pipe) {
					t.Errorf("exit %d, want %d and the pipe named:\n%s", a.code, exitCannotRun, a.out)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the command hangs on the named pipe")
			}
			if entries, _ := os.ReadDir(results); len(entries) != 0 {
				t.Errorf("a refused command wrote into the results folder: %v", entries)
			}
		})
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/shardtest/shardtest/internal/testbin"
)

// shrink refuses, before anything runs, what it cannot shrink.
func TestShrinkRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(run, name, body string) string {
		d := filepath.Join(dir, run)
		os.MkdirAll(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	testJSON := `{"name":"register","runtime":"local","workload":"register","nodes":3,"concurrency":6,"time_limit_ns":30000000000,"op_timeout_ns":5000000000,"entities":100,"per_entity":3,"seed":1}`
	valid := write("valid", "test.json", testJSON)
	write("valid", "results.json", `{"verdict":"valid","checks":[{"checker":"linearizable","verdict":"valid"}]}`)
	invalid := write("invalid", "test.json", testJSON)
	write("invalid", "results.json", `{"verdict":"invalid","checks":[{"checker":"linearizable","verdict":"invalid"}]}`)
	noResults := write("incomplete", "test.json", testJSON)
	garbled := write("garbled", "test.json", `{"name":`)
	results := t.TempDir()
	takenPort := fmt.Sprint(testbin.TakePort(t))
	for name, args := range map[string][]string{
		"a taken base port":   {"shrink", "--results", results, "--base-port", takenPort, invalid},
		"a valid run":         {"shrink", "--results", results, valid},
		"no results.json":     {"shrink", "--results", results, noResults},
		"a garbled test.json": {"shrink", "--results", results, garbled},
		"no run folder":       {"shrink", "--results", results, filepath.Join(dir, "none")},
		"need above tries":    {"shrink", "--results", results, "--tries", "2", "--need", "3", invalid},
		"no tries":            {"shrink", "--results", results, "--tries", "0", invalid},
		"an unknown checker":  {"shrink", "--results", results, "--checker", "no-such", invalid},
		"another's checker":   {"shrink", "--results", results, "--checker", "unique-ids", invalid},
	} {
		if out, code := runCmd(t, args...); code != exitCannotRun {
			t.Errorf("%s: exit %d, want %d\n%s", name, code, exitCannotRun, out)
		}
	}
	if _, err := os.Stat(filepath.Join(results, "shrink")); err == nil {
		t.Error("a refused shrink wrote its folder")
	}
}

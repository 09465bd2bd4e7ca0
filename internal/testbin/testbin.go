// Package testbin builds the shardtest binary once for tests that start
// real nodes as child processes or containers (a test binary is not one).
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build builds a static shardtest into a fresh temporary directory and
// returns its path and a function that removes it.
func Build(name string) (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", name)
	if err != nil {
		return "", nil, err
	}
	path = filepath.Join(dir, "shardtest")
	build := exec.Command("go", "build", "-trimpath", "-o", path, "github.com/shardtest/shardtest/cmd/shardtest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build shardtest: %w\n%s", err, out)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// Main is a test package's TestMain for tests that need the binary: it
// builds it into *path, runs the tests, removes it and exits with their
// status.
func Main(m *testing.M, name string, path *string) {
	p, cleanup, err := Build(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*path = p
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// ForTest builds shardtest for test t (which fails if it cannot) and
// removes it when t ends.
func ForTest(t testing.TB, name string) string {
	t.Helper()
	path, cleanup, err := Build(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return path
}

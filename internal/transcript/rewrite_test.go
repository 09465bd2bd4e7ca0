package transcript

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRewriteKeepsComments: a rewrite replaces only the wanted lines.
func TestRewriteKeepsComments(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.txt")
	in := "# a comment\n\na\n----\nold 1\nold 2\n\n# between\nb\n----\n"
	if err := os.WriteFile(file, []byte(in), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := rewrite(file, blocks, [][]string{{"new"}, {"x", "y"}}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(file)
	want := "# a comment\n\na\n----\nnew\n\n# between\nb\n----\nx\ny\n"
	if string(got) != want {
		t.Fatalf("got:\n%q\nwant:\n%q", got, want)
	}
}

package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// Write never writes outside its folder, whatever the folder holds: a link
// at the name is replaced, not written through; a folder on the way that
// links out is refused. Both were how shardtest check wrote a stored run's
// availability.svg and linearizability pages wherever its links pointed.
func TestWriteStaysInside(t *testing.T) {
	tests := []struct {
		name  string
		file  string                              // written, relative to the folder
		setup func(t *testing.T, dir, out string) // out: a folder outside
		ok    bool
	}{
		{"plain", "a.svg", func(*testing.T, string, string) {}, true},
		{"new subfolder", "linearizability/e.html", func(*testing.T, string, string) {}, true},
		{"name links to a file outside", "a.svg", func(t *testing.T, dir, out string) {
			symlink(t, filepath.Join(out, "victim"), filepath.Join(dir, "a.svg"))
		}, true},
		{"name in a subfolder links outside", "linearizability/e.html", func(t *testing.T, dir, out string) {
			mkdir(t, filepath.Join(dir, "linearizability"))
			symlink(t, filepath.Join(out, "victim"), filepath.Join(dir, "linearizability", "e.html"))
		}, true},
		{"subfolder links outside", "linearizability/e.html", func(t *testing.T, dir, out string) {
			symlink(t, out, filepath.Join(dir, "linearizability"))
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, out := t.TempDir(), t.TempDir()
			victim := filepath.Join(out, "victim")
			if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, dir, out)
			err := Write(dir, tt.file, []byte("new"))
			if tt.ok != (err == nil) {
				t.Fatalf("err %v, want ok %v", err, tt.ok)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "untouched" {
				t.Errorf("the file outside: %q, %v", b, err)
			}
			entries, _ := os.ReadDir(out)
			if len(entries) != 1 {
				t.Errorf("%d entries outside, want only the victim", len(entries))
			}
			if !tt.ok {
				return
			}
			path := filepath.Join(dir, tt.file)
			st, err := os.Lstat(path)
			if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
				t.Fatalf("%s: %v, %v: want a regular file, mode 0644", tt.file, st, err)
			}
			if b, _ := os.ReadFile(path); string(b) != "new" {
				t.Errorf("%s holds %q", tt.file, b)
			}
		})
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

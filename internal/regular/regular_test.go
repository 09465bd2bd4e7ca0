package regular

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// maker builds one kind of entry at path; outside is a regular file
// outside the folder, for links to point at.
type maker func(t *testing.T, path, outside string)

func regularFile(t *testing.T, path, _ string) { write(t, path, "content") }
func linkOut(t *testing.T, path, outside string) {
	if err := os.Symlink(outside, path); err != nil {
		t.Fatal(err)
	}
}
func linkIn(t *testing.T, path, _ string) {
	write(t, path+".target", "content")
	if err := os.Symlink(filepath.Base(path)+".target", path); err != nil {
		t.Fatal(err)
	}
}
func danglingLink(t *testing.T, path, _ string) {
	if err := os.Symlink("nowhere", path); err != nil {
		t.Fatal(err)
	}
}
func fifo(t *testing.T, path, _ string) {
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
}
func folder(t *testing.T, path, _ string) {
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
}
func nothing(*testing.T, string, string) {}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Open and ReadFile read a regular file and refuse everything else, at
// once: a named pipe must not block (a writer never comes), and a link is
// not followed even where it stays in the folder.
func TestReadFile(t *testing.T) {
	tests := []struct {
		name     string
		make     maker
		want     string // the content read, "" when refused
		notExist bool   // refused as missing rather than as not regular
	}{
		{"regular file", regularFile, "content", false},
		{"link out of the folder", linkOut, "", false},
		{"link inside the folder", linkIn, "", false},
		{"dangling link", danglingLink, "", false},
		{"named pipe", fifo, "", false},
		{"folder", folder, "", false},
		{"missing", nothing, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			outside := filepath.Join(t.TempDir(), "secret")
			write(t, outside, "secret")
			path := filepath.Join(dir, "history.jsonl")
			tt.make(t, path, outside)
			type answer struct {
				b   []byte
				err error
			}
			done := make(chan answer, 1)
			go func() {
				b, err := ReadFile(path)
				done <- answer{b, err}
			}()
			var a answer
			select {
			case a = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ReadFile blocks")
			}
			switch {
			case tt.want != "":
				if a.err != nil || string(a.b) != tt.want {
					t.Fatalf("read %q, %v; want %q", a.b, a.err, tt.want)
				}
			case tt.notExist:
				if !errors.Is(a.err, fs.ErrNotExist) {
					t.Fatalf("err %v, want one that is fs.ErrNotExist", a.err)
				}
			default:
				if !errors.Is(a.err, ErrNotRegular) || !strings.Contains(a.err.Error(), path) {
					t.Fatalf("read %q, err %v; want ErrNotRegular naming %s", a.b, a.err, path)
				}
			}
		})
	}
}

// CheckFolder refuses a folder with a link or a special file directly in
// it, naming the entry; folders, and what lies deeper, are not its
// business.
func TestCheckFolder(t *testing.T) {
	tests := []struct {
		name string
		make maker
		ok   bool
	}{
		{"regular file", regularFile, true},
		{"folder", folder, true},
		{"link out of the folder", linkOut, false},
		{"link inside the folder", linkIn, false},
		{"named pipe", fifo, false},
		{"link to a folder out of it", func(t *testing.T, path, outside string) { linkOut(t, path, filepath.Dir(outside)) }, false},
		{"link deeper down", func(t *testing.T, path, outside string) {
			folder(t, path, "")
			linkOut(t, filepath.Join(path, "x"), outside)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			outside := filepath.Join(t.TempDir(), "secret")
			write(t, outside, "secret")
			write(t, filepath.Join(dir, "test.json"), "{}")
			entry := filepath.Join(dir, "entry")
			tt.make(t, entry, outside)
			err := CheckFolder(dir)
			if tt.ok != (err == nil) {
				t.Fatalf("err %v, want ok %v", err, tt.ok)
			}
			if err != nil && (!errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), entry)) {
				t.Fatalf("err %v: want ErrNotRegular naming %s", err, entry)
			}
		})
	}
	if err := CheckFolder(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing folder: %v", err)
	}
}

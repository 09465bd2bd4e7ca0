// Package atomicfile writes a file whole or not at all: into a temporary
// file beside it, renamed over the name. A reader (a server, a browser, a
// campaign resuming after a crash) never sees half a file.
package atomicfile

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Write writes b to dir/name; name may lie in a folder under dir, which is
// made. Nothing is written outside dir, whatever dir holds: shardtest check
// writes into a stored run folder, which is untrusted. dir is opened as an
// os.Root, so a link on the way that leads out of it is refused, and the
// rename replaces a link (or a pipe) at name rather than writing through
// it. dir itself is the caller's, and may be reached through a link.
func Write(dir, name string, b []byte) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer root.Close()
	if sub := filepath.Dir(name); sub != "." {
		if err := root.MkdirAll(sub, 0o755); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	// O_EXCL: the temporary name is new, never something already there.
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+"."+rand.Text()[:12]+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	_, werr := f.Write(b)
	// Results are read by people and servers like the other files of a
	// run, whatever the umask.
	merr := f.Chmod(0o644)
	cerr := f.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		root.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := root.Rename(tmp, name); err != nil {
		root.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

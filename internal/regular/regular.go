// Package regular reads the files of stored runs, suites and campaigns:
// folders a user may have been handed or shared with others, so their
// content is untrusted. Only regular files are read. A named pipe would
// block in open(2) until a writer came (shardtest check hung for ever, and
// no signal handler runs while the open blocks); a device is no result;
// a symbolic link reaches wherever it points, and what is read ends up in
// reports that are served (a linked test.json put another file's secret on
// a run's page). This package is the one place that decides it.
package regular

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotRegular is the reason a path is refused: something other than a
// regular file (a symbolic link, a named pipe, a device, a socket, a
// folder where a file was expected).
var ErrNotRegular = errors.New("not a regular file")

// Open opens the regular file at path for reading. A symbolic link as its
// last element is refused, not followed (the folders on the way are the
// caller's: results/latest is a link a user names); so is anything but a
// regular file, with an error that names path and wraps ErrNotRegular. A
// missing file is an error that is fs.ErrNotExist.
func Open(path string) (*os.File, error) {
	// Lstat first, so a device or a pipe is refused without being opened
	// at all (opening a device can act on it).
	st, err := os.Lstat(path)
	if err != nil {
		return nil, openError(path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	}
	// The path can be swapped between the Lstat and the open: O_NOFOLLOW
	// refuses a link put there, O_NONBLOCK makes opening a pipe return at
	// once, and the fstat of what was opened decides.
	var fd int
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, notRegular(path, fs.ModeSymlink)
	}
	if err != nil {
		return nil, openError(path, err)
	}
	var fst syscall.Stat_t
	if err := syscall.Fstat(fd, &fst); err != nil {
		syscall.Close(fd)
		return nil, openError(path, err)
	}
	if fst.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, notRegular(path, modeOf(fst.Mode))
	}
	// Reads of a regular file never wait on O_NONBLOCK's account; cleared
	// anyway, so the file is an ordinary blocking one to os.File.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, openError(path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ReadFile reads the whole regular file at path (as Open decides).
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}

// CheckFolder refuses a folder that holds, directly in it, anything but
// regular files and folders — a symbolic link, a named pipe, a device, a
// socket — naming the first such entry. A stored run folder is checked so
// before a command writes into it (shardtest check rewrites its reports,
// charts and visualizations): what it reads is then a regular file, and a
// file or folder it writes is not a link to somewhere else. The folder
// itself may be reached through a link (results/latest). Deeper entries
// are not looked at: nothing reads them, and writes there go through
// internal/atomicfile, which never follows a link out of the folder.
func CheckFolder(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	for _, e := range entries {
		if t := e.Type(); !t.IsRegular() && !t.IsDir() {
			return fmt.Errorf("%w (a stored run must hold only regular files and folders)", notRegular(filepath.Join(dir, e.Name()), t))
		}
	}
	return nil
}

// openError is err as an error of opening path: the same words however
// far Open got, and still fs.ErrNotExist for a missing file.
func openError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}

func notRegular(path string, m fs.FileMode) error {
	return fmt.Errorf("%s is %s: %w", path, kind(m), ErrNotRegular)
}

// kind names what m is, for people.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a folder"
	}
	return "not a plain file"
}

// modeOf is the fs.FileMode type bits of a stat(2) mode.
func modeOf(m uint32) fs.FileMode {
	switch m & syscall.S_IFMT {
	case syscall.S_IFLNK:
		return fs.ModeSymlink
	case syscall.S_IFIFO:
		return fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		return fs.ModeSocket
	case syscall.S_IFBLK, syscall.S_IFCHR:
		return fs.ModeDevice
	case syscall.S_IFDIR:
		return fs.ModeDir
	}
	return fs.ModeIrregular
}

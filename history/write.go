package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Writer appends ops to a history file. Every Write reaches the operating
// system before it returns (a killed harness loses nothing written), and
// Sync makes it durable. Safe for concurrent use; it assigns Index and, if
// zero, Time.
type Writer struct {
	mu    sync.Mutex
	f     *os.File
	w     *bufio.Writer
	start time.Time
	// now, if set, is the run's time instead of the monotonic clock's (a
	// simulation's virtual time).
	now func() int64
	// buffered: lines reach the file when the buffer fills and at Close,
	// not one by one (a simulation: a run that dies replays from its seed).
	buffered bool
	next     int64
	err      error
}

// Create creates the history file at path and writes its header. start is
// the run's start on the monotonic clock (time.Now()).
func Create(path, test string, start time.Time) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	w := &Writer{f: f, w: bufio.NewWriterSize(f, 64<<10), start: start}
	if err := w.line(Header{Format: Format, Version: Version, Test: test, Started: start.UTC()}); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// CreateClocked is Create for a run whose time is not the machine's (a
// simulation): ops with no Time get now(), the header says the run
// started at started, and lines are written in blocks (see buffered).
func CreateClocked(path, test string, started time.Time, now func() int64) (*Writer, error) {
	w, err := Create(path, test, started)
	if err != nil {
		return nil, err
	}
	w.now, w.buffered = now, true
	return w, nil
}

// Now is the run's monotonic time, as ops record it.
func (w *Writer) Now() int64 {
	if w.now != nil {
		return w.now()
	}
	return int64(time.Since(w.start))
}

// Write appends op and returns it as written.
func (w *Writer) Write(op Op) (Op, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return op, w.err
	}
	op.Index = w.next
	if op.Time == 0 {
		if w.now != nil {
			op.Time = w.now()
		} else {
			op.Time = int64(time.Since(w.start))
		}
	}
	if err := w.line(op); err != nil {
		return op, err
	}
	w.next++
	return op, nil
}

func (w *Writer) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("history: encode: %w", err)
	}
	b = append(b, '\n')
	if _, err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("history: write: %w", err)
		return w.err
	}
	if w.buffered {
		return nil
	}
	if err := w.w.Flush(); err != nil {
		w.err = fmt.Errorf("history: write: %w", err)
		return w.err
	}
	return nil
}

// Len is the number of ops written.
func (w *Writer) Len() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// Close syncs and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.w.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	if err := w.f.Sync(); err != nil && w.err == nil {
		w.err = err
	}
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

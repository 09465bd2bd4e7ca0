package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/shardtest/shardtest/internal/regular"
)

// File is a history read back.
type File struct {
	Header Header
	Ops    []Op
	// Truncated: the last line was cut off (the harness died writing it);
	// it is left out.
	Truncated bool
}

// Summary counts a history's entries.
type Summary struct {
	Invocations, OK, Fail, Info, Nemesis int
	// Open counts invocations with no completion (the harness stopped
	// before they completed): they count as unknown outcomes.
	Open int
}

// ReadFile reads and checks a history file (a regular file only: a stored
// run is untrusted, internal/regular).
func ReadFile(path string) (*File, error) {
	f, err := regular.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	h := &File{}
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		// About 150 bytes a line: growing the slice instead copies every
		// op several times over.
		h.Ops = make([]Op, 0, st.Size()/150+16)
	}
	if err := h.read(f); err != nil {
		return nil, err
	}
	return h, nil
}

// Read reads a history. Every line must be a valid entry, except that a
// cut-off last line (no newline) is tolerated and reported.
func Read(r io.Reader) (*File, error) {
	h := &File{}
	if err := h.read(r); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *File) read(r io.Reader) error {
	hdr, truncated, err := Scan(r, func(op *Op) error {
		h.Ops = append(h.Ops, *op)
		return nil
	})
	h.Header, h.Truncated = hdr, truncated
	return err
}

// Scan reads a history in one pass without holding it: it checks the
// header, then calls fn with each entry in order. The *Op is reused from
// one call to the next; its fields (strings, Value, Reply) may be kept. An
// error from fn stops the scan and is returned. Like Read, it tolerates a
// cut-off last line (truncated).
func Scan(r io.Reader, fn func(op *Op) error) (hdr Header, truncated bool, err error) {
	d := newDecoder()
	var op Op
	next := int64(0)
	var stop error
	truncated, err = readLines(r, "history", func(line []byte) error {
		if err := json.Unmarshal(line, &hdr); err != nil || hdr.Format != Format {
			return fmt.Errorf("line 1 is not a %s header", Format)
		}
		if hdr.Version != Version {
			return fmt.Errorf("format version %d, this build reads %d", hdr.Version, Version)
		}
		return nil
	}, func(line []byte) error {
		if err := d.op(line, &op); err != nil {
			return err
		}
		if op.Index != next {
			return fmt.Errorf("index %d, want %d", op.Index, next)
		}
		next++
		if err := fn(&op); err != nil {
			stop = err
			return errStop
		}
		return nil
	})
	if stop != nil {
		return hdr, false, stop
	}
	return hdr, truncated, err
}

// errStop ends readLines when the caller's function failed.
var errStop = errors.New("stop")

// readLines reads a JSON-lines file: a header line, then entries. An
// entry that does not decode is an error, unless it is a cut-off last line
// (no newline: the writer stopped mid-line), which is left out and
// reported as truncated. A callback must copy what it keeps of a line.
func readLines(r io.Reader, what string, header, entry func(line []byte) error) (truncated bool, err error) {
	br := bufio.NewReaderSize(r, 1<<20)
	first := true
	var long []byte // a line longer than the buffer, put together
	for lineNo := 1; ; lineNo++ {
		// The line is only valid until the next read: no callback keeps it
		// (they copy what they keep), which saves a copy of every line.
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) == 0 && errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("%s: line %d: %w", what, lineNo, err)
		}
		complete := len(line) > 0 && line[len(line)-1] == '\n'
		line = bytes.TrimSpace(line)
		if first {
			if err := header(line); err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			first = false
			continue
		}
		if err := entry(line); err != nil {
			if !complete {
				return true, nil
			}
			return false, fmt.Errorf("%s: line %d: %w", what, lineNo, err)
		}
		if !complete {
			break
		}
	}
	if first {
		return false, fmt.Errorf("%s: empty file (no header)", what)
	}
	return false, nil
}

// Summarize counts the entries and the invocations left open. Each
// process has at most one operation in flight.
func (f *File) Summarize() Summary {
	var c Counter
	for i := range f.Ops {
		c.Observe(&f.Ops[i])
	}
	return c.Summary()
}

// Counter is Summarize for entries that stream past (Scan), without the
// history.
type Counter struct {
	s    Summary
	open map[int]bool
}

// Observe counts the next entry.
func (c *Counter) Observe(op *Op) {
	if c.open == nil {
		c.open = map[int]bool{}
	}
	switch op.Kind {
	case Invoke:
		c.s.Invocations++
		c.open[op.Process] = true
	case OK:
		c.s.OK++
		delete(c.open, op.Process)
	case Fail:
		c.s.Fail++
		delete(c.open, op.Process)
	case Info:
		c.s.Info++
		delete(c.open, op.Process)
	case Nemesis:
		c.s.Nemesis++
	}
}

// Summary is the counts so far.
func (c *Counter) Summary() Summary {
	s := c.s
	s.Open = len(c.open)
	return s
}

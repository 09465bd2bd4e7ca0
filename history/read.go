package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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

// ReadFile reads and checks a history file.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	return Read(f)
}

// Read reads a history. Every line must be a valid entry, except that a
// cut-off last line (no newline) is tolerated and reported.
func Read(r io.Reader) (*File, error) {
	h := &File{}
	truncated, err := readLines(r, "history", func(line []byte) error {
		if err := json.Unmarshal(line, &h.Header); err != nil || h.Header.Format != Format {
			return fmt.Errorf("line 1 is not a %s header", Format)
		}
		if h.Header.Version != Version {
			return fmt.Errorf("format version %d, this build reads %d", h.Header.Version, Version)
		}
		return nil
	}, func(line []byte) error {
		var op Op
		if err := json.Unmarshal(line, &op); err != nil {
			return err
		}
		if op.Index != int64(len(h.Ops)) {
			return fmt.Errorf("index %d, want %d", op.Index, len(h.Ops))
		}
		h.Ops = append(h.Ops, op)
		return nil
	})
	h.Truncated = truncated
	if err != nil {
		return nil, err
	}
	return h, nil
}

// readLines reads a JSON-lines file: a header line, then entries. An
// entry that does not decode is an error, unless it is a cut-off last line
// (no newline: the writer stopped mid-line), which is left out and
// reported as truncated.
func readLines(r io.Reader, what string, header, entry func(line []byte) error) (truncated bool, err error) {
	br := bufio.NewReaderSize(r, 1<<20)
	first := true
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
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
	var s Summary
	open := map[int]bool{}
	for _, op := range f.Ops {
		switch op.Kind {
		case Invoke:
			s.Invocations++
			open[op.Process] = true
		case OK:
			s.OK++
			delete(open, op.Process)
		case Fail:
			s.Fail++
			delete(open, op.Process)
		case Info:
			s.Info++
			delete(open, op.Process)
		case Nemesis:
			s.Nemesis++
		}
	}
	s.Open = len(open)
	return s
}

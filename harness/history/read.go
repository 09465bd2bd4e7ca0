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
	br := bufio.NewReaderSize(r, 1<<20)
	h := &File{}
	first := true
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("history: line %d: %w", lineNo, err)
		}
		complete := len(line) > 0 && line[len(line)-1] == '\n'
		line = bytes.TrimSpace(line)
		if first {
			if err := json.Unmarshal(line, &h.Header); err != nil || h.Header.Format != Format {
				return nil, fmt.Errorf("history: line 1 is not a %s header", Format)
			}
			if h.Header.Version != Version {
				return nil, fmt.Errorf("history: format version %d, this build reads %d", h.Header.Version, Version)
			}
			first = false
			continue
		}
		var op Op
		if jerr := json.Unmarshal(line, &op); jerr != nil {
			if !complete {
				h.Truncated = true
				break
			}
			return nil, fmt.Errorf("history: line %d: %w", lineNo, jerr)
		}
		if op.Index != int64(len(h.Ops)) {
			return nil, fmt.Errorf("history: line %d: index %d, want %d", lineNo, op.Index, len(h.Ops))
		}
		h.Ops = append(h.Ops, op)
		if !complete {
			break
		}
	}
	if first {
		return nil, errors.New("history: empty file (no header)")
	}
	return h, nil
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

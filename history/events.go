package history

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/shardtest/shardtest/internal/regular"
	"github.com/shardtest/shardtest/protocol"
)

// EventsFormat names the node-events file (events.jsonl beside the
// history): every event the nodes logged (GET /v1/events), as the harness
// collected it during the run.
const EventsFormat = "shardtest-node-events"

// EventsHeader is the first line of a node-events file.
type EventsHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// NodeEvent is one node event with the window, on the harness's clock (the
// history's), in which it certainly happened: after Lo (the harness asked
// for newer events at Lo and this one was not yet there) and before Hi
// (the harness had received it). Node clocks can be skewed; these windows
// are what checkers order events by.
//
// In the file it is one flat JSON object: the harness's fields and the
// event's.
type NodeEvent struct {
	// Node is the node the harness polled.
	Node string `json:"node"`
	Lo   int64  `json:"lo"`
	Hi   int64  `json:"hi"`
	// Event is the event as the node logged it (docs/protocol.md,
	// Events). Its Time is the node's own, skewable clock: for people,
	// never for ordering (zero in files written before it was kept).
	protocol.Event
}

// jsonlWriter appends JSON lines after a header line; safe for concurrent
// use. Every write reaches the operating system before it returns.
type jsonlWriter struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	err  error
	what string
}

func createJSONL(path, what string, header any) (*jsonlWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	w := &jsonlWriter{f: f, w: bufio.NewWriterSize(f, 64<<10), what: what}
	if err := w.line(header); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

func (w *jsonlWriter) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: encode: %w", w.what, err)
	}
	b = append(b, '\n')
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	if err := w.w.Flush(); err != nil {
		w.err = err
		return err
	}
	return nil
}

// write appends one line per value.
func (w *jsonlWriter) write(vs ...any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.f == nil {
		return fmt.Errorf("%s: write after close", w.what)
	}
	for _, v := range vs {
		if err := w.line(v); err != nil {
			return err
		}
	}
	return nil
}

// Close flushes and closes the file.
func (w *jsonlWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return w.err
	}
	err := w.w.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	return err
}

// EventsWriter appends node events to a file; safe for concurrent use.
// Every Write reaches the operating system before it returns.
type EventsWriter struct{ *jsonlWriter }

// CreateEvents creates a node-events file and writes its header.
func CreateEvents(path string) (*EventsWriter, error) {
	w, err := createJSONL(path, "node events", EventsHeader{Format: EventsFormat, Version: Version})
	if err != nil {
		return nil, err
	}
	return &EventsWriter{w}, nil
}

// Write appends events.
func (w *EventsWriter) Write(evs ...NodeEvent) error {
	vs := make([]any, len(evs))
	for i := range evs {
		vs[i] = evs[i]
	}
	return w.write(vs...)
}

// Events is a node-events file read back.
type Events struct {
	Events []NodeEvent
	// Truncated: the last line was cut off and left out.
	Truncated bool
}

// ErrNoEvents: the run has no node-events file (an older run, or an
// implementation without the events capability).
var ErrNoEvents = errors.New("no node events were recorded")

// ReadEventsFile reads a node-events file (a regular file only,
// internal/regular); a missing file is ErrNoEvents.
func ReadEventsFile(path string) (*Events, error) {
	f, err := regular.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoEvents
	}
	if err != nil {
		return nil, fmt.Errorf("node events: %w", err)
	}
	defer f.Close()
	return ReadEvents(f)
}

// ReadEvents reads node events; a cut-off last line is tolerated and
// reported.
func ReadEvents(r io.Reader) (*Events, error) {
	out := &Events{}
	d := newDecoder()
	truncated, err := readLines(r, "node events", func(line []byte) error {
		var h EventsHeader
		if err := json.Unmarshal(line, &h); err != nil || h.Format != EventsFormat {
			return fmt.Errorf("line 1 is not a %s header", EventsFormat)
		}
		if h.Version != Version {
			return fmt.Errorf("format version %d, this build reads %d", h.Version, Version)
		}
		return nil
	}, func(line []byte) error {
		var e NodeEvent
		if err := d.event(line, &e); err != nil {
			return err
		}
		if e.Lo > e.Hi {
			return fmt.Errorf("window lo %d after hi %d", e.Lo, e.Hi)
		}
		out.Events = append(out.Events, e)
		return nil
	})
	out.Truncated = truncated
	if err != nil {
		return nil, err
	}
	return out, nil
}

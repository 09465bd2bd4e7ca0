package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/shardtest/shardtest/internal/regular"
	"github.com/shardtest/shardtest/protocol"
)

// StatusFormat names the status-samples file (status.jsonl beside the
// history): what every node's GET /v1/status said runs on it, sampled
// through the run, each sample with the window of harness time in which
// the node took it.
const StatusFormat = "shardtest-status-samples"

// StatusHeader is the first line of a status-samples file.
type StatusHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

// StatusSample is one status reply, reduced to what proves an instance
// alive: the node took it at some moment after Lo (the harness sent the
// request) and before Hi (the reply had arrived), on the history's clock.
type StatusSample struct {
	// Node is the node the harness asked; Member the uid that answered.
	Node   string `json:"node"`
	Lo     int64  `json:"lo"`
	Hi     int64  `json:"hi"`
	Member string `json:"member"`
	Status string `json:"status,omitempty"`
	// Oldest is the member the node saw as the oldest (capability age;
	// absent in files written before it was kept): behaviour coverage
	// tells the oldest's events from the others' by it.
	Oldest string `json:"oldest,omitempty"`
	// Singletons running there (name, and the instance if the node names
	// it), the entity types whose coordinator runs there, and the entity
	// incarnations its regions list.
	Singletons   []SampledSingleton `json:"singletons,omitempty"`
	Coordinators []string           `json:"coordinators,omitempty"`
	Entities     []SampledEntity    `json:"entities,omitempty"`
}

// SampledSingleton is a singleton running on the sampled node.
type SampledSingleton struct {
	Name     string `json:"name"`
	Instance string `json:"instance,omitempty"`
}

// SampledEntity is an entity incarnation a region listed.
type SampledEntity struct {
	Type        string `json:"type"`
	Shard       string `json:"shard,omitempty"`
	ID          string `json:"id"`
	Incarnation string `json:"incarnation"`
}

// Sample reduces a status reply taken in [lo, hi] to a sample of node.
func Sample(node string, lo, hi int64, st protocol.Status) StatusSample {
	s := StatusSample{Node: node, Lo: lo, Hi: hi, Member: st.Self.UID, Status: st.Self.Status, Oldest: st.Oldest}
	for _, x := range st.Singletons {
		if x.Running {
			s.Singletons = append(s.Singletons, SampledSingleton{Name: x.Name, Instance: x.Instance})
		}
	}
	for _, t := range st.Sharding {
		if t.CoordinatorRunning {
			s.Coordinators = append(s.Coordinators, t.Type)
		}
		for _, sh := range t.Region.Shards {
			for _, e := range sh.Entities {
				if e.ID != "" && e.Incarnation != "" {
					s.Entities = append(s.Entities, SampledEntity{Type: t.Type, Shard: sh.ID, ID: e.ID, Incarnation: e.Incarnation})
				}
			}
		}
	}
	return s
}

// StatusWriter appends status samples to a file; safe for concurrent use.
type StatusWriter struct{ *jsonlWriter }

// CreateStatus creates a status-samples file and writes its header.
func CreateStatus(path string) (*StatusWriter, error) {
	w, err := createJSONL(path, "status samples", StatusHeader{Format: StatusFormat, Version: Version})
	if err != nil {
		return nil, err
	}
	return &StatusWriter{w}, nil
}

// Write appends a sample.
func (w *StatusWriter) Write(s StatusSample) error { return w.write(s) }

// Samples is a status-samples file read back.
type Samples struct {
	Samples []StatusSample
	// Truncated: the last line was cut off and left out.
	Truncated bool
}

// ErrNoSamples: the run has no status-samples file (a run of an older
// harness).
var ErrNoSamples = errors.New("no status samples were recorded")

// ReadStatusFile reads a status-samples file (a regular file only,
// internal/regular); a missing file is ErrNoSamples.
func ReadStatusFile(path string) (*Samples, error) {
	f, err := regular.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoSamples
	}
	if err != nil {
		return nil, fmt.Errorf("status samples: %w", err)
	}
	defer f.Close()
	return ReadStatus(f)
}

// ReadStatus reads status samples; a cut-off last line is tolerated and
// reported. A sample must name its member (name@incarnation) and have a
// window with lo <= hi.
func ReadStatus(r io.Reader) (*Samples, error) {
	out := &Samples{}
	truncated, err := readLines(r, "status samples", func(line []byte) error {
		var h StatusHeader
		if err := json.Unmarshal(line, &h); err != nil || h.Format != StatusFormat {
			return fmt.Errorf("line 1 is not a %s header", StatusFormat)
		}
		if h.Version != Version {
			return fmt.Errorf("format version %d, this build reads %d", h.Version, Version)
		}
		return nil
	}, func(line []byte) error {
		var s StatusSample
		if err := json.Unmarshal(line, &s); err != nil {
			return err
		}
		if s.Lo > s.Hi {
			return fmt.Errorf("window lo %d after hi %d", s.Lo, s.Hi)
		}
		if !strings.Contains(s.Member, "@") {
			return fmt.Errorf("member %q is not name@incarnation", s.Member)
		}
		out.Samples = append(out.Samples, s)
		return nil
	})
	out.Truncated = truncated
	if err != nil {
		return nil, err
	}
	return out, nil
}

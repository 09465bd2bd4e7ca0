package explore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardtest/shardtest/internal/atomicfile"
	"github.com/shardtest/shardtest/internal/regular"
	"github.com/shardtest/shardtest/nemesis"
)

// A corpus is a folder of fault schedules that each showed behaviours no
// earlier run of the campaign had: NNNN.schedule.json in the --schedule
// format (shardtest run --schedule reads it as it is), beside NNNN.json,
// what the entry showed. corpus.json marks the folder as a corpus.
const (
	CorpusFormat   = "shardtest-explore-corpus"
	CorpusVersion  = 1
	corpusMarker   = "corpus.json"
	scheduleSuffix = ".schedule.json"
)

// corpusHeader is corpus.json: what the schedules were found for. A
// campaign resumes a corpus of the same workload and main phase only (the
// schedules' times and faults assume them).
type corpusHeader struct {
	Format    string        `json:"format"`
	Version   int           `json:"version"`
	Workload  string        `json:"workload"`
	TimeLimit time.Duration `json:"time_limit_ns"`
}

// Entry is one schedule of the corpus.
type Entry struct {
	ID string `json:"id"`
	// Parent is the entry it was mutated from ("": a fresh random
	// schedule), and Mutation what was done to it.
	Parent   string `json:"parent,omitempty"`
	Mutation string `json:"mutation,omitempty"`
	// Seed is the run's seed (its operations); Run its folder.
	Seed int64  `json:"seed"`
	Run  string `json:"run,omitempty"`
	// Behaviours the run showed, and how many no run of the campaign had
	// shown before it (which made it an entry).
	Behaviours []string `json:"behaviours"`
	New        int      `json:"new"`
	// Steps is the schedule (NNNN.schedule.json).
	Steps []nemesis.Step `json:"-"`
}

// corpus is an open corpus folder.
type corpus struct {
	dir     string
	entries []*Entry
	next    int
}

// openCorpus opens the corpus in dir for a campaign of workload and main
// phase limit: an existing one (every schedule must still read), or a new
// one where dir does not exist or is empty. Nothing is written until an
// entry is added.
func openCorpus(dir, workload string, limit time.Duration) (*corpus, error) {
	c := &corpus{dir: dir, next: 1}
	names, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("--corpus %s: %w", dir, err)
	case len(names) == 0:
		return c, nil
	}
	// A corpus is a stored folder, maybe someone else's: regular files
	// only (internal/regular).
	b, err := regular.ReadFile(filepath.Join(dir, corpusMarker))
	if err != nil {
		return nil, fmt.Errorf("--corpus %s is not an exploration corpus (no readable %s): %w", dir, corpusMarker, err)
	}
	var h corpusHeader
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil || h.Format != CorpusFormat {
		return nil, fmt.Errorf("--corpus %s: %s is not a %s header", dir, corpusMarker, CorpusFormat)
	}
	if h.Version != CorpusVersion {
		return nil, fmt.Errorf("--corpus %s: corpus version %d, this build reads %d", dir, h.Version, CorpusVersion)
	}
	if h.Workload != workload || h.TimeLimit != limit {
		return nil, fmt.Errorf("--corpus %s holds schedules for workload %s with a %v main phase, not %s with %v: they would not fit", dir, h.Workload, h.TimeLimit, workload, limit)
	}
	for _, n := range names {
		name := n.Name()
		if !strings.HasSuffix(name, scheduleSuffix) {
			continue
		}
		id := strings.TrimSuffix(name, scheduleSuffix)
		e, err := readEntry(dir, id)
		if err != nil {
			return nil, fmt.Errorf("--corpus %s: entry %s: %w", dir, id, err)
		}
		c.entries = append(c.entries, e)
		if k, err := strconv.Atoi(id); err == nil && k >= c.next {
			c.next = k + 1
		}
	}
	sort.Slice(c.entries, func(i, j int) bool { return c.entries[i].ID < c.entries[j].ID })
	return c, nil
}

// readEntry reads entry id: its schedule must read and fit a run
// (nemesis.ReadSchedule); what it showed may be missing (an entry written
// by hand), but not unreadable.
func readEntry(dir, id string) (*Entry, error) {
	f, err := regular.Open(filepath.Join(dir, id+scheduleSuffix))
	if err != nil {
		return nil, err
	}
	steps, err := nemesis.ReadSchedule(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	e := &Entry{ID: id}
	b, err := regular.ReadFile(filepath.Join(dir, id+".json"))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(b, e); err != nil {
			return nil, fmt.Errorf("%s.json: %w", id, err)
		}
		e.ID = id
	}
	e.Steps = steps
	return e, nil
}

// add writes e as the corpus's next entry (the folder and its marker on
// the first), each file whole or not at all: a campaign killed while
// adding leaves the corpus readable.
func (c *corpus) add(e *Entry, workload string, limit time.Duration) error {
	if len(c.entries) == 0 {
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(c.dir, corpusMarker)); errors.Is(err, os.ErrNotExist) {
			b, _ := json.MarshalIndent(corpusHeader{Format: CorpusFormat, Version: CorpusVersion, Workload: workload, TimeLimit: limit}, "", "  ")
			if err := atomicfile.Write(c.dir, corpusMarker, append(b, '\n')); err != nil {
				return err
			}
		}
	}
	e.ID = fmt.Sprintf("%04d", c.next)
	var sb bytes.Buffer
	if err := nemesis.WriteSchedule(&sb, e.Steps); err != nil {
		return err
	}
	mb, err := json.MarshalIndent(e, "", " ")
	if err != nil {
		return err
	}
	// What it showed first: a schedule without it is still an entry; one
	// without its schedule is none.
	if err := atomicfile.Write(c.dir, e.ID+".json", append(mb, '\n')); err != nil {
		return err
	}
	if err := atomicfile.Write(c.dir, e.ID+scheduleSuffix, sb.Bytes()); err != nil {
		return err
	}
	c.next++
	c.entries = append(c.entries, e)
	return nil
}

package coverage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/shardtest/shardtest/internal/atomicfile"
	"github.com/shardtest/shardtest/internal/regular"
)

// Summary is a run's coverage in its results.json: the counts, and how it
// compares with the results store it was written into.
type Summary struct {
	Behaviours int            `json:"behaviours"`
	ByKind     map[string]int `json:"by_kind"`
	// NewToStore counts the behaviours that no other run of the results
	// store had shown (StoreRuns runs, each with a coverage.json, were
	// compared); -1 when the store was not read.
	NewToStore int `json:"new_to_store"`
	StoreRuns  int `json:"store_runs"`
	// NeverHappened: Coverage.NeverHappened.
	NeverHappened []string `json:"never_happened,omitempty"`
}

// Summarize is c's summary, with its novelty against a store (nil: not
// compared).
func Summarize(c Coverage, st *Store) Summary {
	s := Summary{Behaviours: len(c.Behaviours), ByKind: c.ByKind(), NewToStore: -1, NeverHappened: c.NeverHappened}
	if st != nil {
		s.NewToStore, s.StoreRuns = len(st.New(c.Behaviours)), st.Runs
	}
	return s
}

// Line is the summary in one line for people: "coverage: 1241 behaviours
// (1 fault, ...), 37 new to this results store (compared with 12 runs)".
func (s Summary) Line() string {
	line := "coverage: " + describe(s.Behaviours, s.ByKind)
	switch {
	case s.NewToStore < 0:
	case s.StoreRuns == 0:
		line += ", all new: no other run in this results store has a coverage.json"
	default:
		line += fmt.Sprintf(", %d new to this results store (compared with %d stored runs)", s.NewToStore, s.StoreRuns)
	}
	return line
}

// Store is the union of the behaviours of the runs of a results store.
type Store struct {
	Seen map[string]bool
	// Runs counts the coverage files read; Unreadable those skipped.
	Runs, Unreadable int
}

// New returns the behaviours the store has not seen, in their order.
func (st *Store) New(behaviours []string) []string {
	var out []string
	for _, b := range behaviours {
		if !st.Seen[b] {
			out = append(out, b)
		}
	}
	return out
}

// Add puts behaviours into the store's union.
func (st *Store) Add(behaviours []string) {
	if st.Seen == nil {
		st.Seen = map[string]bool{}
	}
	for _, b := range behaviours {
		st.Seen[b] = true
	}
	st.Runs++
}

// maxDepth bounds the walk: <root>/<name>/<time>/coverage.json, and an
// exploration's runs at <root>/explore/<time>/runs/<name>/<time>/.
const maxDepth = 6

// ReadStore reads the coverage of every run stored under root (symbolic
// links are not followed: "latest" is a link), except the folder except.
// A coverage file that cannot be read is counted and passed over: one
// damaged run does not hide the others. A root that does not exist is an
// empty store.
func ReadStore(root, except string) (*Store, error) {
	st := &Store{Seen: map[string]bool{}}
	exceptAbs, _ := filepath.Abs(except)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return nil // an unreadable folder: passed over
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if abs, _ := filepath.Abs(p); except != "" && abs == exceptAbs {
				return fs.SkipDir
			}
			if rel != "." && strings.Count(rel, string(filepath.Separator)) >= maxDepth {
				return fs.SkipDir
			}
			return nil
		}
		if d.Name() != File || !d.Type().IsRegular() {
			return nil
		}
		c, err := Read(p)
		if err != nil {
			st.Unreadable++
			return nil
		}
		st.Add(c.Behaviours)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("coverage of the results store %s: %w", root, err)
	}
	return st, nil
}

// maxFile bounds a coverage file read back.
const maxFile = 64 << 20

// Read reads a coverage file (a regular file only, internal/regular).
func Read(path string) (Coverage, error) {
	f, err := regular.Open(path)
	if err != nil {
		return Coverage{}, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxFile {
		return Coverage{}, fmt.Errorf("%s: larger than %d MB", path, maxFile>>20)
	}
	var c Coverage
	if err := json.NewDecoder(f).Decode(&c); err != nil {
		return Coverage{}, fmt.Errorf("%s: not a coverage file: %w", path, err)
	}
	return c, nil
}

// Write writes c as dir's coverage file (whole or not at all).
func Write(dir string, c Coverage) error {
	b, err := json.MarshalIndent(c, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.Write(dir, File, append(b, '\n'))
}

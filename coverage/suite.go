package coverage

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/shardtest/shardtest/internal/atomicfile"
	"github.com/shardtest/shardtest/internal/regular"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/protocol"
)

// Suite is the coverage of a suite's runs (test-all, merge): which
// scenarios showed each behaviour. It is the suite folder's coverage.json,
// so merging the parts of a split suite needs no run folder.
type Suite struct {
	// Behaviours maps each behaviour to the scenarios (sorted) whose runs
	// showed it.
	Behaviours map[string][]string `json:"behaviours"`
	// Runs counts each scenario's runs with coverage.
	Runs map[string]int `json:"runs"`
	// Capabilities are those any run's implementation declared.
	Capabilities []string `json:"capabilities,omitempty"`
}

// NewSuite returns an empty suite coverage.
func NewSuite() *Suite { return &Suite{Behaviours: map[string][]string{}, Runs: map[string]int{}} }

// Add adds a run of scenario.
func (s *Suite) Add(scenario string, c Coverage) {
	s.Runs[scenario]++
	for _, b := range c.Behaviours {
		if !slices.Contains(s.Behaviours[b], scenario) {
			s.Behaviours[b] = append(s.Behaviours[b], scenario)
			slices.Sort(s.Behaviours[b])
		}
	}
	for _, cp := range c.Capabilities {
		if !slices.Contains(s.Capabilities, cp) {
			s.Capabilities = append(s.Capabilities, cp)
		}
	}
	slices.Sort(s.Capabilities)
}

// Merge adds another suite's coverage (a part of a split suite).
func (s *Suite) Merge(o *Suite) {
	for b, scs := range o.Behaviours {
		for _, sc := range scs {
			if !slices.Contains(s.Behaviours[b], sc) {
				s.Behaviours[b] = append(s.Behaviours[b], sc)
			}
		}
		slices.Sort(s.Behaviours[b])
	}
	for sc, n := range o.Runs {
		s.Runs[sc] += n
	}
	for _, cp := range o.Capabilities {
		if !slices.Contains(s.Capabilities, cp) {
			s.Capabilities = append(s.Capabilities, cp)
		}
	}
	slices.Sort(s.Capabilities)
}

// SuiteSummary is what a suite's coverage comes to (summary.json).
type SuiteSummary struct {
	// Behaviours is the union's size, ByKind its counts.
	Behaviours int            `json:"behaviours"`
	ByKind     map[string]int `json:"by_kind"`
	// Scenarios: what each showed, and what no other scenario did.
	Scenarios []ScenarioCoverage `json:"scenarios"`
	// NeverLogged are the event types the declared capabilities promise
	// that no run logged; NeverInjected the faults of the nemesis
	// catalogue no run injected.
	NeverLogged   []string `json:"never_logged,omitempty"`
	NeverInjected []string `json:"never_injected,omitempty"`
}

// ScenarioCoverage is one scenario's share of a suite's coverage.
type ScenarioCoverage struct {
	Scenario   string `json:"scenario"`
	Runs       int    `json:"runs"`
	Behaviours int    `json:"behaviours"`
	// Only counts the behaviours no other scenario of the suite showed:
	// what this one added.
	Only int `json:"only"`
}

// Summary sums the suite's coverage up.
func (s *Suite) Summary() SuiteSummary {
	out := SuiteSummary{Behaviours: len(s.Behaviours), ByKind: map[string]int{}}
	per := map[string]*ScenarioCoverage{}
	for sc, n := range s.Runs {
		per[sc] = &ScenarioCoverage{Scenario: sc, Runs: n}
	}
	logged := map[string]bool{}
	for b, scs := range s.Behaviours {
		out.ByKind[Kind(b)]++
		for _, sc := range scs {
			if per[sc] == nil {
				per[sc] = &ScenarioCoverage{Scenario: sc}
			}
			per[sc].Behaviours++
			if len(scs) == 1 {
				per[sc].Only++
			}
		}
		switch Kind(b) {
		case KindEvent:
			logged[strings.Fields(b)[1]] = true
		case KindFault:
			logged["fault "+strings.TrimPrefix(b, KindFault+" ")] = true
		}
	}
	for _, p := range per {
		out.Scenarios = append(out.Scenarios, *p)
	}
	sort.Slice(out.Scenarios, func(i, j int) bool { return out.Scenarios[i].Scenario < out.Scenarios[j].Scenario })
	for _, t := range protocol.EventTypes(s.Capabilities) {
		if !logged[t] {
			out.NeverLogged = append(out.NeverLogged, t)
		}
	}
	for _, f := range nemesis.Catalog() {
		if !logged["fault "+f.Name] {
			out.NeverInjected = append(out.NeverInjected, f.Name)
		}
	}
	return out
}

// Line is the summary in one line for people.
func (ss SuiteSummary) Line() string {
	return fmt.Sprintf("coverage: %s over the suite's %d scenarios", describe(ss.Behaviours, ss.ByKind), len(ss.Scenarios))
}

// WriteMarkdown writes the summary as summary.md's coverage section.
func (ss SuiteSummary) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "\n## Coverage\n\n%s (docs/coverage.md).\n\n", ss.Line())
	fmt.Fprintln(w, "| scenario | runs | behaviours | shown by no other scenario |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, sc := range ss.Scenarios {
		fmt.Fprintf(w, "| %s | %d | %d | %d |\n", strings.ReplaceAll(sc.Scenario, "|", `\|`), sc.Runs, sc.Behaviours, sc.Only)
	}
	if len(ss.NeverLogged) > 0 {
		fmt.Fprintf(w, "\nNever exercised by the suite: event types no node logged (of those the declared capabilities promise): %s.\n", strings.Join(ss.NeverLogged, ", "))
	}
	if len(ss.NeverInjected) > 0 {
		fmt.Fprintf(w, "\nFaults no run injected: %s.\n", strings.Join(ss.NeverInjected, ", "))
	}
}

// WriteSuite writes s as dir's coverage file.
func WriteSuite(dir string, s *Suite) error {
	b, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.Write(dir, File, append(b, '\n'))
}

// ReadSuite reads a suite folder's coverage file (a regular file only,
// internal/regular); ok is false when the folder has none (a suite of an
// older harness).
func ReadSuite(dir string) (s *Suite, ok bool, err error) {
	f, err := regular.Open(filepath.Join(dir, File))
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	s = NewSuite()
	if err := json.NewDecoder(io.LimitReader(f, maxFile)).Decode(s); err != nil {
		return nil, false, fmt.Errorf("%s: not a suite's coverage file: %w", filepath.Join(dir, File), err)
	}
	if s.Behaviours == nil || s.Runs == nil {
		return nil, false, fmt.Errorf("%s: not a suite's coverage file (no behaviours or runs)", filepath.Join(dir, File))
	}
	return s, true, nil
}

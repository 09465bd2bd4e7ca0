package explore

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A corpus written entry by entry reads back the same; a folder that is
// not one, or whose schedules no longer read, is refused with the reason.
func TestCorpus(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "corpus")
	c, err := openCorpus(dir, "register", 30*time.Second)
	if err != nil || len(c.entries) != 0 {
		t.Fatalf("a new corpus: %v, %d entries", err, len(c.entries))
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("opening a new corpus wrote its folder")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3 {
		e := &Entry{Seed: int64(i), Behaviours: []string{"fault kill:one", "op read ok | none"}, New: 2 - i, Steps: testSpace.fresh(rng)}
		if i > 0 {
			e.Parent, e.Mutation = "0001", MutAdd
		}
		if err := c.add(e, "register", 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	again, err := openCorpus(dir, "register", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.entries) != 3 || again.next != 4 {
		t.Fatalf("%d entries, next %d; want 3 and 4", len(again.entries), again.next)
	}
	for i, e := range again.entries {
		w := c.entries[i]
		if e.ID != w.ID || e.Parent != w.Parent || !slices.Equal(e.Steps, w.Steps) || !slices.Equal(e.Behaviours, w.Behaviours) {
			t.Errorf("entry %d read back as %+v, written %+v", i, e, w)
		}
	}
	// A hand-written entry: its schedule alone.
	os.Remove(filepath.Join(dir, "0002.json"))
	if again, err = openCorpus(dir, "register", 30*time.Second); err != nil || again.entries[1].Behaviours != nil {
		t.Errorf("an entry without what it showed: %v", err)
	}

	for name, tc := range map[string]struct {
		setup    func(dir string)
		workload string
		want     string
	}{
		"a folder that is not a corpus": {func(d string) { os.WriteFile(filepath.Join(d, "notes.txt"), []byte("x"), 0o644) }, "register", "not an exploration corpus"},
		"a marker of another format":    {func(d string) { os.WriteFile(filepath.Join(d, corpusMarker), []byte(`{"format":"x"}`), 0o644) }, "register", "is not a shardtest-explore-corpus header"},
		"another workload":              {nil, "idgen", "not idgen"},
		"a schedule that no longer reads": {func(d string) {
			os.WriteFile(filepath.Join(d, "0009"+scheduleSuffix), []byte(`{"format":"shardtest-schedule","steps":[{"at":"soon","fault":"kill:one"}]}`), 0o644)
		}, "register", "entry 0009"},
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			if tc.setup == nil || strings.Contains(name, "schedule") {
				copyDir(t, dir, d)
			}
			if tc.setup != nil {
				tc.setup(d)
			}
			_, err := openCorpus(d, tc.workload, 30*time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	es, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(to, e.Name()), b, 0o644)
	}
}

// Novelty picks the entry whose behaviours few runs showed.
func TestChooseByNovelty(t *testing.T) {
	c := &Campaign{rng: rand.New(rand.NewPCG(5, 6)), hits: map[string]int{"common": 50, "rare": 1}}
	common := &Entry{ID: "common", Behaviours: []string{"common"}}
	rare := &Entry{ID: "rare", Behaviours: []string{"common", "rare"}}
	n := 0
	for range 1000 {
		if c.choose([]*Entry{common, rare}) == rare {
			n++
		}
	}
	// Weights 0.02 and 1.02: the rare one about 98 % of the time.
	if n < 950 {
		t.Errorf("the rare entry picked %d of 1000 times", n)
	}
}

package coverage

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestStore(t *testing.T) {
	root := t.TempDir()
	write := func(rel string, c Coverage) string {
		dir := filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := Write(dir, c); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	write("register/20261204T100000.000Z", Coverage{Behaviours: []string{"op read ok | none", "fault kill:one"}})
	write("explore/20261204T110000Z/runs/explore/20261204T110001.000Z", Coverage{Behaviours: []string{"fault pause:one"}})
	this := write("register/20261204T120000.000Z", Coverage{Behaviours: []string{"fault clock:bump"}})
	bad := filepath.Join(root, "idgen", "20261204T130000.000Z")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, File), []byte("{not json"), 0o644)
	// A link out of the store is not followed.
	outside := t.TempDir()
	if err := Write(outside, Coverage{Behaviours: []string{"fault loss:random"}}); err != nil {
		t.Fatal(err)
	}
	os.Symlink(outside, filepath.Join(root, "latest"))

	st, err := ReadStore(root, this)
	if err != nil {
		t.Fatal(err)
	}
	if st.Runs != 2 || st.Unreadable != 1 {
		t.Errorf("%d runs read, %d unreadable; want 2 and 1", st.Runs, st.Unreadable)
	}
	got := st.New([]string{"fault clock:bump", "fault kill:one", "fault loss:random", "fault pause:one"})
	if want := []string{"fault clock:bump", "fault loss:random"}; !slices.Equal(got, want) {
		t.Errorf("new %v, want %v", got, want)
	}
	s := Summarize(Coverage{Behaviours: []string{"fault clock:bump", "fault kill:one"}}, st)
	if s.NewToStore != 1 || s.StoreRuns != 2 || s.Behaviours != 2 {
		t.Errorf("summary %+v", s)
	}
	if got, want := s.Line(), "coverage: 2 behaviours (2 fault), 1 new to this results store (compared with 2 stored runs)"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}

	empty, err := ReadStore(filepath.Join(root, "nope"), "")
	if err != nil || empty.Runs != 0 {
		t.Errorf("a missing store: %v, %d runs", err, empty.Runs)
	}
	if got := Summarize(Coverage{Behaviours: []string{"fault kill:one"}}, empty).Line(); got != "coverage: 1 behaviour (1 fault), all new: no other run in this results store has a coverage.json" {
		t.Errorf("first run's line: %q", got)
	}
	if got := Summarize(Coverage{}, nil).Line(); got != "coverage: 0 behaviours" {
		t.Errorf("no store: %q", got)
	}
}

package results

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tree builds a results tree: path -> content; a content starting with
// "->" makes a symlink to the rest.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(c, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	goodTest    = `{"name":"register","run_id":"register-1129-201536.132","runtime":"docker","workload":"register","nodes":3,"concurrency":10,"rate":0,"time_limit_ns":10000000000,"op_timeout_ns":1000000000,"entities":100,"skew":0,"per_entity":0,"seed":42}`
	goodResults = `{"test":"register","started":"2026-11-29T20:15:36.132Z","duration_ns":13000000000,"summary":{"Invocations":10,"OK":7,"Fail":2,"Info":1,"Nemesis":0,"Open":0},"verdict":"unchecked"}`
)

func TestList(t *testing.T) {
	type want struct {
		rel, verdict string
		errHas       string // "" means no error
		seed         int64
		noOptions    bool
		files        []string
		started      string
	}
	tests := []struct {
		name  string
		files map[string]string
		want  []want
	}{
		{
			name:  "empty",
			files: map[string]string{},
		},
		{
			name: "good runs newest first, latest symlinks skipped",
			files: map[string]string{
				"register/20261129T201536.132Z/test.json":     goodTest,
				"register/20261129T201536.132Z/results.json":  goodResults,
				"register/20261129T201536.132Z/history.jsonl": "{}\n",
				"register/20261129T201536.132Z/n1.log":        "log",
				"register/20261129T201536.132Z/data/j.db":     "db",
				"register/20261129T201600.000Z/test.json":     strings.Replace(goodTest, `"seed":42`, `"seed":7`, 1),
				"register/20261129T201600.000Z/results.json":  strings.Replace(goodResults, "20:15:36.132", "20:16:00.000", 1),
				"register/latest":                             "->20261129T201600.000Z",
				"latest":                                      "->register/20261129T201600.000Z",
			},
			want: []want{
				{rel: "register/20261129T201600.000Z", verdict: "unchecked", seed: 7, files: []string{"results.json", "test.json"}, started: "2026-11-29T20:16:00Z"},
				{rel: "register/20261129T201536.132Z", verdict: "unchecked", seed: 42, files: []string{"data/j.db", "history.jsonl", "n1.log", "results.json", "test.json"}, started: "2026-11-29T20:15:36.132Z"},
			},
		},
		{
			name: "killed run without results.json",
			files: map[string]string{
				"reg/20261129T201954.118Z/test.json":     goodTest,
				"reg/20261129T201954.118Z/history.jsonl": "{}\n",
			},
			want: []want{{rel: "reg/20261129T201954.118Z", verdict: VerdictIncomplete, errHas: "no results.json", seed: 42, started: "2026-11-29T20:19:54.118Z", files: []string{"history.jsonl", "test.json"}}},
		},
		{
			name: "malformed test.json and results.json",
			files: map[string]string{
				"a/20261129T100000.000Z/test.json":    "{not json",
				"a/20261129T100000.000Z/results.json": goodResults,
				"b/20261129T110000.000Z/test.json":    goodTest,
				"b/20261129T110000.000Z/results.json": `{"verdict": 3`,
			},
			want: []want{
				// a's results.json says 20:15:36, newer than b's folder name.
				{rel: "a/20261129T100000.000Z", verdict: "unchecked", errHas: "test.json: malformed JSON", noOptions: true, started: "2026-11-29T20:15:36.132Z", files: []string{"results.json", "test.json"}},
				{rel: "b/20261129T110000.000Z", verdict: VerdictUnreadable, errHas: "results.json: malformed JSON", seed: 42, started: "2026-11-29T11:00:00Z", files: []string{"results.json", "test.json"}},
			},
		},
		{
			name: "junk: stray files, non-run folders, dangling symlinks",
			files: map[string]string{
				"README.txt":                       "hello",
				"register/notes.txt":               "x",
				"register/empty/":                  "",
				"register/other/readme.md":         "x",
				"register/dangling":                "->nowhere",
				"stray-dir/":                       "",
				"latest":                           "->nowhere",
				"x/odd-name/results.json":          goodResults,
				"x/odd-name/test.json/":            "", // a directory where a file belongs
				"x/20261129T090000.000Z/test.json": goodTest,
			},
			want: []want{
				{rel: "x/odd-name", verdict: "unchecked", errHas: "test.json", noOptions: true, started: "2026-11-29T20:15:36.132Z", files: []string{"results.json"}},
				{rel: "x/20261129T090000.000Z", verdict: VerdictIncomplete, errHas: "no results.json", seed: 42, started: "2026-11-29T09:00:00Z", files: []string{"test.json"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := tree(t, tc.files)
			runs, err := List(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(runs) != len(tc.want) {
				for _, r := range runs {
					t.Logf("got %s %s %q", r.RelDir, r.Verdict, r.Error)
				}
				t.Fatalf("got %d runs, want %d", len(runs), len(tc.want))
			}
			for i, w := range tc.want {
				r := runs[i]
				if r.RelDir != w.rel {
					t.Errorf("run %d: RelDir %q, want %q", i, r.RelDir, w.rel)
				}
				if r.Dir != filepath.Join(root, filepath.FromSlash(w.rel)) {
					t.Errorf("run %d: Dir %q", i, r.Dir)
				}
				if r.Name != strings.Split(w.rel, "/")[0] {
					t.Errorf("run %d: Name %q", i, r.Name)
				}
				if r.Verdict != w.verdict {
					t.Errorf("run %d: verdict %q, want %q", i, r.Verdict, w.verdict)
				}
				if w.errHas == "" && r.Error != "" || !strings.Contains(r.Error, w.errHas) {
					t.Errorf("run %d: Error %q, want one containing %q", i, r.Error, w.errHas)
				}
				if w.noOptions != (r.Options == nil) {
					t.Errorf("run %d: Options %+v", i, r.Options)
				} else if r.Options != nil && r.Options.Seed != w.seed {
					t.Errorf("run %d: seed %d, want %d", i, r.Options.Seed, w.seed)
				}
				if got := strings.Join(r.Files, ","); got != strings.Join(w.files, ",") {
					t.Errorf("run %d: files %s, want %s", i, got, strings.Join(w.files, ","))
				}
				ws, _ := time.Parse(time.RFC3339Nano, w.started)
				if !r.Started.Equal(ws) {
					t.Errorf("run %d: started %v, want %v", i, r.Started, ws)
				}
			}
		})
	}
}

func TestListGoodRunDetails(t *testing.T) {
	root := tree(t, map[string]string{
		"register/20261129T201536.132Z/test.json":    goodTest,
		"register/20261129T201536.132Z/results.json": goodResults,
	})
	runs, err := List(root)
	if err != nil || len(runs) != 1 {
		t.Fatalf("List: %v, %d runs", err, len(runs))
	}
	r := runs[0]
	if r.Summary.Invocations != 10 || r.Summary.OK != 7 || r.Summary.Fail != 2 || r.Summary.Info != 1 {
		t.Errorf("summary %+v", r.Summary)
	}
	if r.Duration != 13*time.Second {
		t.Errorf("duration %v", r.Duration)
	}
	o := r.Options
	if o.Runtime != "docker" || o.Workload != "register" || o.Nodes != 3 || o.TimeLimit != 10*time.Second {
		t.Errorf("options %+v", o)
	}
}

func TestListRootErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ root, want string }{
		{filepath.Join(dir, "missing"), "does not exist"},
		{file, "not a directory"},
	} {
		if _, err := List(tc.root); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("List(%s): %v, want an error containing %q", tc.root, err, tc.want)
		}
	}
}

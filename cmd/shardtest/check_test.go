package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/run"
)

// checkRun writes a stored register run whose read returns read (a JSON
// value), with results.json as a finished run left it.
func checkRun(t *testing.T, read string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "register", "20261129T201536.132Z")
	writeFile(t, filepath.Join(dir, "test.json"), `{"name":"register","workload":"register","runtime":"local","nodes":3,"seed":7}`)
	writeFile(t, filepath.Join(dir, "history.jsonl"), strings.Join([]string{
		`{"format":"shardtest-history","version":1,"test":"register","started":"2026-11-29T20:15:36.132Z"}`,
		`{"index":0,"time":1000,"kind":"phase","process":-1,"f":"main"}`,
		`{"index":1,"time":2000,"kind":"invoke","process":0,"f":"write","entity":"register/a","node":"n1","value":{"value":1}}`,
		`{"index":2,"time":3000,"kind":"ok","process":0,"f":"write","entity":"register/a","node":"n1","value":{"value":1}}`,
		`{"index":3,"time":4000,"kind":"invoke","process":1,"f":"read","entity":"register/a","node":"n2"}`,
		`{"index":4,"time":5000,"kind":"ok","process":1,"f":"read","entity":"register/a","node":"n2","value":{"value":` + read + `}}`,
	}, "\n")+"\n")
	writeFile(t, filepath.Join(dir, "results.json"), `{"test":"register","started":"2026-11-29T20:15:36.132Z","duration_ns":4000000000,"verdict":"valid","checks":[]}`)
	writeFile(t, filepath.Join(dir, "n1.log"), "log\n")
	return dir
}

// check rewrites index.html and junit.xml from its own results and leaves
// results.json alone; a folder that cannot take the reports does not
// change its verdict. The register workload's checkers are many and
// growing, so the test holds the reports to the verdict check printed
// rather than to a fixed list of checkers.
func TestCheckRewritesReports(t *testing.T) {
	tests := []struct {
		name    string
		read    string
		blocked bool // index.html cannot be replaced
		invalid bool // the read makes the history invalid
	}{
		{"linearizable", "1", false, false},
		{"not linearizable", "3", false, true},
		{"reports blocked", "3", true, true},
	}
	verdictRE := regexp.MustCompile(`(?m)^verdict: (\w+)$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := checkRun(t, tt.read)
			if tt.blocked {
				writeFile(t, filepath.Join(dir, "index.html", "x"), "a folder where the page goes")
			}
			before, _ := os.ReadFile(filepath.Join(dir, "results.json"))
			cmd := newRootCmd()
			var out, errOut bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			cmd.SetArgs([]string{"check", dir})
			err := cmd.ExecuteContext(context.Background())
			m := verdictRE.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no verdict printed: %v\n%s", err, out.String())
			}
			verdict := m[1]
			code := exitValid
			var ee *exitError
			if errors.As(err, &ee) {
				code = ee.code
			} else if err != nil {
				t.Fatal(err)
			}
			if code != run.ExitFor(checker.Verdict(verdict)) || tt.invalid != (verdict == "invalid") {
				t.Fatalf("verdict %s, exit %d (invalid expected: %v)", verdict, code, tt.invalid)
			}
			after, _ := os.ReadFile(filepath.Join(dir, "results.json"))
			if !bytes.Equal(before, after) {
				t.Error("check changed results.json")
			}
			if tt.blocked {
				if !strings.Contains(errOut.String(), "reports were not rewritten") || strings.Contains(out.String(), "report: ") {
					t.Errorf("stdout %q stderr %q: want a warning and no report path", out.String(), errOut.String())
				}
				return
			}
			page, err := os.ReadFile(filepath.Join(dir, "index.html"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{
				"re-run by <code>shardtest check</code>",
				`<h1>register <span class="verdict v-` + verdict + `">` + verdict + `</span></h1>`,
				`href="./n1.log"`, "took 4s", "<code>seed</code>",
			} {
				if !strings.Contains(string(page), want) {
					t.Errorf("index.html lacks %q", want)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "availability.svg")); err == nil && !strings.Contains(string(page), `src="./availability.svg"`) {
				t.Error("index.html does not embed availability.svg")
			}
			var suite struct {
				Tests    int `xml:"tests,attr"`
				Failures int `xml:"failures,attr"`
				Cases    []struct {
					Name string `xml:"name,attr"`
				} `xml:"testcase"`
			}
			b, err := os.ReadFile(filepath.Join(dir, "junit.xml"))
			if err != nil || xml.Unmarshal(b, &suite) != nil || suite.Tests == 0 || suite.Tests != len(suite.Cases) || (suite.Failures > 0) != tt.invalid {
				t.Errorf("junit.xml: %v %+v\n%s", err, suite, b)
			}
			for _, want := range []string{"report: " + filepath.Join(dir, "index.html"), "junit: " + filepath.Join(dir, "junit.xml")} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// A stored run folder is untrusted: check reads and writes regular files
// inside it only. A named pipe, or a link out of the folder where check
// reads (test.json, results.json: copied into index.html and junit.xml,
// which serve then serves) or writes (availability.svg, linearizability/),
// is refused with exit 3 naming it, before anything is written, and at
// once: a pipe once blocked check's open for ever. A link deeper down, which
// check only writes over, is replaced rather than written through.
func TestCheckRefusesUntrustedFolder(t *testing.T) {
	const token = "TOKEN-31-outside"
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, out string) // out: a folder outside the run's
		code  int
		names string // the path the error names, relative to the run folder
		link  bool   // check is given the folder through a link, as results/latest
	}{
		{"the folder through a link", func(*testing.T, string, string) {}, exitInvalid, "", true},
		{"history a named pipe", func(t *testing.T, dir, _ string) {
			mkfifo(t, filepath.Join(dir, "history.jsonl"))
		}, exitCannotRun, "history.jsonl", false},
		{"events a named pipe", func(t *testing.T, dir, _ string) {
			mkfifo(t, filepath.Join(dir, "events.jsonl"))
		}, exitCannotRun, "events.jsonl", false},
		{"test.json a link out", func(t *testing.T, dir, out string) {
			writeFile(t, filepath.Join(out, "test.json"), `{"name":"register","workload":"register","runtime":"local","nodes":3,"seed":7,"secret":"`+token+`"}`)
			relink(t, filepath.Join(out, "test.json"), filepath.Join(dir, "test.json"))
		}, exitCannotRun, "test.json", false},
		{"results.json a link out", func(t *testing.T, dir, out string) {
			writeFile(t, filepath.Join(out, "results.json"), `{"test":"`+token+`","started":"2026-11-29T20:15:36.132Z","duration_ns":4000000000,"verdict":"valid","checks":[],"secret":"`+token+`"}`)
			relink(t, filepath.Join(out, "results.json"), filepath.Join(dir, "results.json"))
		}, exitCannotRun, "results.json", false},
		{"availability.svg a link out", func(t *testing.T, dir, out string) {
			relink(t, filepath.Join(out, "victim"), filepath.Join(dir, "availability.svg"))
		}, exitCannotRun, "availability.svg", false},
		{"linearizability a link out", func(t *testing.T, dir, out string) {
			relink(t, out, filepath.Join(dir, "linearizability"))
		}, exitCannotRun, "linearizability", false},
		{"a page in linearizability a link out", func(t *testing.T, dir, out string) {
			if err := os.Mkdir(filepath.Join(dir, "linearizability"), 0o755); err != nil {
				t.Fatal(err)
			}
			relink(t, filepath.Join(out, "victim"), filepath.Join(dir, "linearizability", "register_a.html"))
		}, exitInvalid, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := checkRun(t, "3") // not linearizable: check writes a page
			out := t.TempDir()
			writeFile(t, filepath.Join(out, "victim"), token)
			tt.setup(t, dir, out)
			before, _ := os.ReadDir(out)
			cmd := newRootCmd()
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			arg := dir
			if tt.link {
				arg = filepath.Join(t.TempDir(), "latest")
				relink(t, dir, arg)
			}
			cmd.SetArgs([]string{"check", arg})
			done := make(chan error, 1)
			go func() { done <- cmd.ExecuteContext(context.Background()) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("check hangs")
			}
			code := exitValid
			if err != nil {
				code = exitCode(cmd, err)
			}
			// What went wrong is told in full: the damage is checked too.
			if code != tt.code {
				t.Errorf("exit %d (%v), want %d", code, err, tt.code)
			}
			if tt.names != "" && (err == nil || !strings.Contains(err.Error(), filepath.Join(dir, tt.names))) {
				t.Errorf("error %v does not name %s", err, tt.names)
			}
			if b, err := os.ReadFile(filepath.Join(out, "victim")); err != nil || string(b) != token {
				t.Errorf("the file outside was written: %d bytes, %v", len(b), err)
			}
			if after, _ := os.ReadDir(out); len(after) != len(before) {
				t.Errorf("check wrote %d files outside the run folder", len(after)-len(before))
			}
			for _, f := range []string{"index.html", "junit.xml"} {
				if b, _ := os.ReadFile(filepath.Join(dir, f)); bytes.Contains(b, []byte(token)) {
					t.Errorf("%s holds the outside file's token", f)
				}
			}
			if tt.code == exitCannotRun {
				return
			}
			// Checked: the page went into the folder, over the link.
			if st, err := os.Lstat(filepath.Join(dir, "linearizability", "register_a.html")); err != nil || !st.Mode().IsRegular() {
				t.Errorf("the entity's page: %v, %v; want a regular file in the run folder", st, err)
			}
		})
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
}

// relink makes link (replacing a file there) a symbolic link to target.
func relink(t *testing.T, target, link string) {
	t.Helper()
	os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// check --jobs: a negative count is refused with exit 3 before anything
// is written; --jobs 1 and --jobs 4 print the same verdict and evidence.
func TestCheckJobs(t *testing.T) {
	dir := checkRun(t, "3")
	check := func(jobs string) (string, error) {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"check", "--jobs", jobs, dir})
		err := cmd.ExecuteContext(context.Background())
		return out.String(), err
	}
	_, err := check("-1")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitCannotRun || !strings.Contains(err.Error(), "--jobs -1") {
		t.Fatalf("--jobs -1: %v, want exit %d naming the flag", err, exitCannotRun)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.html")); err == nil {
		t.Fatal("--jobs -1 wrote the report")
	}
	one, err1 := check("1")
	four, err4 := check("4")
	if !errors.As(err1, &ee) || ee.code != exitInvalid || !errors.As(err4, &ee) || ee.code != exitInvalid {
		t.Fatalf("exits %v and %v, want invalid", err1, err4)
	}
	if one != four {
		t.Fatalf("--jobs 1:\n%s\n--jobs 4:\n%s", one, four)
	}
}

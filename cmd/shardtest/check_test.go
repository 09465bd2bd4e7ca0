package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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

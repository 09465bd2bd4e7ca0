package report

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/checker"
)

// What a CI system reads back; declared apart from the writer's types, so
// the test checks the format rather than the writer against itself.
type (
	xSuites struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Errors   int      `xml:"errors,attr"`
		Skipped  int      `xml:"skipped,attr"`
		Time     string   `xml:"time,attr"`
		Suites   []xSuite `xml:"testsuite"`
	}
	xSuite struct {
		XMLName   xml.Name `xml:"testsuite"`
		Name      string   `xml:"name,attr"`
		Tests     int      `xml:"tests,attr"`
		Failures  int      `xml:"failures,attr"`
		Errors    int      `xml:"errors,attr"`
		Skipped   int      `xml:"skipped,attr"`
		Time      string   `xml:"time,attr"`
		Timestamp string   `xml:"timestamp,attr"`
		Props     []struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
		} `xml:"properties>property"`
		Cases     []xCase `xml:"testcase"`
		SystemOut string  `xml:"system-out"`
	}
	xCase struct {
		Name      string    `xml:"name,attr"`
		Classname string    `xml:"classname,attr"`
		Failure   *xProblem `xml:"failure"`
		Error     *xProblem `xml:"error"`
		Skipped   *xProblem `xml:"skipped"`
	}
	xProblem struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	}
)

func (s xSuite) prop(name string) string {
	for _, p := range s.Props {
		if p.Name == name {
			return p.Value
		}
	}
	return ""
}

func TestJUnitSuite(t *testing.T) {
	tests := []struct {
		name                             string
		checks                           []checker.Result
		tests, failures, errors, skipped int
		// outcome per testcase: "pass", "failure", "error" or "skipped".
		outcomes []string
	}{
		{"valid", []checker.Result{{Checker: "linearizable", Verdict: checker.Valid, Summary: "ok"}},
			1, 0, 0, 0, []string{"pass"}},
		{"invalid", []checker.Result{
			{Checker: "linearizable", Verdict: checker.Invalid, Summary: "bad " + hostile, Evidence: []string{"e1 " + hostile, "e2\x00\x1b[31m"}},
			{Checker: "unique-ids", Verdict: checker.Valid}},
			2, 1, 0, 0, []string{"failure", "pass"}},
		{"unknown", []checker.Result{{Checker: "append-log", Verdict: checker.Unknown, Summary: "timed out"}},
			1, 0, 1, 0, []string{"error"}},
		{"odd verdict", []checker.Result{{Verdict: "maybe", Summary: "?"}},
			1, 0, 1, 0, []string{"error"}},
		{"no checker", nil, 1, 0, 0, 1, []string{"skipped"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Test: "register", Started: started, Duration: 1500 * time.Millisecond,
				Verdict: checker.Combine(tt.checks), Checks: tt.checks, Options: optionsJSON}
			var b bytes.Buffer
			if err := WriteJUnitSuite(&b, Run{Dir: "results/register/x", Input: in}); err != nil {
				t.Fatal(err)
			}
			var s xSuite
			if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
				t.Fatalf("does not parse: %v\n%s", err, b.String())
			}
			if s.Name != "register" || s.Tests != tt.tests || s.Failures != tt.failures || s.Errors != tt.errors || s.Skipped != tt.skipped {
				t.Errorf("suite %s: tests %d failures %d errors %d skipped %d", s.Name, s.Tests, s.Failures, s.Errors, s.Skipped)
			}
			if len(s.Cases) != s.Tests {
				t.Fatalf("%d testcases, tests=%d", len(s.Cases), s.Tests)
			}
			if s.Time != "1.500" || s.Timestamp != "2026-11-29T20:15:36" {
				t.Errorf("time %q timestamp %q", s.Time, s.Timestamp)
			}
			if s.prop("seed") != "4242" || s.prop("dir") != "results/register/x" || s.prop("time_limit_ns") != "30000000000" {
				t.Errorf("properties %+v", s.Props)
			}
			if !strings.Contains(s.SystemOut, filepath.Join("results/register/x", IndexFile)) {
				t.Errorf("system-out %q does not point at the page", s.SystemOut)
			}
			for i, c := range s.Cases {
				got := "pass"
				var p *xProblem
				switch {
				case c.Failure != nil:
					got, p = "failure", c.Failure
				case c.Error != nil:
					got, p = "error", c.Error
				case c.Skipped != nil:
					got, p = "skipped", c.Skipped
				}
				if got != tt.outcomes[i] {
					t.Errorf("case %d (%s): %s, want %s", i, c.Name, got, tt.outcomes[i])
				}
				if c.Classname != "shardtest.register" || c.Name == "" {
					t.Errorf("case %d: name %q classname %q", i, c.Name, c.Classname)
				}
				if p != nil && i < len(tt.checks) {
					if p.Message != tt.checks[i].Summary {
						t.Errorf("case %d: message %q, want the summary %q", i, p.Message, tt.checks[i].Summary)
					}
					for _, e := range tt.checks[i].Evidence {
						if want := strings.Map(xmlSafe, e); !strings.Contains(p.Text, want) {
							t.Errorf("case %d: text %q lacks evidence %q", i, p.Text, want)
						}
					}
				}
			}
		})
	}
}

// xmlSafe is what encoding/xml makes of a rune XML cannot hold.
func xmlSafe(r rune) rune {
	if r < 0x20 && r != '\t' && r != '\n' && r != '\r' {
		return '\uFFFD'
	}
	return r
}

// One file for several runs: a testsuites root whose counts add up.
func TestJUnitCombined(t *testing.T) {
	runs := []Run{
		{Dir: "a", Input: Input{Test: "register", Duration: time.Second, Checks: []checker.Result{{Checker: "linearizable", Verdict: checker.Invalid, Summary: "x"}}}},
		{Dir: "b", Input: Input{Test: "idgen", Duration: 2 * time.Second, Checks: []checker.Result{{Checker: "unique-ids", Verdict: checker.Valid}}}},
		{Dir: "c", Input: Input{Test: "append", Duration: 500 * time.Millisecond, Checks: []checker.Result{{Checker: "append-log", Verdict: checker.Unknown}}}},
		{Dir: "d", Input: Input{Test: "bank"}},
		{Skipped: "needs --runtime docker", Input: Input{Test: "journal-cut seed 1"}},
	}
	var b bytes.Buffer
	if err := WriteJUnit(&b, runs); err != nil {
		t.Fatal(err)
	}
	var s xSuites
	if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatalf("does not parse: %v\n%s", err, b.String())
	}
	if len(s.Suites) != 5 || s.Tests != 5 || s.Failures != 1 || s.Errors != 1 || s.Skipped != 2 {
		t.Errorf("%d suites, tests %d failures %d errors %d skipped %d", len(s.Suites), s.Tests, s.Failures, s.Errors, s.Skipped)
	}
	if secs, err := strconv.ParseFloat(s.Time, 64); err != nil || secs != 3.5 {
		t.Errorf("time %q, want 3.5 seconds", s.Time)
	}
	for i, want := range []string{"register", "idgen", "append", "bank", "journal-cut seed 1"} {
		if s.Suites[i].Name != want || s.Suites[i].prop("dir") != runs[i].Dir {
			t.Errorf("suite %d: %s in %s, want %s", i, s.Suites[i].Name, s.Suites[i].prop("dir"), want)
		}
	}
	if c := s.Suites[4].Cases; len(c) != 1 || c[0].Name != "run" || c[0].Skipped == nil || c[0].Skipped.Message != "needs --runtime docker" {
		t.Errorf("skipped run's testcases %+v, want one \"run\" skipped with its reason", c)
	}

	// No runs at all is still a valid file.
	b.Reset()
	if err := WriteJUnit(&b, nil); err != nil {
		t.Fatal(err)
	}
	var empty xSuites
	if err := xml.Unmarshal(b.Bytes(), &empty); err != nil || empty.Tests != 0 || len(empty.Suites) != 0 {
		t.Errorf("empty: %v, %+v", err, empty)
	}
}

// Merging the JUnit files of a suite's parts gives the file the whole suite
// writes, byte for byte, however it was cut; a file that is not a suite's
// is refused.
func TestMergeJUnit(t *testing.T) {
	runs := []Run{
		{Dir: "a", Input: Input{Test: "register", Duration: time.Second, Started: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
			Checks: []checker.Result{{Checker: "linearizable", Verdict: checker.Invalid, Summary: "x", Evidence: []string{"e1", "e2 <&>"}}}}},
		{Dir: "b", Input: Input{Test: "idgen", Duration: 2 * time.Second, Checks: []checker.Result{{Checker: "unique-ids", Verdict: checker.Valid}}}},
		{Dir: "c", Input: Input{Test: "append", Duration: 500 * time.Millisecond, Checks: []checker.Result{{Checker: "append-log", Verdict: checker.Unknown}}}},
		{Skipped: "needs --runtime docker", Input: Input{Test: "journal-cut seed 1"}},
	}
	write := func(rs []Run) []byte {
		var b bytes.Buffer
		if err := WriteJUnit(&b, rs); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	whole := write(runs)
	for _, cuts := range [][]int{{0, 4}, {0, 2, 4}, {0, 1, 2, 3, 4}, {0, 0, 3, 4}} {
		var parts []io.Reader
		for i := 0; i+1 < len(cuts); i++ {
			parts = append(parts, bytes.NewReader(write(runs[cuts[i]:cuts[i+1]])))
		}
		var b bytes.Buffer
		if err := MergeJUnit(&b, parts...); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), whole) {
			t.Errorf("cut at %v: merged\n%s\nwant\n%s", cuts, b.String(), whole)
		}
	}
	var one bytes.Buffer
	if err := WriteJUnitSuite(&one, runs[0]); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]string{"a run's own file": one.String(), "not XML": "{}", "a bad time": `<testsuites><testsuite name="x" time="soon"></testsuite></testsuites>`} {
		if err := MergeJUnit(io.Discard, strings.NewReader(bad)); err == nil {
			t.Errorf("%s: merged", name)
		}
	}
}

// Write puts junit.xml beside index.html.
func TestWriteJUnitFile(t *testing.T) {
	dir := t.TempDir()
	in := Input{Test: "register", Checks: []checker.Result{{Checker: "linearizable", Verdict: checker.Invalid, Summary: "bad"}}}
	if err := Write(dir, in); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, JUnitFile))
	if err != nil {
		t.Fatal(err)
	}
	var s xSuite
	if err := xml.Unmarshal(b, &s); err != nil || s.Failures != 1 {
		t.Fatalf("junit.xml: %v, %+v", err, s)
	}
	if st, err := os.Stat(filepath.Join(dir, JUnitFile)); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("junit.xml mode: %v %v", st.Mode(), err)
	}
}

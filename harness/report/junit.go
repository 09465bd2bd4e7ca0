package report

import (
	"encoding/xml"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardtest/shardtest/checker"
)

// Run is one run for a JUnit file: its folder and what it found.
type Run struct {
	// Dir is the run folder, as the harness names it (a property of the
	// suite and the path of its report, for people reading the CI log).
	Dir string
	// Skipped, when set, says why the run was not run (a scenario the
	// runtime or the implementation cannot take): one testcase "run" with
	// <skipped>, so the suite lists it without counting it as passed.
	Skipped string
	Input
}

// How a checker's verdict shows in JUnit:
//
//   - valid: a passed testcase;
//   - invalid: <failure message=summary type="invalid">, the evidence as
//     its text: the property was violated;
//   - unknown: <error message=summary type="unknown">, the evidence as its
//     text. Not <skipped>: Jenkins does not mark a build unstable for
//     skipped tests, and GitHub Actions reporters (dorny/test-reporter,
//     action-junit-report) and GitLab show skips as neutral, so a checker
//     that timed out or could not read the values would look harmless,
//     while `shardtest run` exits 2 for it. All three count an <error> as
//     not passed and show it apart from failures ("could not decide", not
//     "found a violation"), which is what unknown means;
//   - a run that was skipped: one testcase "run" with <skipped> and the
//     reason;
//   - a run with no checker at all: one testcase "checkers" with
//     <skipped>: nothing was checked, which is a known gap of the workload
//     rather than a checker that could not decide; the exit status still
//     says unknown.
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Errors   int          `xml:"errors,attr"`
		Skipped  int          `xml:"skipped,attr"`
		Time     string       `xml:"time,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		XMLName   xml.Name       `xml:"testsuite"`
		Name      string         `xml:"name,attr"`
		Tests     int            `xml:"tests,attr"`
		Failures  int            `xml:"failures,attr"`
		Errors    int            `xml:"errors,attr"`
		Skipped   int            `xml:"skipped,attr"`
		Time      string         `xml:"time,attr"`
		Timestamp string         `xml:"timestamp,attr,omitempty"`
		Props     *junitProps    `xml:"properties,omitempty"`
		Cases     []junitCase    `xml:"testcase"`
		SystemOut *junitCharData `xml:"system-out,omitempty"`
		// duration is summed into the root's time.
		duration time.Duration
	}
	junitProps struct {
		Props []junitProp `xml:"property"`
	}
	junitProp struct {
		Name  string `xml:"name,attr"`
		Value string `xml:"value,attr"`
	}
	junitCase struct {
		Name      string         `xml:"name,attr"`
		Classname string         `xml:"classname,attr"`
		Failure   *junitProblem  `xml:"failure,omitempty"`
		Error     *junitProblem  `xml:"error,omitempty"`
		Skipped   *junitProblem  `xml:"skipped,omitempty"`
		SystemOut *junitCharData `xml:"system-out,omitempty"`
	}
	junitProblem struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr,omitempty"`
		Text    string `xml:",chardata"`
	}
	junitCharData struct {
		Text string `xml:",chardata"`
	}
)

// WriteJUnitSuite writes one run as a JUnit file whose root is its
// <testsuite> (what junit.xml in a run folder holds).
func WriteJUnitSuite(w io.Writer, r Run) error {
	return writeXML(w, suiteOf(r))
}

// WriteJUnit writes several runs as one JUnit file: a <testsuites> root
// with one <testsuite> per run, in the order given, for a CI job that runs
// many tests and wants one report.
func WriteJUnit(w io.Writer, runs []Run) error {
	root := junitSuites{Name: "shardtest"}
	var total time.Duration
	for _, r := range runs {
		s := suiteOf(r)
		root.Tests += s.Tests
		root.Failures += s.Failures
		root.Errors += s.Errors
		root.Skipped += s.Skipped
		total += s.duration
		root.Suites = append(root.Suites, s)
	}
	root.Time = seconds(total)
	return writeXML(w, root)
}

func writeXML(w io.Writer, v any) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	return nil
}

// suiteOf is a run's testsuite.
func suiteOf(r Run) junitSuite {
	name := r.Test
	if name == "" {
		name = "shardtest"
	}
	// Jenkins and GitLab identify a test by classname and name across
	// builds: both stay the same from run to run (no seed, no time).
	// Testcases carry no time: checkers do not say how long they took,
	// and a made-up 0 would read as a measurement.
	class := "shardtest." + name
	s := junitSuite{Name: name, Time: seconds(r.Duration), duration: max(r.Duration, 0)}
	if !r.Started.IsZero() {
		// The schema's timestamp is ISO 8601 without a zone; it is UTC.
		s.Timestamp = r.Started.UTC().Format("2006-01-02T15:04:05")
	}
	props := []junitProp{{"verdict", string(r.Verdict)}}
	if r.Dir != "" {
		props = append(props, junitProp{"dir", r.Dir})
	}
	if !r.Rechecked.IsZero() {
		props = append(props, junitProp{"rechecked", r.Rechecked.UTC().Format(time.RFC3339)})
	}
	for _, o := range options(r.Options).rows {
		if !o.Scalar || o.Value == "" {
			continue // lists and objects do not fit a property; "" says nothing
		}
		props = append(props, junitProp{o.Key, o.Value})
	}
	s.Props = &junitProps{props}
	if r.Dir != "" {
		s.SystemOut = &junitCharData{"report: " + filepath.Join(r.Dir, IndexFile)}
	}
	if r.Skipped != "" {
		s.Cases = append(s.Cases, junitCase{Name: "run", Classname: class, Skipped: &junitProblem{Message: r.Skipped}})
		s.Tests, s.Skipped = 1, 1
		return s
	}
	if len(r.Checks) == 0 {
		s.Cases = append(s.Cases, junitCase{Name: "checkers", Classname: class,
			Skipped: &junitProblem{Message: "no checker for this workload yet: verdict unknown"}})
		s.Tests, s.Skipped = 1, 1
		return s
	}
	for _, c := range r.Checks {
		tc := junitCase{Name: c.Checker, Classname: class}
		if tc.Name == "" {
			tc.Name = "checker"
		}
		text := strings.Join(c.Evidence, "\n")
		switch c.Verdict {
		case checker.Valid:
		case checker.Invalid:
			tc.Failure = &junitProblem{Message: c.Summary, Type: string(checker.Invalid), Text: text}
			s.Failures++
		case checker.Unknown:
			tc.Error = &junitProblem{Message: c.Summary, Type: string(checker.Unknown), Text: text}
			s.Errors++
		default:
			// A verdict this package does not know is not a pass either.
			tc.Error = &junitProblem{Message: c.Summary, Type: "verdict " + string(c.Verdict), Text: text}
			s.Errors++
		}
		out := c.Summary
		if c.Detection != nil {
			out += "\ntime to detection: " + c.Detection.String()
		}
		for _, f := range c.Files {
			out += "\nfile: " + path.Join(filepath.ToSlash(r.Dir), f)
		}
		if out != "" {
			tc.SystemOut = &junitCharData{out}
		}
		s.Cases = append(s.Cases, tc)
		s.Tests++
	}
	return s
}

// seconds formats d as JUnit wants time attributes: seconds, with
// milliseconds.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(max(d, 0).Seconds(), 'f', 3, 64)
}

// Case is one testcase of a plain suite (WriteCases): passed, failed with
// a message, or skipped with one.
type Case struct {
	Name string
	// Failure, when set, is why it failed; Skipped why it did not apply.
	Failure, Skipped string
	// Text is the failure's detail; Out what the case printed.
	Text, Out string
}

// WriteCases writes one <testsuite> of cases, with properties (sorted by
// name), for a check that is not a run (shardtest conform's rules).
func WriteCases(w io.Writer, name string, props map[string]string, cases []Case, took time.Duration) error {
	s := junitSuite{Name: name, Time: seconds(took), Props: &junitProps{}}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s.Props.Props = append(s.Props.Props, junitProp{k, props[k]})
	}
	for _, c := range cases {
		tc := junitCase{Name: c.Name, Classname: "shardtest." + name}
		switch {
		case c.Failure != "":
			tc.Failure = &junitProblem{Message: c.Failure, Type: "failed", Text: c.Text}
			s.Failures++
		case c.Skipped != "":
			tc.Skipped = &junitProblem{Message: c.Skipped}
			s.Skipped++
		}
		if c.Out != "" {
			tc.SystemOut = &junitCharData{c.Out}
		}
		s.Cases = append(s.Cases, tc)
		s.Tests++
	}
	return writeXML(w, s)
}

// MergeJUnit writes the JUnit files of several suites (each as WriteJUnit
// wrote it: a <testsuites> root) as one, their testsuites in the order
// given and the totals summed: what test-all --shard's jobs produced,
// combined as one unsplit suite would have written it.
func MergeJUnit(w io.Writer, files ...io.Reader) error {
	root := junitSuites{Name: "shardtest"}
	var total float64
	for i, f := range files {
		var s junitSuites
		if err := xml.NewDecoder(f).Decode(&s); err != nil {
			return fmt.Errorf("junit: file %d: %w", i+1, err)
		}
		if s.XMLName.Local != "testsuites" {
			return fmt.Errorf("junit: file %d: root <%s>, want <testsuites>", i+1, s.XMLName.Local)
		}
		for _, st := range s.Suites {
			root.Tests += st.Tests
			root.Failures += st.Failures
			root.Errors += st.Errors
			root.Skipped += st.Skipped
			t, err := strconv.ParseFloat(st.Time, 64)
			if err != nil {
				return fmt.Errorf("junit: file %d: suite %q: time %q: %w", i+1, st.Name, st.Time, err)
			}
			total += t
			root.Suites = append(root.Suites, st)
		}
	}
	root.Time = strconv.FormatFloat(total, 'f', 3, 64)
	return writeXML(w, root)
}

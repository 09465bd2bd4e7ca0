package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/history"
)

// ops numbers hand-written entries.
func ops(entries ...history.Op) []history.Op {
	for i := range entries {
		entries[i].Index = int64(i)
	}
	return entries
}

func nem(t int64, fault, value, err string) history.Op {
	return history.Op{Time: t, Kind: history.Nemesis, Process: -1, F: fault, Value: json.RawMessage(value), Error: err}
}

func opAt(t int64, kind string, p int, node string) history.Op {
	return history.Op{Time: t, Kind: kind, Process: p, F: "write", Entity: "register/r1", Node: node}
}

// jsonl is a history file's text; cut, if not empty, is appended as a last
// line without its newline (the harness died writing it).
func jsonl(t *testing.T, h *history.File, cut string) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	if err := enc.Encode(h.Header); err != nil {
		t.Fatal(err)
	}
	for _, op := range h.Ops {
		if err := enc.Encode(op); err != nil {
			t.Fatal(err)
		}
	}
	return b.String() + cut
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const hostile = `<script>alert("x")</script> it's "quoted" & <b>bold</b>`

var started = time.Date(2026, 11, 29, 20, 15, 36, 132e6, time.UTC)

var optionsJSON = json.RawMessage(`{"name":"register","run_id":"register-1129-201536.132","runtime":"local","workload":"register","nodes":3,"time_limit_ns":30000000000,"seed":4242,"node_args":["--x","y"],"nemesis":"partition"}`)

// A report is written for a hand-built run folder of each kind; every
// page escapes what it shows, loads nothing from the network and links
// only files that exist.
func TestWrite(t *testing.T) {
	s := time.Second.Nanoseconds()
	basic := ops(
		history.Op{Time: 1e6, Kind: history.Phase, Process: -1, F: "main"},
		opAt(2e6, history.Invoke, 0, "n1"), opAt(3e6, history.OK, 0, "n1"),
		opAt(4e6, history.Invoke, 1, "n2"), opAt(5*s, history.Fail, 1, "n2"),
		opAt(6*s, history.Invoke, 2, "n10"), opAt(7*s, history.Info, 2, "n10"),
		opAt(8*s, history.Invoke, 0, "n1"), // left open
	)
	withFaults := ops(
		history.Op{Time: 0, Kind: history.Phase, Process: -1, F: "main"},
		opAt(1*s, history.Invoke, 0, "n1"), opAt(1*s+5, history.OK, 0, "n1"),
		nem(2*s, "partition:halves", `{"action":"inject","began":1900000000,"targets":{"shape":"halves","components":[["n1"],["n2","n3"]]}}`, ""),
		opAt(3*s, history.Invoke, 1, "n2"), opAt(4*s, history.Info, 1, "n2"),
		nem(5*s, "partition:halves", `{"action":"heal","began":4900000000,"targets":{"healed":["n1","n2","n3"]}}`, ""),
		nem(6*s, "kill:one", `{"action":"inject","began":"not a number","targets":{"targets":["n2"],"how":"<kill>"}}`, "exec: "+hostile),
		nem(7*s, "pause:one", `{"action":"heal","began":6900000000}`, ""),
		nem(8*s, "clock:skew", `{"action":"frobnicate"}`, ""),
		nem(9*s, "odd", `[1,2,3]`, ""),
		nem(10*s, "odd", `"a string"`, ""),
		history.Op{Time: 11 * s, Kind: history.Phase, Process: -1, F: "final"},
	)
	tests := []struct {
		name  string
		in    Input
		files map[string]string
		cut   string // a cut-off last line for history.jsonl
		// want and deny are substrings of the page.
		want, deny []string
		// wantImg are embedded images.
		wantImg []string
	}{
		{
			name: "valid",
			in: Input{Verdict: checker.Valid, History: &history.File{Ops: basic},
				Checks: []checker.Result{{Checker: "linearizable", Verdict: checker.Valid, Summary: "3 entities linearizable"}}},
			files: map[string]string{"n1.log": "x", "n2.log": "x", "n10.log": "x", "journal.log": "x", "notes.txt": "x"},
			want: []string{"v-valid", "3 entities linearizable", `href="./n1.log"`, `href="./n10.log"`, `href="./journal.log"`,
				`href="./history.jsonl"`, `href="./test.json"`, `href="./results.json"`, `href="./junit.xml"`,
				"<code>seed</code>", "4242", "30000000000 (30s)", "--x y", "No fault was injected", "<svg", ">n10<",
				"100ms", // bucket width of an 8 s run
			},
			deny: []string{"notes.txt"},
		},
		{
			name: "invalid, hostile evidence and files",
			in: Input{Test: "reg" + hostile, Verdict: checker.Invalid, History: &history.File{Ops: basic},
				Checks: []checker.Result{{
					Checker: "linearizable" + hostile, Verdict: checker.Invalid, Summary: "1 entity not linearizable: " + hostile,
					Evidence: []string{"register/r1: " + hostile, "line\nbreak\x00nul"},
					Files: []string{"linearizability/register-r1.html", "availability.svg", "../outside.html",
						"/etc/passwd", "javascript:alert(1)", "gone.html", "c:drive.html", "sub dir/a b?.html", `a\b.html`},
				}}},
			files: map[string]string{"linearizability/register-r1.html": "<html>", "availability.svg": "<svg/>",
				"c:drive.html": "x", "sub dir/a b?.html": "x", "../outside.html": "x"},
			want: []string{"v-invalid", "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;", "it&#39;s &#34;quoted&#34; &amp;",
				`href="./linearizability/register-r1.html"`, `href="./c:drive.html"`, `href="./sub%20dir/a%20b%3F.html"`,
				"gone.html (not in the run folder)", "../outside.html (not in the run folder)", "/etc/passwd (not in the run folder)"},
			deny:    []string{"<script", "<b>bold", `href="./../`, `href="/etc`, `href="javascript`, "\x00"},
			wantImg: []string{"./availability.svg"},
		},
		{
			name: "unknown",
			in: Input{Verdict: checker.Unknown, History: &history.File{Ops: basic},
				Checks: []checker.Result{{Checker: "unique-ids", Verdict: checker.Unknown, Summary: "nothing to check"},
					{Checker: "weird", Verdict: "maybe", Summary: "a verdict from the future"}}},
			want: []string{"v-unknown", "nothing to check", "v-other", "maybe"},
		},
		{
			name: "no checker",
			in:   Input{History: &history.File{Ops: basic}},
			want: []string{"No checker for this workload yet", "v-unknown"},
		},
		{
			name: "nemesis entries",
			in:   Input{Verdict: checker.Valid, History: &history.File{Ops: withFaults}},
			want: []string{"partition:halves", "shape=halves components=[[n1] [n2 n3]]", "heal: healed=[n1 n2 n3]",
				"kill:one", "not healed", "&lt;kill&gt;", "heal with no inject before it", `action &#34;frobnicate&#34;`,
				"exec: &lt;script&gt;", `stroke="#c00000"`, "Phases: main at 0s, final at 11s", "<rect", "3s"},
			deny: []string{"No fault was injected", "<script"},
		},
		{
			name: "empty history",
			in:   Input{Verdict: checker.Unknown, History: &history.File{}},
			want: []string{"The history has no entries", "No timeline"},
			deny: []string{"<svg"},
		},
		{
			name: "history cut off",
			in:   Input{Verdict: checker.Valid, History: &history.File{Ops: basic}},
			cut:  `{"index":8,"time":9000,"kind":"o`,
			want: []string{"last line was cut off", "<svg"},
		},
		{
			name: "history unreadable",
			in:   Input{Verdict: checker.Unknown, Summary: history.Summary{Invocations: 7, OK: 5}},
			want: []string{"could not be read", "No timeline", `<td class="n">7</td>`},
		},
		{
			name: "options not an object",
			in:   Input{History: &history.File{Ops: basic}, Options: json.RawMessage(`["` + hostile + `"]`)},
			want: []string{"test.json is not a JSON object", "&lt;script&gt;"},
			deny: []string{"<script"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			in := tt.in
			if in.Test == "" {
				in.Test = "register"
			}
			in.Started, in.Duration = started, 12*time.Second
			if in.Options == nil {
				in.Options = optionsJSON
			}
			files := map[string]string{"test.json": string(in.Options), "results.json": "{}"}
			for k, v := range tt.files {
				if strings.HasPrefix(k, "../") {
					writeFiles(t, filepath.Dir(dir), map[string]string{strings.TrimPrefix(k, "../"): v})
					continue
				}
				files[k] = v
			}
			if in.History != nil {
				in.History.Header = history.Header{Format: history.Format, Version: history.Version, Test: in.Test, Started: started}
				files["history.jsonl"] = jsonl(t, in.History, tt.cut)
			}
			writeFiles(t, dir, files)
			if in.History != nil {
				// Read back as the harness does, so a cut-off line is seen.
				h, err := history.ReadFile(filepath.Join(dir, "history.jsonl"))
				if err != nil {
					t.Fatal(err)
				}
				if h.Truncated != (tt.cut != "") {
					t.Fatalf("truncated = %v", h.Truncated)
				}
				in.History, in.Summary = h, h.Summarize()
			}

			if err := Write(dir, in); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, IndexFile))
			if err != nil {
				t.Fatal(err)
			}
			page := string(b)
			if in.History != nil {
				// The page drawn from a streaming pass over the history,
				// with only its outline held, is the same page.
				z := NewAnalyzer()
				outline := &history.File{Header: in.History.Header, Truncated: in.History.Truncated}
				for i := range in.History.Ops {
					op := in.History.Ops[i]
					z.Observe(&op)
					if op.Kind == history.Nemesis || op.Kind == history.Phase {
						outline.Ops = append(outline.Ops, op)
					}
				}
				streamed := in
				streamed.History, streamed.Analyzed = outline, z
				if err := Write(dir, streamed); err != nil {
					t.Fatal(err)
				}
				b2, err := os.ReadFile(filepath.Join(dir, IndexFile))
				if err != nil {
					t.Fatal(err)
				}
				if string(b2) != page {
					t.Errorf("the page from the streamed analysis differs from the page from the history")
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			for _, d := range tt.deny {
				if strings.Contains(page, d) {
					t.Errorf("page has %q", d)
				}
			}
			for _, img := range tt.wantImg {
				if !strings.Contains(page, `<img class="embedded" src="`+img+`"`) {
					t.Errorf("page does not embed %s", img)
				}
			}
			checkSelfContained(t, dir, page)
			if _, err := os.Stat(filepath.Join(dir, JUnitFile)); err != nil {
				t.Errorf("junit.xml: %v", err)
			}
			if tmp, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(tmp) > 0 {
				t.Errorf("temporary files left: %v", tmp)
			}
		})
	}
}

var attrRE = regexp.MustCompile(`\s(href|src|action|xlink:href)="([^"]*)"`)

// checkSelfContained checks that the page opens offline: no scripts, no
// network references, and every link and image is a file in dir.
func checkSelfContained(t *testing.T, dir, page string) {
	t.Helper()
	for _, bad := range []string{"http://", "https://", "<script", "@import", "url("} {
		if strings.Contains(strings.ToLower(page), bad) {
			t.Errorf("page contains %q", bad)
		}
	}
	links := 0
	for _, m := range attrRE.FindAllStringSubmatch(page, -1) {
		ref := html.UnescapeString(m[2])
		if strings.HasPrefix(ref, "#") {
			continue
		}
		u, err := url.Parse(ref)
		if err != nil || u.Scheme != "" || u.Host != "" || strings.HasPrefix(u.Path, "/") {
			t.Errorf("%s=%q is not a relative link", m[1], ref)
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(u.Path))
		if rel, err := filepath.Rel(dir, p); err != nil || !filepath.IsLocal(rel) {
			t.Errorf("%s=%q leaves the run folder", m[1], ref)
			continue
		}
		if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() {
			t.Errorf("%s=%q does not resolve to a file: %v", m[1], ref, err)
		}
		links++
	}
	if links == 0 {
		t.Error("page links no file")
	}
}

// A long run with odd names still gives a page of bounded size, with at
// most maxBuckets buckets and capped rows.
func TestWriteBounded(t *testing.T) {
	const n = 200_000
	s := time.Second.Nanoseconds()
	hops := make([]history.Op, 0, n)
	var checks []checker.Result
	bigTargets := `{"shape":"x","components":[` + strings.Repeat(`["n1","n2","n3"],`, 500) + `["n4"]]}`
	for i := 0; len(hops) < n; i++ {
		at := int64(i) * (2 * 3600 * s / n) // two hours
		switch {
		case i%100 == 50:
			fault := fmt.Sprintf("fault-%d", i%40)
			hops = append(hops, nem(at, fault, `{"action":"inject","began":0,"targets":`+bigTargets+`}`, strings.Repeat("e", 1000)))
		case i%100 == 99:
			hops = append(hops, nem(at, fmt.Sprintf("fault-%d", (i-49)%40), `{"action":"heal","began":0}`, ""))
		case i%1000 == 7:
			hops = append(hops, history.Op{Time: at, Kind: history.Phase, Process: -1, F: "phase"})
		default:
			p := i % 500
			node := fmt.Sprintf("node-%d-%s", p, strings.Repeat("x", 30)) // 500 nodes with long names
			op := history.Op{Time: at, Kind: history.Invoke, Process: p, F: fmt.Sprintf("f%d", i%2000), Node: node}
			if i%2 == 1 {
				op.Kind = []string{history.OK, history.OK, history.Fail, history.Info}[i%4]
			}
			hops = append(hops, op)
		}
	}
	for i := range 3 {
		ev := make([]string, 40)
		for j := range ev {
			ev[j] = fmt.Sprintf("op #%d: %s", j, strings.Repeat("y", 200))
		}
		checks = append(checks, checker.Result{Checker: fmt.Sprint("c", i), Verdict: checker.Invalid, Summary: "bad", Evidence: ev})
	}
	h := &history.File{Ops: ops(hops...)}
	in := Input{Test: "long", Started: started, Duration: 2 * time.Hour, Verdict: checker.Invalid, Checks: checks,
		Summary: h.Summarize(), History: h, Options: optionsJSON}

	a := analyze(h)
	if a.N > maxBuckets || a.N < maxBuckets/3 {
		t.Errorf("%d buckets of %v, want at most %d (and not too few)", a.N, a.Width, maxBuckets)
	}
	if len(a.Nodes) != maxNodeRows+1 || !strings.Contains(a.Nodes[maxNodeRows].Name, "other nodes") {
		t.Errorf("%d node rows, want %d and one for the rest", len(a.Nodes), maxNodeRows)
	}

	var page bytes.Buffer
	if err := WriteHTML(&page, t.TempDir(), in); err != nil {
		t.Fatal(err)
	}
	const bound = 1 << 20
	if page.Len() > bound {
		t.Errorf("page is %d bytes for %d entries, want at most %d", page.Len(), n, bound)
	}
	t.Logf("page: %d bytes for %d entries", page.Len(), n)
	for _, want := range []string{"more fault intervals or actions are not listed", "(other operations)", "other nodes", "op #39"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// Evidence beyond the page's budget is counted, not shown.
func TestEvidenceBudget(t *testing.T) {
	line := strings.Repeat("z", 100<<10)
	in := Input{Test: "t", Verdict: checker.Invalid, Checks: []checker.Result{
		{Checker: "a", Verdict: checker.Invalid, Evidence: []string{line, line, line, line, line, line, line, "short"}},
	}}
	var page bytes.Buffer
	if err := WriteHTML(&page, t.TempDir(), in); err != nil {
		t.Fatal(err)
	}
	if page.Len() > maxEvidenceBytes+200<<10 {
		t.Errorf("page is %d bytes", page.Len())
	}
	omitted := 7 - maxEvidenceBytes/(100<<10)
	if !strings.Contains(page.String(), fmt.Sprintf("%d more evidence line(s) left out", omitted)) || !strings.Contains(page.String(), "short") {
		t.Error("page does not say what it left out, or dropped the short line")
	}
}

// Write fails, and says which file, when the folder cannot take them.
func TestWriteError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	err := Write(dir, Input{Test: "t"})
	if err == nil || !strings.Contains(err.Error(), IndexFile) || !strings.Contains(err.Error(), JUnitFile) {
		t.Fatalf("err = %v, want one naming both files", err)
	}
}

func TestCompactJSON(t *testing.T) {
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{`{"shape":"halves","components":[["n1"],["n2","n3"]]}`, 100, "shape=halves components=[[n1] [n2 n3]]"},
		{`{"drops":{"n1":{"drop_in":["n2"],"drop_out":[]}},"x":null,"y":true,"z":1.5}`, 100, "drops={n1={drop_in=[n2] drop_out=[]}} x=null y=true z=1.5"},
		{`["a",{"b":[]},3]`, 100, "a {b=[]} 3"},
		{`"just a string"`, 100, "just a string"},
		{`{}`, 100, ""},
		{``, 100, ""},
		{`{"a":`, 100, `{"a":`},
		{`not json`, 5, "not …"},
		{`{"k":"` + strings.Repeat("v", 1000) + `"}`, 10, "k=vvvvvvv…"},
		{`[` + strings.Repeat(`[`, 5000) + strings.Repeat(`]`, 5000) + `]`, 8, "[[[[[[[…"},
	}
	for _, tt := range tests {
		if got := compactJSON(json.RawMessage(tt.in), tt.limit); got != tt.want {
			t.Errorf("compactJSON(%.40q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
	}
}

func TestBucketWidth(t *testing.T) {
	s := time.Second.Nanoseconds()
	tests := []struct {
		end  int64
		want time.Duration
	}{
		{0, 100 * time.Millisecond},
		{2 * s, 100 * time.Millisecond},
		{30 * s, 200 * time.Millisecond},
		{60 * s, 500 * time.Millisecond},
		{300 * s, 2 * time.Second},
		{3600 * s, 15 * time.Second},
		{30 * 24 * 3600 * s, 3 * time.Hour},
		{400 * 24 * 3600 * s, time.Duration(400*24*3600*s/maxBuckets + 1)},
		{1<<63 - 1, time.Duration((1<<63-1)/maxBuckets + 1)},
		{-5, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		w := bucketWidth(tt.end)
		if w != tt.want {
			t.Errorf("bucketWidth(%v) = %v, want %v", time.Duration(tt.end), w, tt.want)
		}
		if n := max(tt.end, 0)/int64(w) + 1; n > maxBuckets {
			t.Errorf("bucketWidth(%v): %d buckets", time.Duration(tt.end), n)
		}
	}
}

func TestNaturalLess(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"n2", "n10", true},
		{"n10", "n2", false},
		{"n1", "n1", false},
		{"journal", "n1", true},
		{"n01", "n2", true},
		{"n", "n1", true},
		{"", "a", true},
		{"n1x", "n1y", true},
	}
	for _, tt := range tests {
		if got := naturalLess(tt.a, tt.b); got != tt.want {
			t.Errorf("naturalLess(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "ab…"},
		{"ééé", 2, "é…"},
		{"a\xffb", 5, "a\uFFFDb"},
		{"", 0, ""},
	}
	for _, tt := range tests {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// Odd histories do not panic: times out of order, negative or huge,
// completions without invocations, unknown kinds.
func TestAnalyzeOdd(t *testing.T) {
	tests := []struct {
		name string
		ops  []history.Op
	}{
		{"negative time", ops(opAt(-5, history.OK, 0, "n1"))},
		{"huge time", ops(opAt(1<<63-1, history.Info, 0, "n1"), opAt(0, history.OK, 0, "n1"))},
		{"unknown kind", ops(history.Op{Kind: "weird", Time: 5})},
		{"nemesis without value", ops(nem(1, "x", ``, ""), nem(2, "x", `null`, ""))},
		{"only phases", ops(history.Op{Kind: history.Phase, F: "main"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var page bytes.Buffer
			in := Input{Test: "odd", History: &history.File{Ops: tt.ops}}
			if err := WriteHTML(&page, t.TempDir(), in); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(page.String(), "</html>") {
				t.Error("page incomplete")
			}
		})
	}
}

// An invalid run's page leads with what failed: a line per invalid checker
// (linked to its evidence, with its time to detection) before the checks;
// the timeline marks the first violation; long evidence starts folded,
// short evidence open.
func TestPageShowsWhatFailedFirst(t *testing.T) {
	s := time.Second.Nanoseconds()
	h := ops(
		history.Op{Time: 0, Kind: history.Phase, Process: -1, F: "main"},
		opAt(1*s, history.Invoke, 0, "n1"), opAt(1*s+5, history.OK, 0, "n1"),
		nem(2*s, "partition:halves", `{"action":"inject","began":1900000000}`, ""),
		opAt(9*s, history.Invoke, 1, "n2"), opAt(9*s+5, history.OK, 1, "n2"),
	)
	var long []string
	for i := range 20 {
		long = append(long, fmt.Sprintf("register/e%d: not linearizable", i))
	}
	in := Input{Test: "t", Verdict: checker.Invalid, History: &history.File{Ops: h}, Checks: []checker.Result{
		{Checker: "single-instance", Verdict: checker.Valid, Summary: "never two alive at once", Evidence: []string{"one line"}},
		{Checker: "linearizable", Verdict: checker.Invalid, Summary: "20 entities not linearizable", Evidence: long,
			FirstViolation: 5 * s, Detection: &checker.Detection{Fault: "partition:halves", FaultAt: 2 * s, At: 5 * s, After: 3 * time.Second},
			Smallest: &checker.Counterexample{What: "register/e7", Ops: 5, File: "linearizability/register-e7.html"}},
	}}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "linearizability"), 0o755)
	os.WriteFile(filepath.Join(dir, "linearizability", "register-e7.html"), []byte("x"), 0o644)
	var b bytes.Buffer
	if err := WriteHTML(&b, dir, in); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	failed, checks := strings.Index(page, `<h2 id="failed">What failed</h2>`), strings.Index(page, `<h2 id="checks">`)
	if failed < 0 || checks < 0 || failed > checks {
		t.Fatalf("no \"What failed\" ahead of the checks (%d, %d)", failed, checks)
	}
	lead := page[failed:checks]
	for _, want := range []string{`href="#check-linearizable"`, "20 entities not linearizable", "3s after partition:halves took effect",
		"The smallest counterexample: register/e7 (5 operations)", `href="./linearizability/register-e7.html"`} {
		if !strings.Contains(lead, want) {
			t.Errorf("the lead lacks %q:\n%s", want, lead)
		}
	}
	if strings.Contains(lead, "single-instance") {
		t.Error("a valid checker in the lead")
	}
	for _, want := range []string{`id="check-linearizable"`, "<details><summary>20 lines of evidence</summary>", `stroke="#c00000" stroke-width="2"`, "✕ linearizable", "first violation proven at 5s"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if i := strings.Index(page, `id="check-single-instance"`); i < 0 || strings.Contains(page[i:strings.Index(page[i:], "</div>")+i], "<details>") {
		t.Error("one line of evidence folded")
	}
}

// The coverage section: the line with the store's novelty, the situations
// grouped, what never happened, and hostile strings escaped.
func TestPageShowsCoverage(t *testing.T) {
	dir := t.TempDir()
	c := coverage.Coverage{Behaviours: []string{
		"event singleton-started @oldest | none",
		"event singleton-started @younger | partition/majority",
		"fault partition:halves",
		"op read ok | none",
		"pair member-unreachable >same downing-decision | partition",
		"reply entity-moved | kill",
		"triple a > b > <script> | none",
	}, Events: 12, NeverHappened: []string{"hand-over-gave-up"}}
	s := coverage.Summarize(c, &coverage.Store{Seen: map[string]bool{"op read ok | none": true}, Runs: 3})
	in := Input{Test: "t", Verdict: checker.Valid, Coverage: &c, CoverageSummary: &s}
	var b bytes.Buffer
	if err := WriteHTML(&b, dir, in); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		`<h2 id="coverage">Coverage</h2>`,
		"coverage: 7 behaviours (1 fault, 1 op, 1 reply, 2 event, 1 pair, 1 triple), 6 new to this results store (compared with 3 stored runs)",
		"<code>singleton-started</code></td><td class=\"targets\">@oldest none, @younger partition/majority",
		"hand-over-gave-up",
		"member-unreachable &gt;same downing-decision | partition",
		"&lt;script&gt;",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>") {
		t.Error("a behaviour's text reached the page unescaped")
	}
	b.Reset()
	if err := WriteHTML(&b, dir, Input{Test: "t"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), `id="coverage"`) {
		t.Error("a run without coverage has a coverage section")
	}
}

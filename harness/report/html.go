package report

import (
	"fmt"
	"html/template"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/history"
)

// Bounds on the checkers' part of the page. Checkers already keep their
// evidence short; these only guard the page against one that does not.
const (
	maxEvidenceBytes = 256 << 10 // evidence of all checkers together
	maxCheckerFiles  = 200       // links per checker
	maxImages        = 10        // SVGs embedded per checker
	maxLogs          = 200       // *.log links
)

type (
	pageView struct {
		Test, Dir    string
		Verdict      string
		VerdictClass string
		Started      string
		Duration     string
		Rechecked    string
		Checks       []checkView
		// Failed leads the page: one line per checker that said invalid.
		Failed          []failedView
		EvidenceOmitted int
		Options         []optionRow
		MoreOptions     int
		OptionsRaw      string
		HistoryNotes    []string
		Counts          []countRow
		Fs              []fStats
		Nodes           []nodeRow
		Timeline        *timelineView
		Coverage        *coverageView
		RunFiles        []fileView
		Logs            []fileView
		MoreLogs        int
	}
	failedView struct {
		Name, Anchor, Summary, When string
		// Smallest is the counterexample with the fewest operations, and
		// its visualization.
		Smallest     string
		SmallestFile *fileView
	}
	checkView struct {
		Name, Verdict, Class, Summary string
		// Proves is what the checker proves (its registry entry's doc).
		Proves string
		// Anchor is the check's id on the page.
		Anchor   string
		Evidence []string
		// Fold: the evidence is long, so it starts folded.
		Fold bool
		// EvidenceOmitted counts lines left out to bound the page.
		EvidenceOmitted int
		Files           []fileView
		MoreFiles       int
		Images          []fileView
	}
	fileView struct {
		Name, Href string
		// Exists: the file is in the run folder (only then is it linked).
		Exists bool
	}
	countRow struct {
		Label string
		Value int
		Note  string
	}
	nodeRow struct {
		Name              string
		OK, Fail, Info, N int
	}
	timelineView struct {
		Width       string
		Span        string
		Buckets     int
		Phases      []phaseRow
		MorePhases  int
		SVG         svgView
		Faults      []faultRow
		MoreFaults  int
		NoFaults    bool
		Completions int
	}
	phaseRow struct{ Name, At string }
	faultRow struct {
		Fault, Inject, Began, Heal, Held, Targets, Error string
	}
)

// WriteHTML writes the report page of the run in dir. dir is only read:
// to link the files that exist there.
func WriteHTML(w io.Writer, dir string, in Input) error {
	t, err := template.New("page").Parse(pageTemplate + coverageTemplate)
	if err != nil {
		return fmt.Errorf("report template: %w", err)
	}
	var root *os.Root
	if r, err := os.OpenRoot(dir); err == nil {
		defer r.Close()
		root = r
	}
	if err := t.Execute(w, buildPage(root, dir, in)); err != nil {
		return fmt.Errorf("report page: %w", err)
	}
	return nil
}

func buildPage(root *os.Root, dir string, in Input) pageView {
	p := pageView{
		Test:         clip(in.Test, 200),
		Dir:          clip(dir, 500),
		Verdict:      clip(string(in.Verdict), 40),
		VerdictClass: verdictClass(in.Verdict),
		Duration:     in.Duration.Round(time.Millisecond).String(),
	}
	if p.Verdict == "" {
		p.Verdict = string(checker.Unknown)
	}
	if !in.Started.IsZero() {
		p.Started = in.Started.UTC().Format("2006-01-02 15:04:05.000 UTC")
	}
	if !in.Rechecked.IsZero() {
		p.Rechecked = in.Rechecked.UTC().Format("2006-01-02 15:04:05 UTC")
	}

	budget := maxEvidenceBytes
	for _, c := range in.Checks {
		cv := checkView{Name: clip(c.Checker, 200), Verdict: clip(string(c.Verdict), 40), Class: verdictClass(c.Verdict),
			Summary: clip(c.Summary, maxSummaryText)}
		if e, ok := checker.Lookup(c.Checker); ok {
			cv.Proves = e.Doc
		}
		if c.Detection != nil {
			cv.Summary = clip(c.Summary+" — time to detection: "+c.Detection.String(), maxSummaryText)
		}
		for _, e := range c.Evidence {
			if len(e) > budget {
				cv.EvidenceOmitted++
				continue
			}
			budget -= len(e)
			cv.Evidence = append(cv.Evidence, strings.ToValidUTF8(e, "\uFFFD"))
		}
		p.EvidenceOmitted += cv.EvidenceOmitted
		for i, f := range c.Files {
			if i == maxCheckerFiles {
				cv.MoreFiles = len(c.Files) - i
				break
			}
			fv := fileIn(root, f)
			cv.Files = append(cv.Files, fv)
			if fv.Exists && strings.EqualFold(path.Ext(f), ".svg") && len(cv.Images) < maxImages {
				cv.Images = append(cv.Images, fv)
			}
		}
		cv.Anchor = anchor(c.Checker)
		cv.Fold = len(cv.Evidence) > foldEvidence
		p.Checks = append(p.Checks, cv)
		if c.Verdict == checker.Invalid {
			fv := failedView{Name: cv.Name, Anchor: cv.Anchor, Summary: clip(c.Summary, maxSummaryText)}
			switch {
			case c.Detection != nil:
				fv.When = c.Detection.String() + "."
			case c.FirstViolation > 0:
				fv.When = "First violation proven at " + fmtTime(c.FirstViolation) + "."
			}
			if c.Smallest != nil {
				fv.Smallest = fmt.Sprintf("%s (%d operations)", clip(c.Smallest.What, 200), c.Smallest.Ops)
				if c.Smallest.File != "" {
					if f := fileIn(root, c.Smallest.File); f.Exists {
						fv.SmallestFile = &f
					}
				}
			}
			p.Failed = append(p.Failed, fv)
		}
	}

	p.Coverage = coverageSection(in)

	ov := options(in.Options)
	p.Options, p.MoreOptions, p.OptionsRaw = ov.rows, ov.more, ov.raw

	s := in.Summary
	p.Counts = []countRow{
		{"invocations", s.Invocations, ""},
		{"ok", s.OK, "took effect"},
		{"fail", s.Fail, "certainly did not take effect"},
		{"info", s.Info, "unknown outcome (timeout, lost connection)"},
		{"open", s.Open, "invocations with no completion: unknown outcome"},
		{"nemesis", s.Nemesis, "fault actions (inject and heal)"},
	}
	if in.History == nil {
		p.HistoryNotes = append(p.HistoryNotes, "The history could not be read: the counts are those the run recorded, and there is no timeline.")
	} else {
		h := in.History
		entries := len(h.Ops)
		if in.Analyzed != nil {
			entries = in.Analyzed.Entries()
		}
		p.Counts = append(p.Counts, countRow{"entries", entries, "every line after the header"})
		if h.Truncated {
			p.HistoryNotes = append(p.HistoryNotes, "The history's last line was cut off (the harness stopped while writing it); it was left out.")
		}
		if entries == 0 {
			p.HistoryNotes = append(p.HistoryNotes, "The history has no entries.")
		} else {
			var a *analysis
			if in.Analyzed != nil {
				a = in.Analyzed.analysis()
			} else {
				a = analyze(h)
			}
			p.Fs = a.Fs
			for i := range p.Fs {
				p.Fs[i].F = clip(p.Fs[i].F, 80)
			}
			for _, n := range a.Nodes {
				name := clip(n.Name, 80)
				if n.Name == "" {
					name = "(no node)"
				}
				p.Nodes = append(p.Nodes, nodeRow{name, n.Total.OK, n.Total.Fail, n.Total.Info, n.Total.total()})
			}
			p.Timeline = timeline(a, violationMarks(in.Checks))
		}
	}

	for _, f := range []string{history.HistoryFile, history.EventsFile, TestFile, ResultsFile, coverage.File, JUnitFile} {
		p.RunFiles = append(p.RunFiles, fileIn(root, f))
	}
	logs := logFiles(dir)
	if len(logs) > maxLogs {
		p.MoreLogs = len(logs) - maxLogs
		logs = logs[:maxLogs]
	}
	for _, l := range logs {
		p.Logs = append(p.Logs, fileIn(root, l))
	}
	return p
}

// foldEvidence: a checker with more evidence lines than this shows them
// folded, so that the next checker is not pages away.
const foldEvidence = 8

// anchor is a checker's id on the page.
func anchor(name string) string {
	b := []byte("check-")
	for _, c := range []byte(name) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b = append(b, c)
		} else {
			b = append(b, '-')
		}
	}
	return string(b)
}

// violationMarks are the first violations of the invalid checkers, for
// the timeline.
func violationMarks(checks []checker.Result) []mark {
	var out []mark
	for _, c := range checks {
		if c.Verdict == checker.Invalid && c.FirstViolation > 0 {
			out = append(out, mark{t: c.FirstViolation, label: clip(c.Checker, maxLabel)})
		}
	}
	return out
}

func timeline(a *analysis, marks []mark) *timelineView {
	tv := &timelineView{
		Width:       a.Width.String(),
		Span:        fmtTime(a.End),
		Buckets:     a.N,
		MorePhases:  a.MorePhases,
		SVG:         a.svg(marks),
		MoreFaults:  a.MoreFaults,
		NoFaults:    len(a.Intervals) == 0,
		Completions: a.All.Total.total(),
	}
	for _, ph := range a.Phases {
		tv.Phases = append(tv.Phases, phaseRow{clip(ph.Name, 80), fmtTime(ph.Time)})
	}
	for i, iv := range a.Intervals {
		if i == maxNemesisRows {
			tv.MoreFaults += len(a.Intervals) - i
			break
		}
		r := faultRow{Fault: clip(iv.Fault, 80), Inject: fmtTime(iv.Inject), Began: fmtTime(iv.Began),
			Heal: healText(iv.Heal), Targets: iv.Targets, Error: clip(iv.Error, maxTargetsText)}
		if iv.Inject < 0 {
			r.Inject = "–"
		}
		if iv.Inject >= 0 && iv.Heal >= iv.Inject {
			r.Held = fmtTime(iv.Heal - iv.Inject)
		}
		tv.Faults = append(tv.Faults, r)
	}
	return tv
}

// fileIn is a link to the file rel (slash-separated, relative to the run
// folder) if it is a regular file inside it; rel comes from checker
// output, so a path that leaves the folder ("..", absolute, a symlink out)
// is shown but not linked.
func fileIn(root *os.Root, rel string) fileView {
	fv := fileView{Name: clip(rel, 300)}
	native := filepath.FromSlash(rel)
	if root == nil || !filepath.IsLocal(native) || strings.ContainsRune(rel, '\\') {
		return fv
	}
	st, err := root.Lstat(native)
	if err != nil || !st.Mode().IsRegular() {
		return fv
	}
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	// "./" keeps a first segment with a colon from reading as a scheme.
	fv.Href, fv.Exists = "./"+strings.Join(segs, "/"), true
	return fv
}

// logFiles lists the *.log files directly in dir, sorted.
func logFiles(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var logs []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, e.Name())
		}
	}
	sort.Slice(logs, func(i, j int) bool { return naturalLess(logs[i], logs[j]) })
	return logs
}

// verdictClass is the CSS class of a verdict (a fixed set: the verdict
// itself may be any string).
func verdictClass(v checker.Verdict) string {
	switch v {
	case checker.Valid, checker.Invalid, checker.Unknown:
		return string(v)
	case "":
		return string(checker.Unknown)
	}
	return "other"
}

const pageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src 'self' file:; base-uri 'none'; form-action 'none'">
<title>{{.Test}}: {{.Verdict}} (shardtest)</title>
<style>
body { font-family: sans-serif; margin: 1.5em; color: #1a1a1a; max-width: 1200px; }
h1 { margin-bottom: .2em; }
h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code, pre, .mono { font-family: monospace; }
.verdict { font-weight: bold; padding: .1em .45em; border-radius: .2em; }
.v-valid { background: #c8f0c8; color: #064f06; }
.v-invalid { background: #f6c4c4; color: #7a0505; }
.v-unknown { background: #f8e3a8; color: #6b4b00; }
.v-other { background: #e4e4e4; color: #444; }
.check { border: 1px solid #ddd; border-radius: .3em; padding: .4em .8em; margin: .8em 0; }
.check h3 { margin: .2em 0; font-size: 1.05em; }
ol.evidence { margin: .3em 0; padding-left: 2.5em; }
ol.evidence li { white-space: pre-wrap; overflow-wrap: anywhere; font-family: monospace; font-size: .9em; margin: .15em 0; }
.note { color: #555; font-size: .92em; }
.warn { background: #fff4d6; border: 1px solid #e8cf85; padding: .4em .7em; }
.missing { color: #888; }
img.embedded { max-width: 100%; border: 1px solid #ddd; margin: .4em 0; display: block; }
.timeline { overflow-x: auto; }
.timeline svg { font-family: sans-serif; font-size: 11px; }
.targets { font-family: monospace; font-size: .85em; overflow-wrap: anywhere; }
nav a { margin-right: 1em; }
ul.failed li { margin: .3em 0; }
details > summary { cursor: pointer; color: #333; margin: .3em 0; }
.legend span { display: inline-block; width: .9em; height: .9em; vertical-align: middle; margin: 0 .3em 0 .8em; }
</style>
</head>
<body>
<h1>{{.Test}} <span class="verdict v-{{.VerdictClass}}">{{.Verdict}}</span></h1>
<p class="note">{{if .Started}}started {{.Started}}, {{end}}took {{.Duration}} &middot; run folder <code>{{.Dir}}</code></p>
{{if .Rechecked}}<p class="warn">The checkers were re-run by <code>shardtest check</code> at {{.Rechecked}}: the verdicts here are theirs. <code>results.json</code> still holds the verdict the run itself reached.</p>{{end}}
{{if .Failed}}<h2 id="failed">What failed</h2>
<ul class="failed">{{range .Failed}}<li><a href="#{{.Anchor}}"><b>{{.Name}}</b></a>: {{.Summary}}{{if .When}} — {{.When}}{{end}}{{if .Smallest}}<br>The smallest counterexample: {{.Smallest}}{{with .SmallestFile}}, <a href="{{.Href}}">see it step by step</a>{{end}}.{{end}}</li>
{{end}}</ul>
<p class="note">The timeline marks each first violation with a red line; each checker's evidence is below.</p>{{end}}
<nav>{{if .Failed}}<a href="#failed">what failed</a>{{end}}<a href="#checks">checks</a><a href="#timeline">timeline</a>{{if .Coverage}}<a href="#coverage">coverage</a>{{end}}<a href="#history">history</a><a href="#options">options</a><a href="#files">files</a></nav>

<h2 id="checks">Checks</h2>
{{range .Checks}}
<div class="check" id="{{.Anchor}}">
<h3>{{.Name}} <span class="verdict v-{{.Class}}">{{.Verdict}}</span></h3>
{{if .Proves}}<p class="note">Checks: {{.Proves}}.</p>{{end}}
<p>{{.Summary}}</p>
{{if .Fold}}<details><summary>{{len .Evidence}} lines of evidence</summary><ol class="evidence">{{range .Evidence}}<li>{{.}}</li>{{end}}</ol></details>
{{else if .Evidence}}<ol class="evidence">{{range .Evidence}}<li>{{.}}</li>{{end}}</ol>{{end}}
{{if .EvidenceOmitted}}<p class="note">{{.EvidenceOmitted}} more evidence line(s) left out to keep this page small; results.json holds all the evidence of the run's own check.</p>{{end}}
{{if .Files}}<p>Files: {{range .Files}}{{if .Exists}}<a href="{{.Href}}">{{.Name}}</a> {{else}}<span class="missing">{{.Name}} (not in the run folder)</span> {{end}}{{end}}{{if .MoreFiles}}and {{.MoreFiles}} more (see results.json){{end}}</p>{{end}}
{{range .Images}}<img class="embedded" src="{{.Href}}" alt="{{.Name}}">{{end}}
</div>
{{else}}
<p class="warn">No checker for this workload yet: the verdict is unknown.</p>
{{end}}

<h2 id="timeline">Timeline</h2>
{{with .Timeline}}
<p class="note">{{.Completions}} completions over {{.Span}}, in {{.Buckets}} buckets of {{.Width}} (harness clock, from the run's start), per node the client contacted.
<span class="legend"><span style="background:#3d9140"></span>ok<span style="background:#d04040"></span>fail<span style="background:#e8a317"></span>info</span>
Hover a row or a fault for its details.</p>
<div class="timeline">
{{with .SVG}}<svg width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="faults and operations per node over time">
<g stroke="#e2e2e2">{{range .Ticks}}<line x1="{{.X}}" y1="12" x2="{{.X}}" y2="{{$.Timeline.SVG.Height}}"/>{{end}}</g>
<g fill="#555">{{range .Ticks}}<text x="{{.X}}" y="{{.Y}}" text-anchor="middle">{{.Label}}</text>{{end}}</g>
{{if .Phases}}<g>{{range .Phases}}<line x1="{{.X}}" y1="{{$.Timeline.SVG.PhaseY}}" x2="{{.X}}" y2="{{$.Timeline.SVG.Height}}" stroke="#333" stroke-dasharray="3,3"/><text x="{{.X}}" y="{{.Y}}" {{if .End}}dx="-3" text-anchor="end"{{else}}dx="3"{{end}} fill="#333">{{.Label}}</text>{{end}}</g>{{end}}
{{range .Lanes}}<g><text x="4" y="{{.Y}}" dy="10" fill="#333">{{.Label}}</text>{{$lane := .}}{{range .Rects}}<rect x="{{.X}}" y="{{$lane.Y}}" width="{{.W}}" height="{{$lane.Height}}" fill="{{$lane.Color}}" fill-opacity="0.75"{{if .Failed}} stroke="#c00000" stroke-width="2"{{end}}><title>{{.Title}}</title></rect>{{end}}</g>
{{end}}
{{range .Marks}}<g><line x1="{{.X}}" y1="{{$.Timeline.SVG.MarkY}}" x2="{{.X}}" y2="{{$.Timeline.SVG.Height}}" stroke="#c00000" stroke-width="2"/><text x="{{.X}}" y="{{.Y}}" {{if .End}}dx="-3" text-anchor="end"{{else}}dx="3"{{end}} fill="#c00000" font-weight="bold">{{.Label}}</text><title>{{.Title}}</title></g>{{end}}
{{range .Rows}}<g transform="translate({{$.Timeline.SVG.PlotX}},{{.Y}})"><title>{{.Title}}</title><rect x="0" y="0" width="{{$.Timeline.SVG.PlotW}}" height="{{.Base}}" fill="#fafafa" stroke="#eee"/>{{if .Info}}<path d="{{.Info}}" fill="#e8a317"/>{{end}}{{if .Fail}}<path d="{{.Fail}}" fill="#d04040"/>{{end}}{{if .OK}}<path d="{{.OK}}" fill="#3d9140"/>{{end}}<text x="-6" y="{{.Base}}" dy="-10" text-anchor="end" fill="#333">{{.Label}}</text></g>
{{end}}
</svg>{{end}}
</div>
{{if .Phases}}<p class="note">Phases: {{range $i, $p := .Phases}}{{if $i}}, {{end}}{{$p.Name}} at {{$p.At}}{{end}}{{if .MorePhases}} and {{.MorePhases}} more{{end}}.</p>{{end}}
<h3>Faults</h3>
{{if .NoFaults}}<p class="note">No fault was injected.</p>{{else}}
<table>
<tr><th>fault</th><th>injected</th><th>healed</th><th>held</th><th>targets</th><th>error</th></tr>
{{range .Faults}}<tr><td>{{.Fault}}</td><td class="n" title="action began {{.Began}}">{{.Inject}}</td><td class="n">{{.Heal}}</td><td class="n">{{.Held}}</td><td class="targets">{{.Targets}}</td><td>{{.Error}}</td></tr>
{{end}}</table>
{{if .MoreFaults}}<p class="note">{{.MoreFaults}} more fault intervals or actions are not listed: history.jsonl has them all.</p>{{end}}
<p class="note">Times are when each action took effect (hover "injected" for when it began); a fault with an error is outlined in red on the timeline.</p>
{{end}}
{{else}}
<p class="note">No timeline: the history has no entries or could not be read.</p>
{{end}}
{{template "coverage" .}}
<h2 id="history">History</h2>
{{range .HistoryNotes}}<p class="warn">{{.}}</p>{{end}}
<table>
{{range .Counts}}<tr><th>{{.Label}}</th><td class="n">{{.Value}}</td><td class="note">{{.Note}}</td></tr>
{{end}}</table>
{{if .Fs}}
<h3>By operation</h3>
<table>
<tr><th>f</th><th>invocations</th><th>ok</th><th>fail</th><th>info</th></tr>
{{range .Fs}}<tr><td><code>{{.F}}</code></td><td class="n">{{.Invocations}}</td><td class="n">{{.OK}}</td><td class="n">{{.Fail}}</td><td class="n">{{.Info}}</td></tr>
{{end}}</table>
{{end}}
{{if .Nodes}}
<h3>By node</h3>
<table>
<tr><th>node</th><th>ok</th><th>fail</th><th>info</th><th>completions</th></tr>
{{range .Nodes}}<tr><td><code>{{.Name}}</code></td><td class="n">{{.OK}}</td><td class="n">{{.Fail}}</td><td class="n">{{.Info}}</td><td class="n">{{.N}}</td></tr>
{{end}}</table>
{{end}}

<h2 id="options">Options</h2>
{{if .Options}}
<table>
{{range .Options}}<tr><th><code>{{.Key}}</code></th><td class="targets">{{.Value}}{{if .Human}} ({{.Human}}){{end}}</td></tr>
{{end}}</table>
{{if .MoreOptions}}<p class="note">{{.MoreOptions}} more in test.json.</p>{{end}}
{{else if .OptionsRaw}}<p class="warn">test.json is not a JSON object:</p><pre>{{.OptionsRaw}}</pre>
{{else}}<p class="note">No test.json.</p>{{end}}

<h2 id="files">Files</h2>
<ul>
{{range .RunFiles}}<li>{{if .Exists}}<a href="{{.Href}}">{{.Name}}</a>{{else}}<span class="missing">{{.Name}} (missing)</span>{{end}}</li>
{{end}}{{range .Logs}}<li>{{if .Exists}}<a href="{{.Href}}">{{.Name}}</a>{{else}}<span class="missing">{{.Name}}</span>{{end}}</li>
{{end}}</ul>
{{if .MoreLogs}}<p class="note">{{.MoreLogs}} more .log files in the run folder.</p>{{end}}
{{if not .Logs}}<p class="note">No node logs in the run folder (with <code>--keep</code> the cluster still runs and its logs are copied when it is removed; <code>shardtest check</code> rewrites this page).</p>{{end}}
</body>
</html>
`

package report

import (
	"sort"
	"strings"

	"github.com/shardtest/shardtest/coverage"
)

// maxSequences bounds the happens-before lines the page lists per kind;
// coverage.json has them all.
const maxSequences = 2000

type (
	coverageView struct {
		Line string
		// NeverHappened: event types the declared capabilities promise
		// that no node logged.
		NeverHappened string
		// Situations: per event type or operation, where it happened.
		Events, Ops, Replies []situationRow
		Faults               []string
		Pairs, Triples       []string
		MorePairs            int
		MoreTriples          int
		NoEvents             bool
	}
	situationRow struct{ What, Where string }
)

// coverageSection is the page's coverage section; nil without coverage.
func coverageSection(in Input) *coverageView {
	if in.Coverage == nil {
		return nil
	}
	c := in.Coverage
	s := coverage.Summarize(*c, nil)
	if in.CoverageSummary != nil {
		s = *in.CoverageSummary
	}
	v := &coverageView{Line: clip(s.Line(), maxSummaryText), NeverHappened: clip(strings.Join(c.NeverHappened, ", "), 4000),
		NoEvents: c.Events == 0}
	// "kind what... | context": grouped by what, the contexts joined.
	group := func(kind string) []situationRow {
		where := map[string][]string{}
		for _, b := range c.Behaviours {
			if coverage.Kind(b) != kind {
				continue
			}
			rest := strings.TrimPrefix(b, kind+" ")
			what, ctx, _ := strings.Cut(rest, " | ")
			if kind == coverage.KindEvent {
				// "type @role": the role goes with the context.
				typ, role, _ := strings.Cut(what, " ")
				what, ctx = typ, role+" "+ctx
			}
			where[what] = append(where[what], ctx)
		}
		var rows []situationRow
		for what, ctxs := range where {
			rows = append(rows, situationRow{clip(what, 200), clip(strings.Join(ctxs, ", "), 4000)})
		}
		sort.Slice(rows, func(i, j int) bool { return rows[i].What < rows[j].What })
		return rows
	}
	v.Events, v.Ops, v.Replies = group(coverage.KindEvent), group(coverage.KindOp), group(coverage.KindReply)
	for _, b := range c.Behaviours {
		switch coverage.Kind(b) {
		case coverage.KindFault:
			v.Faults = append(v.Faults, clip(strings.TrimPrefix(b, coverage.KindFault+" "), 200))
		case coverage.KindPair:
			if len(v.Pairs) == maxSequences {
				v.MorePairs++
				continue
			}
			v.Pairs = append(v.Pairs, clip(strings.TrimPrefix(b, coverage.KindPair+" "), 400))
		case coverage.KindTriple:
			if len(v.Triples) == maxSequences {
				v.MoreTriples++
				continue
			}
			v.Triples = append(v.Triples, clip(strings.TrimPrefix(b, coverage.KindTriple+" "), 400))
		}
	}
	return v
}

// coverageTemplate is the page's coverage section.
const coverageTemplate = `{{define "coverage"}}{{with .Coverage}}
<h2 id="coverage">Coverage</h2>
<p>{{.Line}}. <span class="note">A behaviour is a situation the run showed: a fault that took effect, an operation's outcome by the fault that held and the side of the node asked, a move the replies show, a node event by the role of the member that logged it and the fault it was under, and event types that certainly followed one another within 5 s (docs/coverage.md).</span></p>
{{if .NoEvents}}<p class="warn">No node events were recorded (the implementation lacks the events capability, or an older run): this coverage is the history's alone.</p>{{end}}
{{if .NeverHappened}}<p><b>Never happened</b> (event types the implementation's capabilities promise that no node logged in this run): <span class="mono">{{.NeverHappened}}</span></p>{{end}}
{{if .Faults}}<p>Faults that took effect: <span class="mono">{{range $i, $f := .Faults}}{{if $i}}, {{end}}{{$f}}{{end}}</span></p>{{end}}
{{if .Events}}<h3>Node events</h3>
<table><tr><th>event</th><th>role of the member that logged it | fault/side then</th></tr>
{{range .Events}}<tr><td><code>{{.What}}</code></td><td class="targets">{{.Where}}</td></tr>
{{end}}</table>{{end}}
{{if .Ops}}<h3>Operation outcomes</h3>
<table><tr><th>operation and outcome</th><th>fault/side of the node asked, while it was in flight</th></tr>
{{range .Ops}}<tr><td><code>{{.What}}</code></td><td class="targets">{{.Where}}</td></tr>
{{end}}</table>{{end}}
{{if .Replies}}<h3>Moves the replies show</h3>
<table><tr><th>move</th><th>fault families</th></tr>
{{range .Replies}}<tr><td><code>{{.What}}</code></td><td class="targets">{{.Where}}</td></tr>
{{end}}</table>{{end}}
{{if .Pairs}}<details><summary>{{len .Pairs}} happens-before pairs{{if .MorePairs}} (and {{.MorePairs}} more in coverage.json){{end}}</summary><ol class="evidence">{{range .Pairs}}<li>{{.}}</li>{{end}}</ol></details>{{end}}
{{if .Triples}}<details><summary>{{len .Triples}} happens-before triples{{if .MoreTriples}} (and {{.MoreTriples}} more in coverage.json){{end}}</summary><ol class="evidence">{{range .Triples}}<li>{{.}}</li>{{end}}</ol></details>{{end}}
{{end}}{{end}}`

package explore

import (
	"bytes"
	"errors"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/internal/atomicfile"
)

// write writes the campaign's summary.md and coverage.svg as they stand.
func (c *Campaign) write(res Result) error {
	var md bytes.Buffer
	c.WriteSummary(&md, res)
	return errors.Join(atomicfile.Write(c.cfg.Dir, SummaryFile, md.Bytes()),
		atomicfile.Write(c.cfg.Dir, CoverageSVG, coverageSVG(res.Records)))
}

// Mode names the campaign's way of choosing schedules.
func (c *Campaign) Mode() string {
	if c.cfg.Random {
		return "random (every run a fresh --nemesis draw)"
	}
	return "guided by coverage"
}

// Counts says how the runs ended, as a person counts them.
func Counts(recs []Record) string {
	var valid, invalid, unknown, couldNot int
	for _, r := range recs {
		switch {
		case r.Error != "":
			couldNot++
		case r.Verdict == checker.Valid:
			valid++
		case r.Verdict == checker.Invalid:
			invalid++
		default:
			unknown++
		}
	}
	s := fmt.Sprintf("%s: %d valid, %d invalid, %d unknown", plural(len(recs), "run"), valid, invalid, unknown)
	if couldNot > 0 {
		s += fmt.Sprintf(", %d could not run or were cut short", couldNot)
	}
	return s
}

// WriteSummary writes summary.md: the settings, how the campaign ended,
// the first invalid run with the command that reproduces it, and every
// run.
func (c *Campaign) WriteSummary(b *bytes.Buffer, res Result) {
	o := c.cfg.Base
	fmt.Fprintf(b, "# shardtest explore\n\n")
	fmt.Fprintf(b, "%s; workload %s on %d nodes (%s runtime%s), faults %s (hold about %v), %v main phase, campaign seed %d, %d at a time.\n\n",
		c.Mode(), o.Workload, o.Nodes, o.Runtime, imageNote(o.Image), o.Nemesis, o.NemesisInterval, o.TimeLimit, o.Seed, c.cfg.Parallel)
	if res.Stopped != "" {
		fmt.Fprintf(b, "Stopped: %s, after %s.\n\n", res.Stopped, res.Took.Round(time.Second))
	}
	fmt.Fprintf(b, "%s. %d distinct behaviours over the campaign's runs (docs/coverage.md)", Counts(res.Records), len(c.own))
	if c.corpus != nil {
		fmt.Fprintf(b, "; corpus %s: %s", c.corpus.dir, plural(len(c.corpus.entries), "schedule"))
	}
	b.WriteString(".\n\n")
	if f := res.FirstInvalid; f != nil {
		fmt.Fprintf(b, "## First invalid run\n\nRun %d, %s after the start (%s): %s said invalid.\n\n", f.N, f.Ended.Round(time.Second), f.Dir, strings.Join(f.Invalid, ", "))
		if res.Reproduce != "" {
			fmt.Fprintf(b, "Reproduce:\n\n```sh\n%s\n```\n\n", res.Reproduce)
		}
	}
	fmt.Fprintf(b, "## Runs\n\n![behaviours found against time and runs](%s)\n\n", CoverageSVG)
	b.WriteString("| run | schedule | verdict | behaviours | new | campaign total | ended | report |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Records {
		sched := r.Origin
		if r.Parent != "" {
			sched = fmt.Sprintf("%s of %s (%s)", r.Origin, r.Parent, r.Mutation)
		}
		if r.Entry != "" {
			sched += ", kept as " + r.Entry
		}
		verdict := string(r.Verdict)
		switch {
		case r.Error != "":
			verdict = "could not run: " + strings.Join(strings.Fields(r.Error), " ")
		case len(r.Invalid) > 0:
			verdict += " (" + strings.Join(r.Invalid, ", ") + ")"
		}
		link := "—"
		if r.Dir != "" {
			if rel, err := filepath.Rel(c.cfg.Dir, filepath.Join(r.Dir, report.IndexFile)); err == nil {
				link = fmt.Sprintf("[index.html](%s)", filepath.ToSlash(rel))
			}
		}
		fmt.Fprintf(b, "| %d | %s | %s | %d | %d | %d | %s | %s |\n", r.N, mdCell(sched), mdCell(verdict), r.Behaviours, r.New, r.Total, r.Ended.Round(time.Second), link)
	}
}

// plural is "1 run", "2 runs".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func imageNote(image string) string {
	if image == "" {
		return ""
	}
	return ", image " + image
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// coverageSVG plots the campaign's distinct behaviours against time and
// against runs, invalid runs in red.
func coverageSVG(recs []Record) []byte {
	const w, h, pad = 360, 220, 40
	var maxT time.Duration
	maxY := 1
	for _, r := range recs {
		maxT = max(maxT, r.Ended)
		maxY = max(maxY, r.Total)
	}
	maxT = max(maxT, time.Second)
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", 2*w+20, h+30)
	panel := func(x0 int, title, xLabel string, xOf func(i int, r Record) float64) {
		fmt.Fprintf(&b, `<g transform="translate(%d,10)"><text x="%d" y="0" text-anchor="middle" dy="10">%s</text>`, x0, w/2, html.EscapeString(title))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/><line x1="%d" y1="20" x2="%d" y2="%d" stroke="#333"/>`, pad, h-pad, w-10, h-pad, pad, pad, h-pad)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text><text x="%d" y="%d" text-anchor="end">%d</text><text x="%d" y="%d" text-anchor="end">0</text>`,
			(w+pad)/2, h-8, html.EscapeString(xLabel), pad-4, 26, maxY, pad-4, h-pad)
		px := func(f float64) float64 { return pad + f*float64(w-10-pad) }
		py := func(y int) float64 { return float64(h-pad) - float64(y)/float64(maxY)*float64(h-pad-20) }
		var pts []string
		for i, r := range recs {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(xOf(i, r)), py(r.Total)))
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="#2a6db0" stroke-width="1.5" points="%s"/>`, strings.Join(pts, " "))
		}
		for i, r := range recs {
			color := "#2a6db0"
			if r.Verdict == checker.Invalid {
				color = "#c00000"
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"><title>run %d: %d behaviours, %d new, %s</title></circle>`,
				px(xOf(i, r)), py(r.Total), color, r.N, r.Behaviours, r.New, html.EscapeString(string(r.Verdict)))
		}
		b.WriteString("</g>\n")
	}
	panel(0, "distinct behaviours over time", fmt.Sprintf("time (0 to %s)", maxT.Round(time.Second)), func(_ int, r Record) float64 {
		return float64(r.Ended) / float64(maxT)
	})
	panel(w+20, "distinct behaviours over runs", fmt.Sprintf("runs (1 to %d)", len(recs)), func(i int, _ Record) float64 {
		if len(recs) < 2 {
			return 1
		}
		return float64(i) / float64(len(recs)-1)
	})
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// NoteShrink adds the shrink of the first invalid run (its folder and
// summary) to summary.md.
func (c *Campaign) NoteShrink(dir, summary string) error {
	b, err := os.ReadFile(filepath.Join(c.cfg.Dir, SummaryFile))
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(c.cfg.Dir, dir)
	if err != nil {
		rel = dir
	}
	b = fmt.Appendf(b, "\n## Shrunk\n\nThe first invalid run, shrunk (%s):\n\n```\n%s```\n", filepath.ToSlash(rel), summary)
	return atomicfile.Write(c.cfg.Dir, SummaryFile, b)
}

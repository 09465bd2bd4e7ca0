package explore

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Arms of a comparison.
const (
	ArmGuided = "guided"
	ArmRandom = "random"
)

// Campaign results of a comparison.
type Trial struct {
	Arm  string `json:"arm"`
	Seed int64  `json:"seed"`
	Dir  string `json:"dir"`
	// Found: a run was invalid; FirstInvalid is when it ended (from the
	// campaign's start) and RunsToInvalid how many runs had ended by then.
	Found         bool          `json:"found"`
	FirstInvalid  time.Duration `json:"first_invalid_ns,omitempty"`
	RunsToInvalid int           `json:"runs_to_invalid,omitempty"`
	// Runs, Behaviours and Took are the campaign's.
	Runs       int           `json:"runs"`
	Behaviours int           `json:"behaviours"`
	Took       time.Duration `json:"took_ns"`
	Stopped    string        `json:"stopped"`
	Error      string        `json:"error,omitempty"`
	records    []Record
}

// behavioursAt is the campaign's distinct behaviours among the runs that
// had ended by h.
func (t Trial) behavioursAt(h time.Duration) int {
	n := 0
	for _, r := range t.records {
		if r.Ended <= h {
			n = max(n, r.Total)
		}
	}
	return n
}

// Compare runs campaigns of both arms the same way — the same settings,
// seeds seed, seed+1, ..., one at a time, the arms alternating so that
// whatever else the machine does falls on both — and returns every trial.
// cfg is the campaign's settings; each trial gets its own folder under dir.
func Compare(ctx context.Context, cfg Config, campaigns int, dir string, progress func(Trial)) ([]Trial, error) {
	var out []Trial
	for i := range campaigns {
		for _, arm := range []string{ArmRandom, ArmGuided} {
			if i%2 == 1 {
				// Alternate which arm goes first.
				arm = map[string]string{ArmRandom: ArmGuided, ArmGuided: ArmRandom}[arm]
			}
			c := cfg
			c.Base.Seed = cfg.Base.Seed + int64(i)
			c.Random = arm == ArmRandom
			c.Dir = filepath.Join(dir, fmt.Sprintf("%s-%d", arm, c.Base.Seed))
			c.Corpus = ""
			tr := Trial{Arm: arm, Seed: c.Base.Seed, Dir: c.Dir}
			camp, err := New(c)
			if err != nil {
				return out, err
			}
			res, err := camp.Run(ctx)
			tr.records = res.Records
			tr.Runs, tr.Behaviours, tr.Took, tr.Stopped = len(res.Records), res.Behaviours, res.Took, res.Stopped
			if err != nil {
				tr.Error = err.Error()
			}
			if f := res.FirstInvalid; f != nil {
				tr.Found, tr.FirstInvalid = true, f.Ended
				for _, r := range res.Records {
					if r.Ended <= f.Ended {
						tr.RunsToInvalid++
					}
				}
			}
			out = append(out, tr)
			if progress != nil {
				progress(tr)
			}
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
		}
	}
	return out, nil
}

// WriteComparison writes the trials as Markdown: every campaign, then per
// arm the median and spread of the time to the first invalid run (a
// campaign that found none counts as "more than its time") and of the
// distinct behaviours by the horizon, the time every campaign reached.
func WriteComparison(w io.Writer, trials []Trial) {
	horizon := time.Duration(-1)
	for _, t := range trials {
		end := time.Duration(0)
		for _, r := range t.records {
			end = max(end, r.Ended)
		}
		if horizon < 0 || end < horizon {
			horizon = end
		}
	}
	horizon = max(horizon, 0)
	fmt.Fprintln(w, "| arm | seed | first invalid run | runs to it | runs | distinct behaviours | by the horizon | stopped |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, t := range trials {
		first, runsTo := "none", "—"
		if t.Found {
			first, runsTo = t.FirstInvalid.Round(time.Second).String(), fmt.Sprint(t.RunsToInvalid)
		}
		stopped := t.Stopped
		if t.Error != "" {
			stopped += ": " + strings.Join(strings.Fields(t.Error), " ")
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %d | %d | %d | %s |\n", t.Arm, t.Seed, first, runsTo, t.Runs, t.Behaviours, t.behavioursAt(horizon), mdCell(stopped))
	}
	fmt.Fprintf(w, "\nThe horizon, the time every campaign reached: %s.\n\n", horizon.Round(time.Second))
	fmt.Fprintln(w, "| arm | campaigns | found a bug | time to the first invalid run: median (min–max) | distinct behaviours by the horizon: median (min–max) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, arm := range []string{ArmRandom, ArmGuided} {
		// A campaign that found nothing counts as "more than its time".
		type ttf struct {
			d        time.Duration
			censored bool
		}
		var times []ttf
		var found, n int
		var behaviours []int
		for _, t := range trials {
			if t.Arm != arm {
				continue
			}
			n++
			behaviours = append(behaviours, t.behavioursAt(horizon))
			if t.Found {
				found++
				times = append(times, ttf{t.FirstInvalid, false})
			} else {
				times = append(times, ttf{t.Took, true})
			}
		}
		if n == 0 {
			continue
		}
		slices.SortFunc(times, func(a, b ttf) int { return int(a.d - b.d) })
		slices.Sort(behaviours)
		text := func(x ttf) string {
			if x.censored {
				return "more than " + x.d.Round(time.Second).String()
			}
			return x.d.Round(time.Second).String()
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s (%s – %s) | %d (%d–%d) |\n", arm, n, found, text(times[len(times)/2]),
			text(times[0]), text(times[len(times)-1]),
			behaviours[len(behaviours)/2], behaviours[0], behaviours[len(behaviours)-1])
	}
}

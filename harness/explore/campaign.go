// Package explore is shardtest's guided search for bugs: a campaign of
// short runs whose fault schedules are chosen by what earlier runs
// exercised (behaviour coverage, package coverage), in the manner of
// Mallory (greybox fuzzing of distributed systems, CCS 2023) and AFL.
//
// A campaign keeps a corpus of schedules that each showed behaviours no
// earlier run had; it picks one by novelty (a schedule whose behaviours few
// runs have shown is picked more often), mutates it (add, drop, move or
// stretch a fault; change its target or side, or the fault itself; splice
// two schedules), runs the child, and keeps it if it showed something new.
// A share of its runs are fresh random schedules drawn as --nemesis draws
// them, so it never does worse than random for long. It stops at the first
// invalid run (unless told to keep going), writes the command that
// reproduces it, and shrinks it.
//
// With Random set, the campaign is the baseline it is measured against:
// every run is `shardtest run --nemesis FAULTS` with a new seed, and the
// coverage is only counted.
//
// The campaign is reproducible from its seed given the same run outcomes:
// every choice it makes comes from one generator, in the order runs end.
package explore

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/workloads"
)

// Config is a campaign's settings.
type Config struct {
	// Base is every run's options: workload, cluster, traffic, runtime,
	// image, node arguments, main phase. Nemesis names the faults the
	// campaign draws from (full names or families), NemesisInterval the
	// typical hold and gap, Seed the campaign's own seed.
	Base run.Options
	// Runs and Budget end the campaign (0: no bound; one of them must be
	// set): no run starts after Budget has passed, or once Runs have.
	Runs   int
	Budget time.Duration
	// Parallel runs up to this many runs at once (default 1).
	Parallel int
	// KeepGoing: do not stop at the first invalid run.
	KeepGoing bool
	// Random: the baseline, every run a fresh --nemesis draw; no corpus.
	Random bool
	// Dir is the campaign's folder (it must not exist yet); Corpus the
	// corpus folder ("": Dir/corpus), which may hold an earlier
	// campaign's corpus to resume from.
	Dir, Corpus string
	// Store is the results store the runs' coverage is compared with.
	Store string
	// NewRuntime makes worker w's runtime (on the local runtime, its own
	// ports).
	NewRuntime func(o run.Options, worker int) (run.Runtime, error)
	Log        *slog.Logger
	// Progress hears of every run as it ends, one at a time.
	Progress func(Record)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Files of a campaign's folder.
const (
	RunsFile     = "runs.jsonl"
	SummaryFile  = "summary.md"
	CoverageSVG  = "coverage.svg"
	FailureSched = "failure.schedule.json"
)

// Origins of a run's schedule.
const (
	OriginRandom  = "random"
	OriginMutated = "mutated"
)

// Record is one run of a campaign (a line of runs.jsonl).
type Record struct {
	N int `json:"n"`
	// Origin says where its schedule came from: a fresh random draw, or a
	// mutation (Mutation) of corpus entry Parent.
	Origin   string `json:"origin"`
	Parent   string `json:"parent,omitempty"`
	Mutation string `json:"mutation,omitempty"`
	Seed     int64  `json:"seed"`
	Dir      string `json:"dir,omitempty"`
	// Verdict is the run's; Invalid the checkers that said invalid; Error
	// why it could not run.
	Verdict checker.Verdict `json:"verdict"`
	Invalid []string        `json:"invalid,omitempty"`
	Error   string          `json:"error,omitempty"`
	// Behaviours the run showed; New of them no earlier run of the
	// campaign (or its corpus) had; Total the campaign's distinct
	// behaviours after it (its own runs only).
	Behaviours int `json:"behaviours"`
	New        int `json:"new"`
	Total      int `json:"total"`
	// Entry is the corpus entry it became.
	Entry string `json:"entry,omitempty"`
	// Began and Ended count from the campaign's start.
	Began time.Duration `json:"began_ns"`
	Ended time.Duration `json:"ended_ns"`
	// steps is the schedule the run was given (nil: a --nemesis draw).
	steps []nemesis.Step
}

// Result is what a campaign came to.
type Result struct {
	Records []Record
	// Behaviours counts the distinct behaviours of the campaign's runs.
	Behaviours int
	// FirstInvalid is the first run that ended invalid (nil: none).
	FirstInvalid *Record
	// Reproduce is the command that runs it again.
	Reproduce string
	// Stopped says why the campaign ended.
	Stopped string
	Took    time.Duration
	// CorpusEntries counts the corpus's schedules at the end.
	CorpusEntries int
}

// Why a campaign ended.
const (
	StopRuns        = "its runs were done"
	StopBudget      = "its budget was spent"
	StopInvalid     = "a run was invalid"
	StopInterrupted = "interrupted"
	StopErrors      = "runs could not run"
)

// freshShare is the share of a guided campaign's runs that are fresh
// random draws.
const freshShare = 0.2

// maxFailedInARow ends a campaign whose runs keep failing to run.
const maxFailedInARow = 3

// Campaign is a checked campaign, ready to run.
type Campaign struct {
	cfg    Config
	w      workloads.Workload
	corpus *corpus
	sp     space
	rng    *rand.Rand
	// hits counts, per behaviour, the runs (of the campaign and of the
	// corpus it resumed) that showed it; own the campaign's own.
	hits map[string]int
	own  map[string]bool
	// capsKnown: a run has told the implementation's capabilities, and sp
	// holds the faults that fit it.
	capsKnown bool
}

// New checks cfg and opens the corpus, refusing before anything is
// written what cannot run: bad bounds, faults that do not fit the runtime,
// a main phase too short for a fault, a corpus that is not one or whose
// schedules no longer read or fit, a folder that exists.
func New(cfg Config) (*Campaign, error) {
	cfg.Parallel = cmp.Or(cfg.Parallel, 1)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	o := cfg.Base
	switch {
	case cfg.Runs < 0:
		return nil, fmt.Errorf("--runs %d: must not be negative", cfg.Runs)
	case cfg.Budget < 0:
		return nil, fmt.Errorf("--budget %v: must not be negative", cfg.Budget)
	case cfg.Runs == 0 && cfg.Budget == 0:
		return nil, errors.New("a campaign needs a bound: --budget (a time above 0) or --runs")
	case cfg.Parallel < 1:
		return nil, fmt.Errorf("--parallel %d: want at least 1", cfg.Parallel)
	case o.Nemesis == "":
		return nil, errors.New("--nemesis: name the faults to explore (families or full names: shardtest list nemeses)")
	case len(o.Schedule) > 0:
		return nil, errors.New("a campaign draws its own schedules: no --schedule")
	case cfg.Dir == "":
		return nil, errors.New("a campaign needs a folder")
	case cfg.NewRuntime == nil:
		return nil, errors.New("a campaign needs a runtime")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(cfg.Dir); err == nil {
		return nil, fmt.Errorf("%s exists: a campaign writes a new folder", cfg.Dir)
	}
	w, err := workloads.Named(o.Workload)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.NewRuntime(o, 0)
	if err != nil {
		return nil, err
	}
	t := &run.Test{Options: o, Runtime: rt}
	if err := t.Precheck(); err != nil {
		return nil, err
	}
	faults, err := t.Faults(nil)
	if err != nil {
		return nil, err
	}
	c := &Campaign{cfg: cfg, w: w, rng: rand.New(rand.NewPCG(uint64(o.Seed), 0x6578706c6f7265)), // "explore"
		hits: map[string]int{}, own: map[string]bool{},
		sp: space{faults: faults, limit: o.TimeLimit, interval: o.NemesisInterval, age: true}}
	if len(nemesis.Plan(o.Seed, faults, o.NemesisInterval, o.TimeLimit)) == 0 {
		return nil, fmt.Errorf("--time-limit %v holds no fault at --nemesis-interval %v: want a main phase of at least twice the interval", o.TimeLimit, o.NemesisInterval)
	}
	if !cfg.Random {
		dir := cmp.Or(cfg.Corpus, filepath.Join(cfg.Dir, "corpus"))
		if c.corpus, err = openCorpus(dir, o.Workload, o.TimeLimit); err != nil {
			return nil, err
		}
		for _, e := range c.corpus.entries {
			eo := o
			eo.Nemesis, eo.NemesisInterval, eo.Schedule = "", 0, e.Steps
			if err := eo.Validate(); err != nil {
				return nil, fmt.Errorf("--corpus %s: entry %s does not fit this campaign's runs: %w", c.corpus.dir, e.ID, err)
			}
			for _, b := range e.Behaviours {
				c.hits[b]++
			}
		}
	}
	return c, nil
}

// job is a run to make.
type job struct {
	rec   Record
	o     run.Options
	steps []nemesis.Step
}

// campaignRun is a campaign in progress.
type campaignRun struct {
	*Campaign
	ctx     context.Context
	cancel  context.CancelFunc
	start   time.Time
	mu      sync.Mutex
	n       int
	running int
	stopped string
	failed  int
	res     Result
	runsLog *os.File
	logW    *bufio.Writer
}

// Run runs the campaign until its bound, its first invalid run (unless
// KeepGoing) or ctx's end, and writes its folder as it goes: runs.jsonl a
// line per run, the corpus an entry per schedule that showed something
// new, summary.md and coverage.svg after every run. A campaign killed at
// any point leaves a readable corpus and its finished runs.
func (c *Campaign) Run(ctx context.Context) (Result, error) {
	if err := os.MkdirAll(filepath.Join(c.cfg.Dir, "runs"), 0o755); err != nil {
		return Result{}, err
	}
	f, err := os.OpenFile(filepath.Join(c.cfg.Dir, RunsFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &campaignRun{Campaign: c, ctx: rctx, cancel: cancel, start: c.cfg.Now(), runsLog: f, logW: bufio.NewWriter(f)}
	var wg sync.WaitGroup
	worker := func(w int, one bool) {
		defer wg.Done()
		rt, err := c.cfg.NewRuntime(c.cfg.Base, w)
		if err != nil {
			r.stop(StopErrors, err)
			return
		}
		for {
			j, ok := r.next()
			if !ok {
				return
			}
			r.finish(j, r.runOne(rt, j))
			if one {
				return
			}
		}
	}
	// The first run tells the implementation's capabilities (the faults
	// that fit it); the others start once it has.
	wg.Add(1)
	go worker(0, c.cfg.Parallel > 1)
	wg.Wait()
	if c.cfg.Parallel > 1 {
		for w := range c.cfg.Parallel {
			wg.Add(1)
			go worker(w, false)
		}
		wg.Wait()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped == "" {
		r.stopped = StopInterrupted
		if ctx.Err() == nil {
			r.stopped = StopRuns
		}
	}
	res := r.res
	res.Stopped, res.Took, res.Behaviours = r.stopped, c.cfg.Now().Sub(r.start), len(c.own)
	if c.corpus != nil {
		res.CorpusEntries = len(c.corpus.entries)
	}
	if res.FirstInvalid != nil {
		res.Reproduce = c.reproduce(*res.FirstInvalid)
	}
	werr := errors.Join(r.logW.Flush(), c.write(res))
	if ctx.Err() != nil {
		return res, errors.Join(fmt.Errorf("interrupted: %w", ctx.Err()), werr)
	}
	if r.stopped == StopErrors {
		return res, errors.Join(errors.New("explore: runs could not run (runs.jsonl says why)"), werr)
	}
	return res, werr
}

// stop ends the campaign: no run starts after it.
func (r *campaignRun) stop(why string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped == "" {
		r.stopped = why
	}
	if err != nil {
		r.cfg.Log.Warn("explore", "stopped", why, "err", err)
	}
}

// next is the next run to make, or false when the campaign is over.
func (r *campaignRun) next() (job, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	elapsed := r.cfg.Now().Sub(r.start)
	switch {
	case r.stopped != "":
		return job{}, false
	case r.ctx.Err() != nil:
		r.stopped = StopInterrupted
		return job{}, false
	case r.cfg.Runs > 0 && r.n >= r.cfg.Runs:
		if r.running == 0 {
			r.stopped = StopRuns
		}
		return job{}, false
	case r.cfg.Budget > 0 && elapsed >= r.cfg.Budget:
		r.stopped = StopBudget
		return job{}, false
	}
	r.n++
	r.running++
	// Seeds a person can type: shardtest run --seed N replays a run.
	j := job{rec: Record{N: r.n, Seed: int64(r.rng.Uint64N(1_000_000_000)), Began: elapsed}}
	o := r.cfg.Base
	o.RunID = ""
	o.Seed = j.rec.Seed
	j.rec.Origin = OriginRandom
	entries := r.entries()
	switch {
	case r.cfg.Random || !r.capsKnown:
		// A --nemesis draw with a new seed, as shardtest run makes it.
	case len(entries) == 0 || r.rng.Float64() < freshShare:
		j.steps = r.sp.fresh(r.rng)
	default:
		parent := r.choose(entries)
		other := entries[r.rng.IntN(len(entries))]
		j.steps, j.rec.Mutation = r.sp.mutate(r.rng, parent.Steps, other.Steps)
		j.rec.Origin, j.rec.Parent = OriginMutated, parent.ID
	}
	if j.steps != nil {
		o.Nemesis, o.NemesisInterval, o.Schedule = "", 0, j.steps
	}
	j.o = o
	return j, true
}

func (c *Campaign) entries() []*Entry {
	if c.corpus == nil {
		return nil
	}
	return c.corpus.entries
}

// choose picks a corpus entry by novelty: its weight is the sum over its
// behaviours of one over the runs that showed each, so an entry that
// alone showed something rare is picked often, one whose behaviours every
// run shows seldom. An entry that says nothing of what it showed (written
// by hand) weighs one.
func (c *Campaign) choose(entries []*Entry) *Entry {
	weights := make([]float64, len(entries))
	total := 0.0
	for i, e := range entries {
		w := 0.0
		for _, b := range e.Behaviours {
			w += 1 / float64(max(c.hits[b], 1))
		}
		if len(e.Behaviours) == 0 {
			w = 1
		}
		weights[i] = w
		total += w
	}
	x := c.rng.Float64() * total
	for i, w := range weights {
		if x < w {
			return entries[i]
		}
		x -= w
	}
	return entries[len(entries)-1]
}

// outcome is what one run came to.
type outcome struct {
	res run.Result
	err error
	cov *coverage.Coverage
}

func (r *campaignRun) runOne(rt run.Runtime, j job) outcome {
	t := &run.Test{Options: j.o, Runtime: rt, Workload: r.w, Log: r.cfg.Log, Store: r.cfg.Store}
	res, err := t.Run(r.ctx, filepath.Join(r.cfg.Dir, "runs"))
	out := outcome{res: res, err: err}
	if err == nil {
		if c, cerr := coverage.Read(filepath.Join(res.Dir, coverage.File)); cerr == nil {
			out.cov = &c
		}
	}
	return out
}

// finish takes a run's outcome: its novelty, the corpus, the records, the
// stop at an invalid run.
func (r *campaignRun) finish(j job, out outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running--
	rec := j.rec
	rec.steps = j.steps
	rec.Dir, rec.Verdict, rec.Ended = out.res.Dir, out.res.Verdict, r.cfg.Now().Sub(r.start)
	if out.err != nil {
		rec.Verdict, rec.Error = checker.Unknown, out.err.Error()
		if r.ctx.Err() == nil {
			r.failed++
			if r.failed >= maxFailedInARow && r.stopped == "" {
				r.stopped = StopErrors
			}
		}
	} else {
		r.failed = 0
		for _, ch := range out.res.Checks {
			if ch.Verdict == checker.Invalid {
				rec.Invalid = append(rec.Invalid, ch.Checker)
			}
		}
		if !r.capsKnown {
			r.learnCapabilities(&rec)
		}
	}
	if out.cov != nil {
		rec.Behaviours = len(out.cov.Behaviours)
		var fresh []string
		for _, b := range out.cov.Behaviours {
			if r.hits[b] == 0 {
				fresh = append(fresh, b)
			}
			r.hits[b]++
			r.own[b] = true
		}
		rec.New = len(fresh)
		if len(fresh) > 0 && r.corpus != nil && rec.steps != nil {
			e := &Entry{Parent: rec.Parent, Mutation: rec.Mutation, Seed: rec.Seed, Run: rec.Dir,
				Behaviours: out.cov.Behaviours, New: len(fresh), Steps: rec.steps}
			if err := r.corpus.add(e, r.cfg.Base.Workload, r.cfg.Base.TimeLimit); err != nil {
				r.cfg.Log.Warn("explore: adding to the corpus", "err", err)
			} else {
				rec.Entry = e.ID
			}
		}
	}
	rec.Total = len(r.own)
	if rec.Verdict == checker.Invalid && r.res.FirstInvalid == nil {
		first := rec
		r.res.FirstInvalid = &first
		if !r.cfg.KeepGoing {
			if r.stopped == "" {
				r.stopped = StopInvalid
			}
			r.cancel() // the runs still going: the campaign found what it looked for
		}
	}
	r.res.Records = append(r.res.Records, rec)
	if b, err := json.Marshal(rec); err == nil {
		r.logW.Write(append(b, '\n'))
		r.logW.Flush()
	}
	if err := r.write(r.res); err != nil {
		r.cfg.Log.Warn("explore: writing the summary", "err", err)
	}
	if r.cfg.Progress != nil {
		r.cfg.Progress(rec)
	}
}

// learnCapabilities narrows the faults to those that fit the
// implementation the first run met (its test.json's capabilities), and
// gives that run's --nemesis draw its steps, so it can join the corpus.
func (r *campaignRun) learnCapabilities(rec *Record) {
	o, _, err := run.ReadOptions(rec.Dir)
	if err != nil || o.Capabilities == nil {
		return
	}
	rt, err := r.cfg.NewRuntime(r.cfg.Base, 0)
	if err != nil {
		return
	}
	t := &run.Test{Options: r.cfg.Base, Runtime: rt}
	faults, err := t.Faults(o.Capabilities)
	if err != nil || len(faults) == 0 {
		return
	}
	r.sp.faults = faults
	r.sp.age = slices.Contains(o.Capabilities, protocol.CapAge)
	r.capsKnown = true
	if rec.steps == nil && !r.cfg.Random {
		rec.steps = nemesis.Plan(rec.Seed, faults, r.cfg.Base.NemesisInterval, r.cfg.Base.TimeLimit)
	}
}

// reproduce is the command that runs rec again; its schedule (if it had
// one of its own) is written into the campaign's folder.
func (c *Campaign) reproduce(rec Record) string {
	o, _, err := run.ReadOptions(rec.Dir)
	if err != nil {
		return ""
	}
	if len(o.Schedule) == 0 {
		return run.ReproduceCommand(o, "")
	}
	path := filepath.Join(c.cfg.Dir, FailureSched)
	f, err := os.Create(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if err := nemesis.WriteSchedule(f, o.Schedule); err != nil {
		return ""
	}
	return run.ReproduceCommand(o, path)
}

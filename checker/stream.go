package checker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/regular"
)

// A Stream judges a history fed to it in one pass, entry by entry in
// order: the way a long history is checked without being held. It keeps
// only what its property needs (per entity, compactly); the entries it
// describes in evidence it reads again through the Pass.
type Stream interface {
	// Observe takes the next entry. It may keep the op's fields (strings,
	// Value, Reply), never the pointer, which the next entry reuses.
	Observe(op *history.Op)
	// Result ends the pass and judges.
	Result(ctx context.Context, p *Pass) Result
}

// Streamer is a checker that can judge in one pass (Check then runs the
// same Stream over a history in memory).
type Streamer interface {
	Checker
	Stream(in Inputs) Stream
}

// Pass is what a stream's result may ask of the whole history.
type Pass struct {
	// Truncated: the history's last line was cut off.
	Truncated bool
	// Jobs is how many entities (or keys) a stream may judge at once, on
	// as many goroutines; 0 or 1: one at a time, on the caller's.
	Jobs int
	// Ops reads entries again by index, for evidence: a failing check
	// describes a few entries it did not keep. Indexes not in the history
	// are left out of the map.
	Ops func(ctx context.Context, indexes []int64) (map[int64]history.Op, error)
}

// truncatedNote is the evidence line for a cut-off history.
func (p *Pass) truncatedNote() []string {
	return truncatedNote(&history.File{Truncated: p.Truncated})
}

// memoryPass is the Pass of a history in memory.
func memoryPass(h *history.File) *Pass {
	return &Pass{Truncated: h.Truncated, Ops: func(_ context.Context, indexes []int64) (map[int64]history.Op, error) {
		out := make(map[int64]history.Op, len(indexes))
		for _, i := range indexes {
			if i >= 0 && i < int64(len(h.Ops)) {
				out[i] = h.Ops[i]
			}
		}
		return out, nil
	}}
}

// checkInMemory is a Streamer's Check: its stream over h's entries.
func checkInMemory(ctx context.Context, s Streamer, h *history.File, in Inputs) Result {
	st := s.Stream(in)
	for i := range h.Ops {
		st.Observe(&h.Ops[i])
	}
	return st.Result(ctx, memoryPass(h))
}

// opRef is an entry a stream kept for its evidence, by index; the entries
// themselves are read again when the evidence is written.
type opRef = int64

// lookup reads the entries refs name (those < 0 are not entries) through
// p; a failure to read is evidence, not a crash.
func lookup(ctx context.Context, p *Pass, refs ...opRef) (map[int64]history.Op, error) {
	var want []int64
	for _, r := range refs {
		if r >= 0 {
			want = append(want, r)
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	ops, err := p.Ops(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("reading the history again for the evidence: %w", err)
	}
	return ops, nil
}

// pairStream pairs, as the entries pass, each kept invocation with its
// process's next completion: pairOps for streams. It holds only the
// invocations in flight. done gets each pair as it completes (comp nil:
// never completed, when a later invocation on the process or the end of
// the history shows it never will); pairs therefore arrive in completion
// order, not invocation order. done may keep the ops' fields, never the
// pointers.
type pairStream struct {
	keep func(*history.Op) bool
	done func(inv, comp *history.Op)
	// open holds each process's invocation in flight; skip marks one not
	// kept (its completion is consumed and ignored).
	open  map[int]*history.Op
	skip  map[int]bool
	slots map[int]*history.Op
	// orphans are completions with no open invocation on their process;
	// mismatched are completions whose f or entity differ from their
	// invocation's (both ignored; counted for the evidence).
	orphans, mismatched int
	firstOrphan         *history.Op
}

func newPairStream(keep func(*history.Op) bool, done func(inv, comp *history.Op)) *pairStream {
	return &pairStream{keep: keep, done: done, open: map[int]*history.Op{}, skip: map[int]bool{}, slots: map[int]*history.Op{}}
}

func (p *pairStream) observe(op *history.Op) {
	switch {
	case op.Kind == history.Invoke:
		if prev := p.open[op.Process]; prev != nil {
			// A second invocation on a process leaves the first open:
			// unknown.
			delete(p.open, op.Process)
			p.done(prev, nil)
		}
		delete(p.skip, op.Process)
		if p.keep(op) {
			// One slot per process, reused: done may keep the fields,
			// not the pointer.
			slot := p.slots[op.Process]
			if slot == nil {
				slot = new(history.Op)
				p.slots[op.Process] = slot
			}
			*slot = *op
			p.open[op.Process] = slot
		} else {
			p.skip[op.Process] = true
		}
	case op.Completion():
		if p.skip[op.Process] {
			delete(p.skip, op.Process)
			return
		}
		inv := p.open[op.Process]
		if inv == nil {
			p.orphans++
			if p.firstOrphan == nil {
				o := *op
				p.firstOrphan = &o
			}
			return
		}
		delete(p.open, op.Process)
		if op.F != "" && op.F != inv.F || op.Entity != "" && op.Entity != inv.Entity {
			p.mismatched++
		}
		p.done(inv, op)
	}
}

// finish ends the pass: the invocations still open never completed.
func (p *pairStream) finish() {
	open := make([]*history.Op, 0, len(p.open))
	for _, inv := range p.open {
		open = append(open, inv)
	}
	slices.SortFunc(open, func(a, b *history.Op) int { return cmp.Compare(a.Index, b.Index) })
	clear(p.open)
	for _, inv := range open {
		p.done(inv, nil)
	}
}

// evidence describes odd pairings, if any.
func (p *pairStream) evidence() []string {
	var ev []string
	if p.orphans > 0 {
		o := p.firstOrphan
		ev = append(ev, fmt.Sprintf("%d completions had no open invocation on their process and were ignored (first: #%d, process %d, %s)", p.orphans, o.Index, o.Process, o.Kind))
	}
	if p.mismatched > 0 {
		ev = append(ev, fmt.Sprintf("%d completions named another f or entity than their invocation; the invocation's were used", p.mismatched))
	}
	return ev
}

// outline is what streams keep of the history as a whole: its fault and
// phase entries (a few per fault), when the final phase began and the last
// entry's time.
type outline struct {
	ops        []history.Op
	final, end int64
	// latest is the latest time of any entry (end is the last entry's).
	latest   int64
	hasFinal bool
}

func (o *outline) observe(op *history.Op) {
	o.end = op.Time
	o.latest = max(o.latest, op.Time)
	switch op.Kind {
	case history.Nemesis, history.Phase:
		o.ops = append(o.ops, *op)
		if op.Kind == history.Phase && op.F == history.PhaseFinal && !o.hasFinal {
			o.final, o.hasFinal = op.Time, true
		}
	}
}

// finalAt is when the final phase began; -1 if it did not.
func (o *outline) finalAt() int64 {
	if !o.hasFinal {
		return -1
	}
	return o.final
}

// file is the outline as a history of only those entries (for
// history.Faults and Ended, which read nothing else).
func (o *outline) file(p *Pass) *history.File {
	return &history.File{Ops: o.ops, Truncated: p.Truncated}
}

// outlineStream is the Stream of a checker that reads nothing of the
// history but its fault and phase entries: it keeps those and runs the
// checker's own Check on them.
type outlineStream struct {
	o     outline
	check func(ctx context.Context, h *history.File) Result
}

func (s *outlineStream) Observe(op *history.Op) { s.o.observe(op) }

func (s *outlineStream) Result(ctx context.Context, p *Pass) Result {
	return s.check(ctx, s.o.file(p))
}

// CheckFile judges the history file at path with every checker in one
// pass. When every checker streams (Streamer), the history is never held:
// each entry goes to every stream as it is read, and evidence entries are
// read again from the file. Checkers that do not stream get the history
// in memory, read in the same pass. It returns the results in the
// checkers' order and the history as far as it was held: its header,
// truncation and fault and phase entries (what Detect and Ended read), or
// every entry when a checker needed them.
func CheckFile(ctx context.Context, path string, cs []Checker, in Inputs, opts FileOptions) ([]Result, *history.File, error) {
	streams := make([]Stream, len(cs))
	hold := false
	for i, c := range cs {
		if s, ok := c.(Streamer); ok {
			streams[i] = s.Stream(in)
		} else {
			hold = true
		}
	}
	// A regular file only (internal/regular): a stored run is untrusted,
	// and a named pipe would block this open for ever.
	f, err := regular.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	pr := Progress{Started: time.Now()}
	if st, err := f.Stat(); err == nil {
		pr.Total = st.Size()
	}
	report := func() {
		if opts.Progress != nil {
			pr.Elapsed = time.Since(pr.Started)
			opts.Progress(pr)
		}
	}
	jobs, err := Jobs(opts.Jobs)
	if err != nil {
		return nil, nil, err
	}
	var observers []func(*history.Op)
	for _, s := range streams {
		if s != nil {
			observers = append(observers, s.Observe)
		}
	}
	observers = append(observers, opts.Observe...)
	observe := func(op *history.Op) {
		for _, obs := range observers {
			obs(op)
		}
	}
	var fan *fanOut
	if jobs > 1 && len(observers) > 0 {
		// The reader decodes and keeps the outline; the streams observe on
		// workers (parallel.go).
		fan = newFanOut(observers, jobs)
		observe = fan.add
	}
	cr := &countingReader{r: f}
	var o outline
	var all []history.Op
	hdr, truncated, err := history.Scan(cr, func(op *history.Op) error {
		if pr.Entries++; pr.Entries%(1<<16) == 0 {
			pr.Read = cr.n
			report()
		}
		if hold {
			all = append(all, *op)
		} else {
			o.observe(op)
		}
		observe(op)
		if pr.Entries%(1<<12) == 0 {
			return ctx.Err() // not per entry: it takes a lock
		}
		return nil
	})
	if fan != nil {
		fan.close() // the streams have seen every entry
	}
	if err != nil {
		return nil, nil, err
	}
	h := &history.File{Header: hdr, Ops: o.ops, Truncated: truncated}
	pass := &Pass{Truncated: truncated, Jobs: jobs, Ops: func(ctx context.Context, indexes []int64) (map[int64]history.Op, error) {
		return reread(ctx, path, indexes)
	}}
	if hold {
		h.Ops = all
		pass = memoryPass(h)
		pass.Jobs = jobs
	}
	pr.Read, pr.Done = cr.n, true
	results := make([]Result, len(cs))
	for i, c := range cs {
		pr.Judging = c.Name()
		report()
		if streams[i] != nil {
			results[i] = streams[i].Result(ctx, pass)
			streams[i] = nil // what it kept can go before the next one judges
		} else {
			results[i] = c.Check(ctx, h, in)
		}
	}
	return results, h, nil
}

// FileOptions are CheckFile's options.
type FileOptions struct {
	// Observe also see every entry (the report's counts and timeline,
	// say), so one pass serves them too. With Jobs above 1 each is called
	// on a worker goroutine, always the same one, and CheckFile has waited
	// for it before it returns.
	Observe []func(*history.Op)
	// Progress, if set, is called every 65,536 entries of the pass and as
	// each checker starts judging.
	Progress func(Progress)
	// Jobs is how many goroutines observe the entries beside the reader
	// (each stream and each Observe on one of them, in order) and judge
	// a stream's entities at once; 0: every core (Jobs), 1: everything on
	// the caller's goroutine. The results are the same.
	Jobs int
}

// Progress is how far a CheckFile has got.
type Progress struct {
	// Read of Total bytes of the file; Entries read so far; Done once the
	// pass is over, when Judging names the checker now judging.
	Read, Total int64
	Entries     int64
	Done        bool
	Judging     string
	Started     time.Time
	Elapsed     time.Duration
}

// String says it in one line: how far, how fast, how long still.
func (p Progress) String() string {
	secs := p.Elapsed.Seconds()
	if p.Done {
		return fmt.Sprintf("read %d entries in %.1f s; judging: %s", p.Entries, secs, p.Judging)
	}
	line := fmt.Sprintf("reading: %d entries", p.Entries)
	if secs > 0 {
		line += fmt.Sprintf(", %.0f entries/s", float64(p.Entries)/secs)
	}
	if p.Total > 0 && p.Read > 0 {
		frac := float64(p.Read) / float64(p.Total)
		line += fmt.Sprintf(", %.0f%%", 100*frac)
		if frac > 0.01 {
			line += fmt.Sprintf(", about %.0f s left to read", secs*(1-frac)/frac)
		}
	}
	return line
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

// reread reads the entries of the history file at path with the given
// (sorted) indexes, stopping after the last.
func reread(ctx context.Context, path string, indexes []int64) (map[int64]history.Op, error) {
	out := make(map[int64]history.Op, len(indexes))
	if len(indexes) == 0 {
		return out, nil
	}
	f, err := regular.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	last := indexes[len(indexes)-1]
	_, _, err = history.Scan(f, func(op *history.Op) error {
		if _, found := slices.BinarySearch(indexes, op.Index); found {
			out[op.Index] = *op
		}
		if op.Index >= last {
			return errDone
		}
		return ctx.Err()
	})
	if err != nil && !errors.Is(err, errDone) {
		return nil, err
	}
	return out, nil
}

// errDone ends a scan that found what it looked for.
var errDone = errors.New("done")

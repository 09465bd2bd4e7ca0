package checker

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/shardtest/shardtest/history"
)

// Checking on every core. The streams are independent of each other, and
// so are a stream's entities once the pass is over: CheckFile hands each
// stream (and each extra observer) to one of its workers, so every stream
// still sees every entry in order on one goroutine, while the reader goes
// on decoding; a stream judging many entities (linearizable) judges them
// on a pool and takes the verdicts in order (inOrder). Results and
// evidence are those of one core, entity for entity: only porcupine's
// timeouts depend on how busy the machine is, on one core as on many.

// Jobs resolves a --jobs value: 0 is every core (runtime.NumCPU).
func Jobs(n int) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("jobs %d: want 0 (every core) or more", n)
	case n == 0:
		return runtime.NumCPU(), nil
	}
	return n, nil
}

// Sizes of the pass's hand-off: entries go to the workers in batches of
// fanBatchOps, and at most fanBatches exist at once, so the reader waits
// for the slowest worker rather than running ahead of it (about 70 KB of
// entries per batch; the entries' values are the decoder's, kept until the
// batch is reused).
const (
	fanBatchOps = 512
	fanBatches  = 8
)

// fanOut runs observers over the entries the reader gives it, observer k
// on worker k mod n: each observer sees every entry, in order, on one
// goroutine. The caller owns its workers: close stops them.
type fanOut struct {
	cur  *fanBatch
	free chan *fanBatch
	work []chan *fanBatch
	wg   sync.WaitGroup
	// panicked is the first panic of an observer, raised again by close
	// on the caller's goroutine (as with one core); the workers then
	// only return batches.
	panicMu  sync.Mutex
	panicked any
}

type fanBatch struct {
	ops []history.Op
	// left counts the workers still to observe it; the last returns it.
	left atomic.Int32
}

func newFanOut(observers []func(*history.Op), n int) *fanOut {
	n = max(1, min(n, len(observers)))
	f := &fanOut{free: make(chan *fanBatch, fanBatches), work: make([]chan *fanBatch, n)}
	for range fanBatches {
		f.free <- &fanBatch{ops: make([]history.Op, 0, fanBatchOps)}
	}
	for w := range n {
		var mine []func(*history.Op)
		for k := w; k < len(observers); k += n {
			mine = append(mine, observers[k])
		}
		// Room for every batch: sending never blocks, taking a free batch
		// does.
		ch := make(chan *fanBatch, fanBatches)
		f.work[w] = ch
		f.wg.Add(1)
		go f.worker(ch, mine)
	}
	f.cur = <-f.free
	return f
}

func (f *fanOut) worker(ch <-chan *fanBatch, observers []func(*history.Op)) {
	defer f.wg.Done()
	failed := false
	for b := range ch {
		if !failed {
			failed = f.observe(b, observers)
		}
		if b.left.Add(-1) == 0 {
			b.ops = b.ops[:0]
			f.free <- b
		}
	}
}

// observe runs the observers over a batch, each over all its entries in
// turn; it reports a panic.
func (f *fanOut) observe(b *fanBatch, observers []func(*history.Op)) (failed bool) {
	defer func() {
		if p := recover(); p != nil {
			f.panicMu.Lock()
			if f.panicked == nil {
				f.panicked = p
			}
			f.panicMu.Unlock()
			failed = true
		}
	}()
	for _, obs := range observers {
		for i := range b.ops {
			obs(&b.ops[i])
		}
	}
	return false
}

// add copies the entry into the current batch, sending it when full.
func (f *fanOut) add(op *history.Op) {
	f.cur.ops = append(f.cur.ops, *op)
	if len(f.cur.ops) == fanBatchOps {
		f.send()
		f.cur = <-f.free
	}
}

func (f *fanOut) send() {
	f.cur.left.Store(int32(len(f.work)))
	for _, ch := range f.work {
		ch <- f.cur
	}
	f.cur = nil
}

// close sends the last entries, waits for the workers to observe
// everything and stops them.
func (f *fanOut) close() {
	if len(f.cur.ops) > 0 {
		f.send()
	}
	for _, ch := range f.work {
		close(ch)
	}
	f.wg.Wait()
	if f.panicked != nil {
		panic(f.panicked)
	}
}

// inOrder runs work(i) for i in [0, n) on up to jobs goroutines and hands
// each result to use on the caller's goroutine in the order of i, until
// use returns false. Memory stays bounded: at most 2×jobs results wait
// for their turn (work started past a slow one waits for it). With one
// job it is the plain loop: work(i), use(i), on the caller's goroutine.
// Work started before use said stop is finished and dropped before
// inOrder returns.
func inOrder[T any](jobs, n int, work func(i int) T, use func(i int, r T) bool) {
	if jobs <= 1 || n <= 1 {
		for i := range n {
			if !use(i, work(i)) {
				return
			}
		}
		return
	}
	type slot struct {
		i    int
		done chan T
	}
	// pending holds the slots in order, for use; next the same slots
	// for the workers. A slot goes to pending first, so the window is
	// pending's room.
	pending := make(chan slot, 2*jobs)
	next := make(chan slot)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(pending)
		defer close(next)
		for i := range n {
			s := slot{i, make(chan T, 1)}
			select {
			case pending <- s:
			case <-stop:
				return
			}
			select {
			case next <- s:
			case <-stop:
				return
			}
		}
	}()
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range next {
				s.done <- work(s.i)
			}
		}()
	}
	defer wg.Wait()
	defer close(stop)
	for s := range pending {
		if !use(s.i, <-s.done) {
			return
		}
	}
}

package sim

import "iter"

// Co is a coroutine of a World: code that runs only while the world's
// scheduler waits for it, so that code written to block (a client library
// calling its transport) runs inside a simulation as one step of its
// events, deterministically. The scheduler starts or resumes it with
// Resume and is blocked until it parks again (Park) or returns; inside,
// Park hands control back and blocks until the next Resume.
//
// It is built on iter.Pull, whose switches go straight from one goroutine
// to the other (the runtime's coroutine switch) instead of through the
// scheduler: a pair of channels cost a wake-up of another thread (futex)
// at every switch, a tenth of a simulation's time.
type Co struct {
	next  func() (struct{}, bool)
	yield func(struct{}) bool
	done  bool
	// stopped: Stop was called; Park returns false from then on.
	stopped bool
}

// Go makes a coroutine of f, which runs from the first Resume. f must only
// block in Park (no goroutines, channels or locks of its own that the
// world does not drive), and return once Park returns false.
func Go(f func(co *Co)) *Co {
	co := &Co{}
	co.next, _ = iter.Pull(func(yield func(struct{}) bool) {
		co.yield = yield
		if !co.stopped {
			f(co)
		}
		co.done = true
	})
	return co
}

// Resume runs the coroutine until it parks or returns. Called by the
// scheduler (an event's function), never by the coroutine itself. A panic
// inside the coroutine comes out of Resume.
func (co *Co) Resume() {
	if co.done {
		return
	}
	co.next()
}

// Park hands control back to the scheduler and waits to be resumed; it
// reports false once the coroutine has been stopped (it must then return).
func (co *Co) Park() bool {
	co.yield(struct{}{})
	return !co.stopped
}

// Stop ends the coroutine: a parked one sees Park return false and must
// return; one never started does not run. Called by the scheduler.
func (co *Co) Stop() {
	if co.done {
		return
	}
	co.stopped = true
	co.Resume()
}

// Done reports whether the coroutine has returned.
func (co *Co) Done() bool { return co.done }

// Package clock is the injectable clock every timer, timeout and timestamp in
// impl/ goes through, so the harness can skew a node's sense of time.
//
// A node cannot have its real clock skewed: Go reads time through the vDSO
// (libfaketime cannot reach it) and containers share the host's clock. So the
// skew lives here, inside the process: an offset added to Now, and a drift
// rate that makes the clock run fast or slow. Timers and tickers run at the
// drifted rate (a 10 s timer on a clock drifting +10 % fires after about
// 9.1 s of real time); an offset jump moves Now but does not fire or delay
// running timers, as with a monotonic clock. Durations — how long a member
// has been silent, how long reachability has been stable, how long ago a
// member was downed — are measured with Elapsed, which runs at the drifted
// rate like the timers but never jumps with the offset: a clock bump must not
// make a resolver or a removal margin decide early (a bump forward would
// otherwise satisfy any wait at once). Code outside impl/ — memberlist's
// own probe and gossip timers, the Go HTTP server's timeouts — keeps real time.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock is what impl/ code uses instead of the time package.
type Clock interface {
	// Now is the node's idea of the current time (real time plus skew).
	Now() time.Time
	// Since is Now().Sub(t).
	Since(t time.Time) time.Duration
	// Elapsed is this clock's monotonic reading: the time passed since the
	// clock was made, at the drifted rate, never moved by an offset. Use it
	// (not Now) to measure how long something lasted.
	Elapsed() time.Duration
	// NewTimer fires once after d of this clock's time.
	NewTimer(d time.Duration) Timer
	// NewTicker ticks every d of this clock's time.
	NewTicker(d time.Duration) Ticker
	// Sleep waits d of this clock's time, or until ctx is done.
	Sleep(ctx context.Context, d time.Duration) error
}

// Timer fires once, as a time.Timer does: its channel has room for one
// firing, and Stop and Reset report whether it was still pending.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker ticks every period, as a time.Ticker does: a tick nobody takes
// before the next is dropped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Base is where a clock reads the time and sets its timers: the machine's
// (Machine) or a simulation's (Virtual). An Adjustable clock adds a node's
// skew on top of it.
type Base interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	NewTicker(d time.Duration) Ticker
}

// Machine is the machine's time: the time package.
type Machine struct{}

// Now implements Base.
func (Machine) Now() time.Time { return time.Now() }

// NewTimer implements Base.
func (Machine) NewTimer(d time.Duration) Timer { return machineTimer{time.NewTimer(d)} }

// NewTicker implements Base.
func (Machine) NewTicker(d time.Duration) Ticker { return machineTicker{time.NewTicker(d)} }

// AfterFunc calls f in its own goroutine after d, unless stopped first.
// For I/O drivers (the peer transport's idle streams); a node's decisions
// use its Clock.
func (Machine) AfterFunc(d time.Duration, f func()) Timer { return machineTimer{time.AfterFunc(d, f)} }

type machineTimer struct{ t *time.Timer }

func (m machineTimer) C() <-chan time.Time        { return m.t.C }
func (m machineTimer) Stop() bool                 { return m.t.Stop() }
func (m machineTimer) Reset(d time.Duration) bool { return m.t.Reset(d) }

type machineTicker struct{ t *time.Ticker }

func (m machineTicker) C() <-chan time.Time   { return m.t.C }
func (m machineTicker) Stop()                 { m.t.Stop() }
func (m machineTicker) Reset(d time.Duration) { m.t.Reset(d) }

// Skew is the adjustment a Adjustable clock applies.
type Skew struct {
	// Offset is added to real time (may be negative).
	Offset time.Duration `json:"offset_ns"`
	// Drift is the rate error: 0.01 makes the clock gain 1 % (10 ms a second).
	// It must be greater than -1.
	Drift float64 `json:"drift"`
}

// Adjustable is a Clock whose offset and drift can be changed at run time.
// The zero skew is real time. It is safe for concurrent use.
type Adjustable struct {
	mu   sync.Mutex
	base Base
	// anchor is the real time at which offset was last set; since then the
	// skew grows by drift per unit of real time.
	anchor time.Time
	offset time.Duration
	drift  float64
	// elapsed is the monotonic reading at anchor.
	elapsed time.Duration
}

// Real returns an Adjustable clock on the machine's time, with no skew.
func Real() *Adjustable { return On(Machine{}) }

// On returns an Adjustable clock on base's time, with no skew.
func On(base Base) *Adjustable {
	return &Adjustable{base: base, anchor: base.Now()}
}

// MaxOffset bounds an offset the clock accepts: far beyond any useful
// fault, and small enough that no arithmetic overflows.
const MaxOffset = 24 * time.Hour

// MaxDrift bounds the drift rate either way (±50 %).
const MaxDrift = 0.5

// Set replaces the skew. The clock continues from Now with the new offset
// and drift, so Now may jump by the change of offset but never by drift.
func (c *Adjustable) Set(s Skew) error {
	if err := s.Validate(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	real := c.base.Now()
	c.elapsed = c.elapsedLocked(real)
	c.anchor = real
	c.offset = s.Offset
	c.drift = s.Drift
	return nil
}

// Validate reports whether s is within the bounds the clock accepts.
func (s Skew) Validate() error {
	if s.Offset > MaxOffset || s.Offset < -MaxOffset {
		return &RangeError{What: "offset", Value: s.Offset.String(), Limit: "±" + MaxOffset.String()}
	}
	if s.Drift != s.Drift || s.Drift > MaxDrift || s.Drift < -MaxDrift { // NaN too
		return &RangeError{What: "drift", Value: formatFloat(s.Drift), Limit: "±0.5"}
	}
	return nil
}

// Current returns the skew in force now: the offset includes what drift has
// accumulated since the last Set.
func (c *Adjustable) Current() Skew {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Skew{Offset: c.skewLocked(c.base.Now()), Drift: c.drift}
}

func (c *Adjustable) skewLocked(real time.Time) time.Duration {
	return c.offset + time.Duration(float64(real.Sub(c.anchor))*c.drift)
}

// Now implements Clock.
func (c *Adjustable) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	real := c.base.Now()
	return real.Add(c.skewLocked(real))
}

// Since implements Clock.
func (c *Adjustable) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Elapsed implements Clock.
func (c *Adjustable) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elapsedLocked(c.base.Now())
}

func (c *Adjustable) elapsedLocked(real time.Time) time.Duration {
	return c.elapsed + time.Duration(float64(real.Sub(c.anchor))*(1+c.drift))
}

// Real converts a duration of this clock's time into real time.
func (c *Adjustable) Real(d time.Duration) time.Duration {
	c.mu.Lock()
	drift := c.drift
	c.mu.Unlock()
	r := time.Duration(float64(d) / (1 + drift))
	if d > 0 && r <= 0 {
		r = 1
	}
	return r
}

// NewTimer implements Clock.
func (c *Adjustable) NewTimer(d time.Duration) Timer {
	return adjustedTimer{c.base.NewTimer(c.Real(d)), c}
}

// NewTicker implements Clock. d must be positive.
func (c *Adjustable) NewTicker(d time.Duration) Ticker {
	return adjustedTicker{c.base.NewTicker(c.Real(d)), c}
}

// adjustedTimer and adjustedTicker take their durations in the clock's
// time when reset, as when made.
type adjustedTimer struct {
	Timer
	c *Adjustable
}

func (t adjustedTimer) Reset(d time.Duration) bool { return t.Timer.Reset(t.c.Real(d)) }

type adjustedTicker struct {
	Ticker
	c *Adjustable
}

func (t adjustedTicker) Reset(d time.Duration) { t.Ticker.Reset(t.c.Real(d)) }

// Sleep implements Clock.
func (c *Adjustable) Sleep(ctx context.Context, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RangeError is returned for a skew outside the accepted bounds.
type RangeError struct{ What, Value, Limit string }

func (e *RangeError) Error() string {
	return "clock " + e.What + " " + e.Value + " out of range " + e.Limit
}

// WithTimeout returns a context cancelled after d of c's time (or when
// parent is done): a timeout that drifts and runs with the node's skewed
// clock, as every timer of impl/ does. Its Err is then context.Canceled;
// context.Cause says context.DeadlineExceeded.
func WithTimeout(parent context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	t := c.NewTimer(d)
	go func() {
		defer t.Stop()
		select {
		case <-t.C():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

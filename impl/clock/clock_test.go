package clock

import (
	"testing"
	"time"
)

// fakeReal is a base clock moved by hand: a virtual one, set by t.
type fakeReal struct {
	t time.Time
	v *Virtual
}

func newFake(start time.Time) *fakeReal { return &fakeReal{t: start, v: NewVirtual(start)} }

func (f *fakeReal) set(t time.Time) { f.t = t; f.v.AdvanceTo(t) }

func TestAdjustable(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		skew    Skew
		elapsed time.Duration
		want    time.Duration // Now - real now
	}{
		{"real", Skew{}, time.Minute, 0},
		{"offset forward", Skew{Offset: 90 * time.Second}, time.Minute, 90 * time.Second},
		{"offset back", Skew{Offset: -2 * time.Minute}, time.Minute, -2 * time.Minute},
		{"drift fast", Skew{Drift: 0.01}, 100 * time.Second, time.Second},
		{"drift slow with offset", Skew{Offset: time.Second, Drift: -0.01}, 100 * time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newFake(start)
			c := On(r.v)
			if err := c.Set(tt.skew); err != nil {
				t.Fatal(err)
			}
			r.set(start.Add(tt.elapsed))
			if got := c.Now().Sub(r.t); got != tt.want {
				t.Fatalf("skew = %v, want %v", got, tt.want)
			}
			if got := c.Current().Offset; got != tt.want {
				t.Fatalf("Current().Offset = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSetKeepsAccumulatedDriftOut(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newFake(start)
	c := On(r.v)
	if err := c.Set(Skew{Drift: 0.5}); err != nil {
		t.Fatal(err)
	}
	r.set(r.t.Add(10 * time.Second))
	if got := c.Current().Offset; got != 5*time.Second {
		t.Fatalf("accumulated %v, want 5s", got)
	}
	// A reset returns to real time at once.
	if err := c.Set(Skew{}); err != nil {
		t.Fatal(err)
	}
	if got := c.Now(); !got.Equal(r.t) {
		t.Fatalf("after reset Now = %v, want %v", got, r.t)
	}
}

func TestValidate(t *testing.T) {
	nan := 0.0
	nan = nan / nan
	bad := []Skew{
		{Offset: 25 * time.Hour},
		{Offset: -25 * time.Hour},
		{Drift: 0.6},
		{Drift: -0.9},
		{Drift: nan},
	}
	for _, s := range bad {
		if err := Real().Set(s); err == nil {
			t.Errorf("Set(%+v) accepted", s)
		}
	}
}

func TestRealScalesByDrift(t *testing.T) {
	c := Real()
	if err := c.Set(Skew{Drift: 0.25}); err != nil {
		t.Fatal(err)
	}
	if got := c.Real(10 * time.Second); got != 8*time.Second {
		t.Fatalf("Real(10s) at +25%% = %v, want 8s", got)
	}
}

// TestElapsedIgnoresOffsetsButDrifts: an offset jump (clock:bump,
// clock:strobe) must not move the monotonic reading, or every duration
// measured with it (failure detection, stable-after, the removal margin)
// would end early; drift (clock:drift) does change its rate, as it does
// the timers'.
func TestElapsedIgnoresOffsetsButDrifts(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		name    string
		set     *Skew // applied before advancing
		advance time.Duration
		want    time.Duration // Elapsed after the step
	}{
		{"real time", nil, 10 * time.Second, 10 * time.Second},
		{"a bump forward moves nothing", &Skew{Offset: 5 * time.Minute}, 0, 10 * time.Second},
		{"time passes at the real rate", nil, 10 * time.Second, 20 * time.Second},
		{"a bump back moves nothing", &Skew{Offset: -5 * time.Minute}, 0, 20 * time.Second},
		{"fast drift runs fast", &Skew{Drift: 0.5}, 10 * time.Second, 35 * time.Second},
		{"slow drift runs slow", &Skew{Drift: -0.5}, 10 * time.Second, 40 * time.Second},
		{"a reset keeps the reading", &Skew{}, 10 * time.Second, 50 * time.Second},
	}
	r := newFake(start)
	c := On(r.v)
	for _, st := range steps {
		if st.set != nil {
			if err := c.Set(*st.set); err != nil {
				t.Fatal(err)
			}
		}
		r.set(r.t.Add(st.advance))
		if got := c.Elapsed(); got != st.want {
			t.Fatalf("%s: Elapsed = %v, want %v", st.name, got, st.want)
		}
	}
}

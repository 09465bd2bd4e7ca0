package nemesis

import (
	"context"
	"math/rand/v2"
	"time"
)

// ClockTargets is what a clock fault did. The skew is the node's own
// in-process clock (docs/protocol.md, Admin → Clock): Go programs read time
// through the vDSO, which libfaketime cannot reach, and containers share
// the host's clock.
type ClockTargets struct {
	Targets []string `json:"targets"`
	// Offsets per node in milliseconds (bump, strobe), drift per node
	// (drift).
	OffsetMs map[string]float64 `json:"offset_ms,omitempty"`
	Drift    map[string]float64 `json:"drift,omitempty"`
	// PeriodMs is the strobe's flip period.
	PeriodMs int64 `json:"period_ms,omitempty"`
}

func clockFaults() []Fault {
	return []Fault{
		{
			Name:   "clock:bump",
			Doc:    "move the clocks of one node, a minority or every node by up to five minutes, either way; heal resets them",
			check:  needs("clock"),
			inject: clockBump,
		},
		{
			Name:   "clock:strobe",
			Doc:    "flip the clocks of one node, a minority or every node between real time and an offset of up to a minute, every 50-500 ms; heal stops and resets them",
			check:  needs("clock"),
			inject: clockStrobe,
		},
		{
			Name:   "clock:drift",
			Doc:    "make the clocks of one node, a minority or every node run 1-5 % fast or slow; heal resets them",
			check:  needs("clock"),
			inject: clockDrift,
		},
	}
}

// randomOffset is ±(1 s … max).
func randomOffset(rng *rand.Rand, maxOffset time.Duration) time.Duration {
	d := time.Second + time.Duration(rng.Int64N(int64(maxOffset-time.Second)))
	if rng.IntN(2) == 0 {
		d = -d
	}
	return d.Round(time.Millisecond)
}

func setClock(ctx context.Context, env *Env, name string, offset time.Duration, drift float64) error {
	n, ok := env.node(name)
	if !ok {
		return errNoNode(name)
	}
	_, err := env.client(n).SetClock(ctx, offset, drift)
	return err
}

// resetClocks sets the named nodes' clocks back to real time.
func resetClocks(ctx context.Context, env *Env, names []string) error {
	return env.forEach(names, func(name string) error {
		return env.retry(ctx, func() error { return setClock(ctx, env, name, 0, 0) })
	})
}

func clockBump(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
	targets, err := pick(ctx, env, rng, nodeNames(env), "some")
	if err != nil {
		return nil, err
	}
	t := ClockTargets{Targets: targets, OffsetMs: map[string]float64{}}
	offsets := map[string]time.Duration{}
	for _, name := range targets {
		offsets[name] = randomOffset(rng, 5*time.Minute)
		t.OffsetMs[name] = float64(offsets[name].Milliseconds())
	}
	done, err := env.forEachDone(targets, func(name string) error { return setClock(ctx, env, name, offsets[name], 0) })
	if len(done) == 0 {
		return attempted(t), err
	}
	return &Active{Targets: t, heal: func(ctx context.Context) (any, error) {
		return Targets{targets, "reset"}, resetClocks(ctx, env, targets)
	}}, err
}

func clockDrift(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
	targets, err := pick(ctx, env, rng, nodeNames(env), "some")
	if err != nil {
		return nil, err
	}
	t := ClockTargets{Targets: targets, Drift: map[string]float64{}}
	for _, name := range targets {
		d := []float64{0.01, 0.02, 0.05}[rng.IntN(3)]
		if rng.IntN(2) == 0 {
			d = -d
		}
		t.Drift[name] = d
	}
	done, err := env.forEachDone(targets, func(name string) error { return setClock(ctx, env, name, 0, t.Drift[name]) })
	if len(done) == 0 {
		return attempted(t), err
	}
	return &Active{Targets: t, heal: func(ctx context.Context) (any, error) {
		return Targets{targets, "reset"}, resetClocks(ctx, env, targets)
	}}, err
}

// clockStrobe flips the targets' clocks between real time and an offset
// from background work the Active owns (Env.background); heal stops it,
// then resets the clocks.
func clockStrobe(ctx context.Context, env *Env, rng *rand.Rand) (*Active, error) {
	targets, err := pick(ctx, env, rng, nodeNames(env), "some")
	if err != nil {
		return nil, err
	}
	period := time.Duration(50+rng.IntN(451)) * time.Millisecond
	t := ClockTargets{Targets: targets, OffsetMs: map[string]float64{}, PeriodMs: period.Milliseconds()}
	offsets := map[string]time.Duration{}
	for _, name := range targets {
		offsets[name] = randomOffset(rng, time.Minute)
		t.OffsetMs[name] = float64(offsets[name].Milliseconds())
	}
	if done, err := env.forEachDone(targets, func(name string) error { return setClock(ctx, env, name, offsets[name], 0) }); err != nil {
		if len(done) == 0 {
			return attempted(t), err
		}
		return &Active{Targets: t, heal: func(ctx context.Context) (any, error) {
			return Targets{targets, "reset"}, resetClocks(ctx, env, targets)
		}}, err
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	wait := env.background(func() {
		on := true
		for {
			if env.sleep(sctx, period) != nil || sctx.Err() != nil {
				return
			}
			on = !on
			// A node that misses a flip (busy, restarting) catches up at
			// the next one: the strobe is best effort by nature.
			env.forEach(targets, func(name string) error {
				rctx, cancel := context.WithTimeout(sctx, period)
				defer cancel()
				off := time.Duration(0)
				if on {
					off = offsets[name]
				}
				return setClock(rctx, env, name, off, 0)
			})
		}
	})
	return &Active{Targets: t, heal: func(ctx context.Context) (any, error) {
		stop()
		wait()
		return Targets{targets, "reset"}, resetClocks(ctx, env, targets)
	}}, nil
}

package nemesis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// ScheduleFormat names a schedule file (docs/schedules.md).
const ScheduleFormat = "shardtest-schedule"

// scheduleFile is a fault schedule as a person writes it: steps at
// durations from the start of the main phase, in time order.
type scheduleFile struct {
	Format string     `json:"format"`
	Steps  []fileStep `json:"steps"`
}

type fileStep struct {
	At     string `json:"at"`
	Fault  string `json:"fault"`
	Heal   bool   `json:"heal,omitempty"`
	Key    string `json:"key,omitempty"`
	Target string `json:"target,omitempty"`
	// Seed fixes the step's own random choices; without it they follow
	// the run's --seed.
	Seed uint64 `json:"seed,omitempty"`
}

// ReadSchedule reads a schedule file. Its steps' own random choices follow
// their "seed", or, without one, the run's seed (SeedSchedule). The checks that need the test (the
// faults' names, the main phase's length) are the run's; these are the
// file's: strict JSON with no unknown field, the format named, an "at" of
// every step a duration, steps in time order, heals of faults injected.
func ReadSchedule(r io.Reader) ([]Step, error) {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if len(data) > 1<<20 {
		return nil, errors.New("schedule: larger than 1 MB")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f scheduleFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("schedule: not a schedule file (docs/schedules.md): %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("schedule: text after the schedule's object")
	}
	if f.Format != ScheduleFormat {
		return nil, fmt.Errorf("schedule: format %q, want %q", f.Format, ScheduleFormat)
	}
	if len(f.Steps) == 0 {
		return nil, errors.New("schedule: no steps")
	}
	steps := make([]Step, len(f.Steps))
	for i, s := range f.Steps {
		at, err := time.ParseDuration(strings.TrimSpace(s.At))
		switch {
		case s.At == "":
			return nil, fmt.Errorf("schedule step %d: no \"at\" (e.g. \"5s\")", i)
		case err != nil:
			return nil, fmt.Errorf("schedule step %d: at %q: want a duration such as \"5s\" or \"1m30s\"", i, s.At)
		case at < 0:
			return nil, fmt.Errorf("schedule step %d: at %v is before the main phase", i, at)
		case s.Fault == "":
			return nil, fmt.Errorf("schedule step %d: no fault (shardtest list nemeses)", i)
		}
		steps[i] = Step{At: at, Fault: s.Fault, Heal: s.Heal, Key: s.Key, Target: s.Target, Seed: s.Seed}
	}
	if err := ValidateSchedule(steps); err != nil {
		return nil, err
	}
	return steps, nil
}

// WriteSchedule writes steps as a schedule file, which ReadSchedule reads
// back as they were.
func WriteSchedule(w io.Writer, steps []Step) error {
	f := scheduleFile{Format: ScheduleFormat, Steps: make([]fileStep, len(steps))}
	for i, s := range steps {
		f.Steps[i] = fileStep{At: s.At.String(), Fault: s.Fault, Heal: s.Heal, Key: s.Key, Target: s.Target, Seed: s.Seed}
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

package checker

import (
	"errors"
	"path/filepath"

	"github.com/shardtest/shardtest/history"
)

// Inputs are what a checker judges besides the history's entries, handed
// to it by its caller: the node events and status samples recorded beside
// the history, read once for every checker, and where it may write its
// files. A checker never reads its run's folder itself, so a caller can
// judge a cut-off prefix (detect), a simulated run or a run in memory the
// same way. The fault windows are the history's own nemesis entries
// (history.Faults), which every checker sees in the stream.
type Inputs struct {
	// Events are the node events (events.jsonl); nil when none were
	// recorded (the implementation lacks the events capability, or an
	// older run), EventsErr set when they could not be read.
	Events    *history.Events
	EventsErr error
	// Samples are the status samples (status.jsonl); nil when none were
	// recorded, SamplesErr set when they could not be read.
	Samples    *history.Samples
	SamplesErr error
	// Out is the folder the checker writes its files into (a failing
	// entity's visualization, the availability chart); "": none.
	Out string
}

// ReadInputs reads the node events and status samples stored in the run
// folder dir (a missing file is none recorded; one that cannot be read is
// its error), and makes dir the checkers' output folder.
func ReadInputs(dir string) Inputs {
	in := Inputs{Out: dir}
	evs, err := history.ReadEventsFile(filepath.Join(dir, history.EventsFile))
	switch {
	case errors.Is(err, history.ErrNoEvents):
	case err != nil:
		in.EventsErr = err
	default:
		in.Events = evs
	}
	ss, err := history.ReadStatusFile(filepath.Join(dir, history.StatusFile))
	switch {
	case errors.Is(err, history.ErrNoSamples):
	case err != nil:
		in.SamplesErr = err
	default:
		in.Samples = ss
	}
	return in
}

// Until is in as far as the harness had it at harness time cut: the
// events and samples whose windows closed by then (a prefix of the run,
// to date a violation).
func (in Inputs) Until(cut int64) Inputs {
	out := in
	if in.Events != nil {
		evs := &history.Events{}
		for _, e := range in.Events.Events {
			if e.Hi <= cut {
				evs.Events = append(evs.Events, e)
			}
		}
		out.Events = evs
	}
	if in.Samples != nil {
		ss := &history.Samples{}
		for _, s := range in.Samples.Samples {
			if s.Hi <= cut {
				ss.Samples = append(ss.Samples, s)
			}
		}
		out.Samples = ss
	}
	return out
}

package bench

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/regular"
)

// RunCost is where a run's time went, read from its history's phase
// entries and its results.json: a campaign of many short runs pays all of
// it for every run, and only Main drives traffic.
type RunCost struct {
	// Ready: from the run's start to its main phase (the cluster started
	// and ready, the capabilities read, the recorders started).
	Ready time.Duration `json:"ready_ns"`
	// Main is the main phase; Recovery the wait for the cluster to
	// converge after the last heal (runs with faults); Final the read-back.
	Main     time.Duration `json:"main_ns"`
	Recovery time.Duration `json:"recovery_ns"`
	Final    time.Duration `json:"final_ns"`
	// After: from the end of the read-back to the run's end (stopping the
	// cluster and copying its logs, the checkers, the reports).
	After time.Duration `json:"after_ns"`
	Total time.Duration `json:"total_ns"`
}

// ReadRunCost reads the cost of the run stored in dir.
func ReadRunCost(dir string) (RunCost, error) {
	res, err := run.ReadResult(dir)
	if err != nil {
		return RunCost{}, err
	}
	f, err := regular.Open(filepath.Join(dir, history.HistoryFile))
	if err != nil {
		return RunCost{}, err
	}
	defer f.Close()
	at := map[string]int64{}
	if _, _, err := history.Scan(f, func(op *history.Op) error {
		if op.Kind == history.Phase {
			if _, ok := at[op.F]; !ok {
				at[op.F] = op.Time
			}
		}
		return nil
	}); err != nil {
		return RunCost{}, err
	}
	for _, p := range []string{history.PhaseMain, history.PhaseFinal, history.PhaseEnd} {
		if _, ok := at[p]; !ok {
			return RunCost{}, fmt.Errorf("%s: the history has no %s phase: the run did not finish", dir, p)
		}
	}
	c := RunCost{Total: res.Duration, Ready: time.Duration(at[history.PhaseMain])}
	mainEnd := at[history.PhaseFinal]
	if r, ok := at[history.PhaseRecovery]; ok {
		mainEnd = r
		c.Recovery = time.Duration(at[history.PhaseFinal] - r)
	}
	c.Main = time.Duration(mainEnd - at[history.PhaseMain])
	c.Final = time.Duration(at[history.PhaseEnd] - at[history.PhaseFinal])
	c.After = c.Total - time.Duration(at[history.PhaseEnd])
	return c, nil
}

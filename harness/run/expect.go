package run

import (
	"fmt"
	"strings"
	"time"

	"github.com/shardtest/shardtest/checker"
)

// Expectation is a checker a scenario adds to its workload's: what must
// hold in that situation beyond the workload's properties (shards move to
// joined nodes; the surviving side of a split serves). It is stored in
// test.json, so `shardtest check` judges a stored run the same way.
type Expectation struct {
	// Name is the checker's name: shards-moved, served-during-fault,
	// answered-after-heal or passivated.
	Name string `json:"name"`
	// Fault is the fault name (or prefix, e.g. "partition:") it judges.
	Fault string `json:"fault,omitempty"`
	// Settle is how long after the inject judging starts.
	Settle time.Duration `json:"settle_ns,omitempty"`
	// Min is the least count the checker wants (shards-moved, passivated).
	Min int `json:"min,omitempty"`
}

// Checker returns the expectation's checker, or why it has none.
func (e Expectation) Checker() (checker.Checker, error) {
	switch e.Name {
	case "shards-moved":
		return checker.ShardsMoved{Min: e.Min}, nil
	case "served-during-fault":
		if e.Fault == "" {
			return nil, fmt.Errorf("expectation %s needs a fault", e.Name)
		}
		return checker.ServedDuringFault{Fault: e.Fault, Settle: e.Settle}, nil
	case "passivated":
		return checker.Passivated{Min: e.Min}, nil
	case "answered-after-heal":
		if e.Fault == "" {
			return nil, fmt.Errorf("expectation %s needs a fault", e.Name)
		}
		return checker.AnsweredAfterHeal{Fault: e.Fault}, nil
	}
	return nil, fmt.Errorf("unknown expectation %q (known: %s)", e.Name, strings.Join(ExpectationNames(), ", "))
}

// ExpectationNames lists the expectations a scenario may add.
func ExpectationNames() []string {
	return []string{"answered-after-heal", "passivated", "served-during-fault", "shards-moved"}
}

package history

import (
	"encoding/json"
)

// Nemesis actions.
const (
	ActionInject = "inject"
	ActionHeal   = "heal"
)

// NemesisValue is the value of a nemesis entry (docs/history.md, Nemesis
// entries).
type NemesisValue struct {
	// Action is ActionInject or ActionHeal.
	Action string `json:"action"`
	// Began is when the harness started the action, on the history's
	// clock; the entry's time is when it returned (took effect).
	Began int64 `json:"began"`
	// Failed marks an inject that did nothing at all (it failed before any
	// effect): no heal follows it, and no checker counts it as a fault.
	// An inject that failed in part is not Failed; its error says what
	// went wrong and its heal follows.
	Failed bool `json:"failed,omitempty"`
	// Targets say what was done (the fault's own shape; see docs).
	Targets any `json:"targets,omitempty"`
}

// NemesisEntry is a nemesis entry read back.
type NemesisEntry struct {
	// Index is the entry's position in File.Ops.
	Index  int
	Fault  string
	Action string
	// Began is when the action started and At when it took effect (the
	// entry's time); Began is never after At.
	Began, At int64
	Failed    bool
	Error     string
	// Nodes are the nodes the targets name in their "targets" list (kill,
	// pause, clock and member faults), if they do.
	Nodes []string
}

// ReadNemesis reads the nemesis entry ops[i]; ok is false when it is not one
// or its action is unreadable.
func ReadNemesis(ops []Op, i int) (NemesisEntry, bool) {
	op := &ops[i]
	if op.Kind != Nemesis {
		return NemesisEntry{}, false
	}
	var v struct {
		Action  string `json:"action"`
		Began   *int64 `json:"began"`
		Failed  bool   `json:"failed"`
		Targets struct {
			Targets []string `json:"targets"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(op.Value, &v); err != nil {
		// Targets of another shape (a partition's components): read the
		// action alone.
		var a struct {
			Action string `json:"action"`
			Began  *int64 `json:"began"`
			Failed bool   `json:"failed"`
		}
		if json.Unmarshal(op.Value, &a) != nil {
			return NemesisEntry{}, false
		}
		v.Action, v.Began, v.Failed = a.Action, a.Began, a.Failed
	}
	if v.Action != ActionInject && v.Action != ActionHeal {
		return NemesisEntry{}, false
	}
	e := NemesisEntry{Index: i, Fault: op.F, Action: v.Action, Began: op.Time, At: op.Time,
		Failed: v.Failed && v.Action == ActionInject, Error: op.Error, Nodes: v.Targets.Targets}
	if v.Began != nil && *v.Began >= 0 && *v.Began <= op.Time {
		e.Began = *v.Began
	}
	return e, true
}

// FaultSpan is one inject of a fault and its heal.
type FaultSpan struct {
	Inject NemesisEntry
	// Heal is the heal that ended it; nil: never healed (the history ends
	// first), or a failed inject, which has none.
	Heal *NemesisEntry
}

// Fault is the fault's name.
func (s FaultSpan) Fault() string { return s.Inject.Fault }

// Failed reports whether the inject did nothing (no fault happened).
func (s FaultSpan) Failed() bool { return s.Inject.Failed }

// Faults pairs every inject with its heal: the next heal of the same fault,
// skipping heals that name target nodes none of which the inject names
// (two injects of one fault under different schedule keys, e.g. two joined
// nodes, each healed on its own). A failed inject gets no heal. unmatched
// counts heals that closed nothing.
func Faults(ops []Op) (spans []FaultSpan, unmatched int) {
	open := map[string][]int{} // fault -> indexes into spans
	for i := range ops {
		if ops[i].Kind != Nemesis {
			continue
		}
		e, ok := ReadNemesis(ops, i)
		if !ok {
			continue
		}
		switch e.Action {
		case ActionInject:
			if !e.Failed {
				open[e.Fault] = append(open[e.Fault], len(spans))
			}
			spans = append(spans, FaultSpan{Inject: e})
		case ActionHeal:
			var still []int
			closed := 0
			for _, k := range open[e.Fault] {
				s := &spans[k]
				if len(e.Nodes) > 0 && len(s.Inject.Nodes) > 0 && !intersects(e.Nodes, s.Inject.Nodes) {
					still = append(still, k)
					continue
				}
				heal := e
				s.Heal = &heal
				closed++
			}
			if closed == 0 {
				unmatched++
			}
			open[e.Fault] = still
		}
	}
	return spans, unmatched
}

func intersects(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

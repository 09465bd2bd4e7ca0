package checker

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The registry is the one table of checkers: each one's name, what it
// proves in a line, which runs it judges (a workload's, every run with
// faults, or a scenario's when the scenario adds it) and how it is built
// from its parameters. run, check, list checkers, scenario expectations,
// detect, shrink and the report all read it; a new checker is its file
// and one entry here (TestRegistry fails for a checker left out).

// Spec asks for a checker by name, with its parameters: a scenario's
// expectations are Specs, stored in test.json so a stored run is checked
// again the same way.
type Spec struct {
	Name string `json:"name"`
	// Fault is the fault name, or a prefix of names (e.g. "partition:"),
	// the checker judges.
	Fault string `json:"fault,omitempty"`
	// Settle is how long after the fault's inject judging starts.
	Settle time.Duration `json:"settle_ns,omitempty"`
	// Min is the least count the checker wants.
	Min int `json:"min,omitempty"`
}

// Parameters of a Spec.
const (
	ParamFault  = "fault"
	ParamSettle = "settle"
	ParamMin    = "min"
)

// Every, as an entry's workload, is every workload.
const Every = "*"

// Entry is one checker of the registry.
type Entry struct {
	Name string
	// Doc says in one line what the checker proves (list checkers, the
	// report).
	Doc string
	// Workloads are those whose every run it judges (Every: all). None:
	// it judges only the runs of scenarios that add it (Spec).
	Workloads []string
	// WithFaults: it also judges every run with faults.
	WithFaults bool
	// Capabilities: it judges only implementations that declare one of
	// these (nil: every implementation); it has nothing to judge in the
	// others and is left out, not unknown.
	Capabilities []string
	// Reads names what it judges besides the history's entries: "events"
	// (node events), "samples" (status samples).
	Reads []string
	// Params are the Spec parameters it takes; Required those it needs.
	Params, Required []string
	// New builds it from a Spec whose parameters were checked.
	New func(Spec) Checker
}

// Registry returns the table of checkers, in the order their results are
// listed: the workloads' own, the shared ones, then the scenarios'.
func Registry() []Entry {
	none := func(c Checker) func(Spec) Checker { return func(Spec) Checker { return c } }
	return []Entry{
		{Name: "linearizable", Workloads: []string{"register"}, New: none(Linearizable{}),
			Doc: "each register entity's history is linearizable (porcupine, per entity; a failing entity's visualization is written)"},
		{Name: "unique-ids", Workloads: []string{"idgen"}, New: none(UniqueIDs{}),
			Doc: "the id-generator singleton hands out every id once, increasing in real-time order"},
		{Name: "append-log", Workloads: []string{"append"}, New: none(AppendLog{}),
			Doc: "no acknowledged append is lost or duplicated and real-time order is kept; tells at most once"},
		{Name: "sender-order", Workloads: []string{"append"}, New: none(SenderOrder{}),
			Doc: "per sender and region, tells are processed in the order they were sent"},
		{Name: "delivery", Workloads: []string{"deliver"}, New: none(Delivery{}),
			Doc: "at-least-once senders: every acknowledged message arrives after the final flush; with de-duplication exactly once"},
		{Name: "single-instance", Workloads: []string{Every}, New: none(SingleInstance{}),
			Doc: "no two incarnations of an entity, or instances of the singleton, provably alive at once, from the replies"},
		{Name: "hand-off", Workloads: []string{"register", "append", "deliver"}, Reads: []string{"events", "samples"}, New: none(HandOff{}),
			Doc: "no shard in two regions and no entity in two places at once, from node events and status samples; buffer drops reported"},
		// An implementation with neither a singleton nor a shard
		// coordinator (virtual actors placed per identity) has no
		// instance to keep unique.
		{Name: "singleton-events", Workloads: []string{Every}, Capabilities: []string{"singleton", "coordinator"}, Reads: []string{"events", "samples"},
			New: none(SingletonEvents{}),
			Doc: "at most one instance of each singleton and of each entity type's coordinator alive at a time, from node events and status samples"},
		{Name: "liveness", Workloads: []string{Every}, New: none(Liveness{}),
			Doc: "with no disruptive fault to excuse it, every operation gets an answer"},
		{Name: "availability", Workloads: []string{Every}, New: none(Availability{}),
			Doc: "throughput and latency over time with faults shaded, unavailability and recovery per fault (availability.svg); valid whenever there are client ops"},
		{Name: "recovered", WithFaults: true, New: none(Recovered{}),
			Doc: "in runs with faults: the cluster converged after the last heal"},
		{Name: "shards-moved", Params: []string{ParamMin}, Reads: []string{"events"},
			New: func(s Spec) Checker { return ShardsMoved{Min: s.Min} },
			Doc: "each node a member:join added started at least min shards (default 2) while it was a member"},
		{Name: "served-during-fault", Params: []string{ParamFault, ParamSettle}, Required: []string{ParamFault},
			New: func(s Spec) Checker { return ServedDuringFault{Fault: s.Fault, Settle: s.Settle} },
			Doc: "from settle after each inject of a fault whose name starts with fault until its heal, every entity clients tried was served at least once"},
		{Name: "answered-after-heal", Params: []string{ParamFault}, Required: []string{ParamFault},
			New: func(s Spec) Checker { return AnsweredAfterHeal{Fault: s.Fault} },
			Doc: "every operation invoked while a fault whose name starts with fault held got a reply from the node (a result, a refusal or unknown-outcome), never silence"},
		{Name: "passivated", Params: []string{ParamMin}, New: func(s Spec) Checker { return Passivated{Min: s.Min} },
			Doc: "the passivation premise: at least min entities (default 1) were served by two or more incarnations in turn"},
	}
}

// Lookup returns the registry's entry called name.
func Lookup(name string) (Entry, bool) {
	for _, e := range Registry() {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// Names lists the registry's checkers.
func Names() []string {
	var out []string
	for _, e := range Registry() {
		out = append(out, e.Name)
	}
	return out
}

// Build returns the checker s asks for, refusing an unknown name, a
// parameter the checker does not take and one it needs and lacks.
func Build(s Spec) (Checker, error) {
	e, ok := Lookup(s.Name)
	if !ok {
		return nil, fmt.Errorf("unknown checker %q (shardtest list checkers: %s)", s.Name, strings.Join(Names(), ", "))
	}
	given := map[string]bool{ParamFault: s.Fault != "", ParamSettle: s.Settle != 0, ParamMin: s.Min != 0}
	for _, p := range []string{ParamFault, ParamSettle, ParamMin} {
		switch {
		case given[p] && !slices.Contains(e.Params, p):
			return nil, fmt.Errorf("checker %s takes no %s", s.Name, p)
		case !given[p] && slices.Contains(e.Required, p):
			return nil, fmt.Errorf("checker %s needs a %s", s.Name, p)
		}
	}
	return e.New(s), nil
}

// Judges reports whether e judges every run of workload (not only the
// scenarios' that add it).
func (e Entry) Judges(workload string) bool {
	return slices.Contains(e.Workloads, Every) || slices.Contains(e.Workloads, workload)
}

// Applies reports whether e has something to judge in an implementation
// that declares caps (nil: not known, as in a run of an older harness: it
// applies).
func (e Entry) Applies(caps []string) bool {
	if e.Capabilities == nil || caps == nil {
		return true
	}
	return slices.ContainsFunc(e.Capabilities, func(c string) bool { return slices.Contains(caps, c) })
}

// Plan is the checkers of a run.
type Plan struct {
	Checkers []Checker
	// Refused are results (unknown) for the Specs that could not be built:
	// a stored run asks for what this harness cannot build.
	Refused []Result
	// LeftOut names the workload's checkers with nothing to judge in this
	// implementation (its capabilities).
	LeftOut []string
}

// For returns the checkers of a run of workload on an implementation
// that declares caps, with faults or not, and the scenario's Specs: in
// the registry's order, the Specs after.
func For(workload string, caps []string, faults bool, specs []Spec) Plan {
	var p Plan
	for _, e := range Registry() {
		if !e.Judges(workload) && !(faults && e.WithFaults) {
			continue
		}
		if !e.Applies(caps) {
			p.LeftOut = append(p.LeftOut, e.Name)
			continue
		}
		p.Checkers = append(p.Checkers, e.New(Spec{Name: e.Name}))
	}
	for _, s := range specs {
		c, err := Build(s)
		if err != nil {
			p.Refused = append(p.Refused, Result{Checker: s.Name, Verdict: Unknown, Summary: err.Error()})
			continue
		}
		p.Checkers = append(p.Checkers, c)
	}
	return p
}

// ForWorkload returns the checkers that judge every run of a workload (on
// an implementation that declares everything), without faults.
func ForWorkload(name string) []Checker { return For(name, nil, false, nil).Checkers }

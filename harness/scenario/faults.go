package scenario

import (
	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/nemesis"
)

// This file holds the scenarios that take every other fault of the
// catalogue (shardtest list nemeses) to the reference node, as Akka's
// split-brain-resolver and multi-node specs do: each partition shape,
// packet loss, pauses, crashes of one node up to all of them and of the
// journal, graceful leaves and rolling restarts, and clock skew against the
// timers it can fool. TestEveryFaultHasAScenario keeps it complete.

// shapeSpec is one partition shape as its scenarios run it.
type shapeSpec struct {
	shape string
	// cut describes the shape on 5 nodes, with where the oldest is.
	cut string
	// target is the step's Target ("oldest" puts the oldest on the cut
	// side of asymmetric and bridge).
	target string
	// survivors: some side keeps going, and serves every entity once the
	// resolver has acted (served-during-fault). Not for the shapes where
	// every member may end up downed (the ring: every member sees an
	// indirectly connected pair; the bridge, whose halves may down each
	// other).
	survivors bool
	// smoke: the idgen run is in CI's smoke subset (the one-way partition
	// of the oldest found a bug).
	smoke bool
	// bugs: the deliberate bugs this shape's idgen run catches, if any.
	bugs []Bug
}

// shapes are the partition shapes with a scenario each per workload.
func shapes() []shapeSpec {
	return []shapeSpec{
		{shape: "asymmetric", target: "oldest", survivors: true, smoke: true,
			cut: "packets from 2 nodes (the oldest among them) to the other 3 are lost, the other direction passes: the 2 hear everyone, nobody hears them, and no TCP stream works either way",
			bugs: []Bug{{Name: "blind-to-one-way", Args: []string{"--bugs=blind-to-one-way"}, Checker: "singleton-events",
				Why: "heartbeats' observations and down notices are ignored, so the oldest, whose packets are lost one-way, never learns that the others see it unreachable or downed it, and keeps its singletons after they started them again"}}},
		{shape: "bridge", target: "oldest",
			cut: "two halves of 2 (the oldest in one) that cannot see each other, and one node that sees both"},
		{shape: "majorities-ring",
			cut: "every node sees itself and its 2 ring neighbours, a majority, but no two nodes see the same majority"},
		{shape: "isolate-one", survivors: true, cut: "one random node cut off from the other 4"},
		{shape: "isolate-oldest", survivors: true,
			cut: "the oldest (the singletons' and coordinators' home) cut off from the other 4",
			bugs: []Bug{
				{Name: "auto-down", Args: autoDown, Checker: "singleton-events",
					Why: "both sides of the partition down each other after 2 s and keep or start the singleton: two id-generators at once"},
				{Name: "singleton-no-fencing", Args: []string{"--bugs=auto-down,singleton-no-fencing", "--downing=auto-down", "--auto-down-after=2s"}, Checker: "unique-ids",
					Why: "two id-generators (auto-down) without the journal's fencing hand out the same ids"},
			}},
		{shape: "isolate-coordinator", survivors: true, cut: "the node running a shard coordinator cut off from the other 4"},
		{shape: "isolate-singleton", survivors: true, cut: "the node running the id-generator singleton cut off from the other 4"},
		{shape: "random-halves", survivors: true, cut: "a random 2|3 split"},
	}
}

// partitionScenario is a 5-node cluster partitioned by shape from 5 s to
// 27 s, under the singleton (idgen) or entities (register): the two
// guarantees fail differently (a second singleton hands out ids; a shard
// started before its old home stopped serves stale state).
func partitionScenario(sp shapeSpec, workload string) Scenario {
	step := at(5*sec, "partition:"+sp.shape)
	if sp.target != "" {
		step = targeted(step, sp.target)
	}
	s := Scenario{
		Name: sp.shape + "-" + workload,
		Danger: sp.cut + "; the sides notice at different moments, and the side that is downed must have stopped its " +
			"singletons, coordinators and shards before the other starts them",
		Nodes: 5, Workload: workload, Limit: 35 * sec,
		Schedule: []nemesis.Step{step, heal(27*sec, "partition:"+sp.shape)},
	}
	switch workload {
	case "idgen":
		s.Entities = 1
		s.Holds = "never two id-generators or coordinators at once (singleton-events, single-instance); ids unique and increasing in real time (unique-ids)"
		s.Smoke = sp.smoke
		s.Bugs = sp.bugs
	default:
		s.Entities = 50
		s.Holds = "no shard in two regions (hand-off), no two incarnations of an entity (single-instance) or coordinators (singleton-events); reads never go back (linearizable)"
	}
	if sp.survivors {
		s.Holds += "; the surviving side serves every entity once the resolver has acted (served-during-fault)"
		s.Expect = []checker.Spec{{Name: "served-during-fault", Fault: "partition:" + sp.shape, Settle: splitSettle}}
	}
	return s
}

// faultScenarios are the scenarios of the remaining faults.
func faultScenarios() []Scenario {
	var out []Scenario
	for _, sp := range shapes() {
		out = append(out, partitionScenario(sp, "idgen"), partitionScenario(sp, "register"))
	}
	never2 := "never two instances of a shard, entity or singleton at once (hand-off, single-instance, singleton-events)"
	out = append(out,
		Scenario{
			Name:   "packet-loss",
			Danger: "every node drops 5-30 % of its packets to and from the others: heartbeats go missing, members flap between reachable and unreachable, requests between nodes time out and are retried",
			Holds:  never2 + "; reads never go back (linearizable). Docker only (kernel packet filters)",
			Nodes:  3, Workload: "register", Entities: 50, Limit: 30 * sec,
			Schedule: []nemesis.Step{at(5*sec, "loss:random"), heal(22*sec, "loss:random")},
			Docker:   true,
		},
		Scenario{
			Name:   "pause-coordinator",
			Danger: "the node running the shard coordinators freezes past failure detection and stable-after, is downed, then thaws still holding the coordinators and its shards, with requests that waited in its sockets",
			Holds:  never2 + "; reads never go back (linearizable)",
			Nodes:  3, Workload: "register", Entities: 50, Limit: 35 * sec,
			Schedule: []nemesis.Step{at(5*sec, "pause:coordinator"), heal(22*sec, "pause:coordinator")},
		},
		Scenario{
			Name:   "pause-minority",
			Danger: "2 of 5 nodes freeze together past downing and thaw together: a frozen minority that, on thawing, sees itself as the whole cluster until it hears it was downed",
			Holds:  never2 + "; reads never go back (linearizable)",
			Nodes:  5, Workload: "register", Entities: 50, Limit: 35 * sec,
			Schedule: []nemesis.Step{at(5*sec, "pause:minority"), heal(22*sec, "pause:minority")},
		},
		Scenario{
			Name: "pause-at-decision",
			Danger: "the oldest freezes for 7 s — failure detection (2 s) plus stable-after (5 s) — so it thaws just as the others decide to down it; " +
				"then a random node freezes for 6.5 s, thawing just before their decision",
			Holds: "the thawed node stops acting as singleton or coordinator before the others start them: never two at once " +
				"(singleton-events, single-instance); ids unique and increasing in real time (unique-ids)",
			Nodes: 3, Workload: "idgen", Entities: 1, Limit: 35 * sec, OpTimeout: 15 * sec,
			Schedule: []nemesis.Step{
				at(5*sec, "pause:oldest"), heal(12*sec, "pause:oldest"),
				at(20*sec, "pause:one"), heal(20*sec+6500e6, "pause:one"),
			},
		},
		Scenario{
			Name:   "crash-one-then-minority",
			Danger: "one random node crashes and restarts, then a random minority (2 of 5) crashes at once and restarts: their shards and singletons must restart elsewhere only after they are downed",
			Holds:  never2 + "; the crashed nodes' entities restart from the journal (linearizable)",
			Nodes:  5, Workload: "register", Entities: 50, Limit: 40 * sec,
			Schedule: []nemesis.Step{
				at(5*sec, "kill:one"), heal(15*sec, "kill:one"),
				at(22*sec, "kill:minority"), heal(32*sec, "kill:minority"),
			},
		},
		Scenario{
			Name: "crash-majority",
			Danger: "3 of 5 nodes crash at once: the 2 survivors are a minority and must down themselves (keep-majority) " +
				"rather than go on; the cluster re-forms when the crashed nodes restart",
			Holds: never2 + "; nothing acknowledged is lost across the re-formed cluster (linearizable)",
			Nodes: 5, Workload: "register", Entities: 50, Limit: 35 * sec,
			Schedule: []nemesis.Step{at(5*sec, "kill:majority"), heal(18*sec, "kill:majority")},
		},
		Scenario{
			Name:   "crash-all",
			Danger: "every node crashes at once and restarts: the cluster re-forms from nothing but the journal (up-numbers, coordinator state, entity events)",
			Holds:  "state is recovered: reads never go back (linearizable); " + never2,
			Nodes:  3, Workload: "register", Entities: 50, Limit: 30 * sec,
			Schedule: []nemesis.Step{at(8*sec, "kill:all"), heal(14*sec, "kill:all")},
		},
		Scenario{
			Name:   "oldest-crash",
			Danger: "the oldest node, home of the id-generator and the coordinators, crashes: the next oldest takes over only after it is downed and the removal margin has passed",
			Holds:  "never two id-generators at once (singleton-events, single-instance); ids unique and increasing in real time (unique-ids)",
			Nodes:  3, Workload: "idgen", Entities: 1, Limit: 30 * sec,
			Schedule: []nemesis.Step{at(5*sec, "kill:oldest"), heal(20*sec, "kill:oldest")},
		},
		Scenario{
			Name:   "journal-crash",
			Danger: "the journal crashes and restarts with its disk: no allocation, entity start or write can be persisted meanwhile, and connections to it break",
			Holds:  "nothing acknowledged is lost (linearizable); requests that reached the journal before the crash may be unknown, never wrong; " + never2,
			Nodes:  3, Workload: "register", Entities: 50, Limit: 30 * sec, OpTimeout: 15 * sec,
			Schedule: []nemesis.Step{at(8*sec, "kill:journal"), heal(13*sec, "kill:journal")},
		},
		Scenario{
			Name:   "leave-one",
			Danger: "a random node leaves gracefully under load (its shards are handed off; if it is the oldest, the singletons hand over) and comes back as a new incarnation",
			Holds:  "messages buffered during the hand-offs arrive in each sender's order (sender-order), none lost (append-log); " + never2,
			Nodes:  3, Workload: "append", Entities: 20, Limit: 30 * sec,
			Schedule: []nemesis.Step{at(8*sec, "member:leave-one"), heal(20*sec, "member:leave-one")},
		},
		Scenario{
			Name:   "rolling-restart",
			Danger: "every node in turn leaves gracefully and starts again as a new incarnation, as in a deployment: every shard and singleton moves at least once, the last ones several times",
			Holds:  never2 + "; reads never go back (linearizable)",
			Nodes:  3, Workload: "register", Entities: 50, Limit: 40 * sec,
			Schedule: []nemesis.Step{at(5*sec, "member:rolling-restart")},
		},
		Scenario{
			Name: "clock-strobe-split",
			Danger: "every clock flips between real time and an offset of up to a minute while the oldest is cut off from the other 4: " +
				"the timers a split depends on — failure detection, stable-after, the removal margin — must not end early when a clock jumps",
			Holds: never2 + "; reads never go back (linearizable)",
			Nodes: 5, Workload: "register", Entities: 50, Limit: 35 * sec,
			Schedule: []nemesis.Step{
				at(5*sec, "partition:isolate-oldest"), targeted(at(6*sec, "clock:strobe"), "all"),
				heal(26*sec, "clock:strobe"), heal(27*sec, "partition:isolate-oldest"),
			},
		},
		Scenario{
			Name: "clock-bump-singleton",
			Danger: "the node running the id-generator is cut off, and 4 s later — while both sides wait out stable-after — every clock " +
				"jumps by up to five minutes: a wait measured on the wall clock would end at once, and the new singleton start before the old one stopped",
			Holds: "never two id-generators at once (singleton-events, single-instance); ids unique and increasing in real time (unique-ids)",
			Nodes: 5, Workload: "idgen", Entities: 1, Limit: 35 * sec,
			Schedule: []nemesis.Step{
				at(5*sec, "partition:isolate-singleton"), targeted(at(9*sec, "clock:bump"), "all"),
				heal(26*sec, "clock:bump"), heal(27*sec, "partition:isolate-singleton"),
			},
		},
		Scenario{
			Name:   "clock-drift-passivation",
			Danger: "entities passivate after 30 ms idle while every clock runs 1-5 % fast or slow: the idle timer and the hand-off of messages held while an entity stops run on skewed time",
			Holds:  "held messages reach the next incarnation: every ask is answered (liveness); never two incarnations at once (single-instance); state survives every restart (linearizable)",
			Nodes:  3, Workload: "register", Entities: 30, Rate: 300, Limit: 20 * sec,
			Settings: map[string]string{"passivate-idle-after": "30ms"},
			Schedule: []nemesis.Step{targeted(at(3*sec, "clock:drift"), "all"), heal(17*sec, "clock:drift")},
			Expect:   []checker.Spec{{Name: "passivated", Min: 5}},
		},
	)
	return out
}

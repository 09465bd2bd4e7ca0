package nemesis

import (
	"encoding/json"
	"strings"
)

// Sides of a fault: where a node stood while it held. Behaviour coverage
// (package coverage) labels what a node logged and what its clients saw by
// the side it was on, so "singleton-started on the majority side of a
// partition" and "on the minority side" count as different situations.
const (
	// SideTarget: the node a process, clock or member fault acted on.
	SideTarget = "target"
	// SideOther: a node the fault did not act on (also every node of a
	// journal crash).
	SideOther = "other"
	// Partition sides: the node's component is smaller than the rest,
	// larger, or exactly half of the cluster.
	SideMinority = "minority"
	SideMajority = "majority"
	SideHalf     = "half"
	// SideBridge: the node that sees both halves (partition:bridge).
	SideBridge = "bridge"
	// SideRing: every node of partition:majorities-ring sees a majority
	// of its own.
	SideRing = "ring"
	// SideSendsLost, SideReceivesLost: the two halves of
	// partition:asymmetric.
	SideSendsLost    = "sends-lost"
	SideReceivesLost = "receives-lost"
	// SideJournalCut: a node cut off from the journal.
	SideJournalCut = "journal-cut"
	// SideLossy: every node of loss:random drops packets.
	SideLossy = "lossy"
	// SideUnknown: the recorded targets could not be read.
	SideUnknown = "unknown"
)

// Sides reads the targets a fault's inject recorded in the history (its
// nemesis entry's "targets") and returns the side each node stood on while
// the fault held: a node it does not name is SideOther. It is the one place
// that decides sides, from each fault's own shape of targets (Cut,
// Targets, ClockTargets).
func Sides(fault string, targets json.RawMessage) func(node string) string {
	family, variant, _ := strings.Cut(fault, ":")
	unknown := func(string) string { return SideUnknown }
	if family == "kill" && variant == journalName {
		return func(string) string { return SideOther }
	}
	if family == "partition" || family == "loss" {
		var c Cut
		if json.Unmarshal(targets, &c) != nil || c.Drops == nil {
			return unknown
		}
		return cutSides(family, variant, c)
	}
	var t struct {
		Targets []string `json:"targets"`
	}
	if json.Unmarshal(targets, &t) != nil || t.Targets == nil {
		return unknown
	}
	named := map[string]bool{}
	for _, n := range t.Targets {
		named[n] = true
	}
	return func(node string) string {
		if named[node] {
			return SideTarget
		}
		return SideOther
	}
}

// cutSides are the sides of a partition or of packet loss.
func cutSides(family, shape string, c Cut) func(string) string {
	switch {
	case family == "loss":
		return func(node string) string {
			if r, ok := c.Drops[node]; ok && r.LossPercent > 0 {
				return SideLossy
			}
			return SideOther
		}
	case shape == "journal-cut":
		return func(node string) string {
			if _, ok := c.Drops[node]; ok {
				return SideJournalCut
			}
			return SideOther
		}
	case shape == "asymmetric":
		return func(node string) string {
			r := c.Drops[node]
			switch {
			case len(r.DropOut) > 0:
				return SideSendsLost
			case len(r.DropIn) > 0:
				return SideReceivesLost
			}
			return SideOther
		}
	case shape == "majorities-ring":
		return func(string) string { return SideRing }
	}
	total := 0
	of := map[string]int{}
	for i, comp := range c.Components {
		total += len(comp)
		for _, n := range comp {
			of[n] = i
		}
	}
	return func(node string) string {
		i, ok := of[node]
		if !ok {
			return SideOther
		}
		size := len(c.Components[i])
		switch {
		case shape == "bridge" && len(c.Components) == 3 && i == 1:
			return SideBridge
		case 2*size < total:
			return SideMinority
		case 2*size > total:
			return SideMajority
		}
		return SideHalf
	}
}

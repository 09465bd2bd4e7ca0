package protocol

// Revisions of shardtest/1. The protocol keeps its name while it grows;
// each revision is a dated step of the text (docs/protocol.md, Changes
// within shardtest/1), and every conform rule names the revision that
// introduced what it demands. An implementation may name the revision it
// was written for (Capabilities.Revision), so that conform can tell it
// which failed rules are new since then.

// Revision is the current revision of shardtest/1.
const Revision = 4

// RevisionNote is one revision: its number, the day it was published and
// what it changed, in a line each.
type RevisionNote struct {
	Revision int
	Date     string
	Changes  []string
}

// Revisions lists every revision of shardtest/1, oldest first; the last
// is Revision.
func Revisions() []RevisionNote {
	return []RevisionNote{
		{1, "2026-11-29", []string{
			"the first text: membership, singleton, sharding (ask and tell), events, clock, filter, leave; down (an operator downs a member) on 2026-11-30",
		}},
		{2, "2026-12-01", []string{
			"age, tell and coordinator are capabilities of their own (they were implied by membership and sharding); without age no member carries an up_number and no oldest is named",
			"implementation detail in the status moved under detail; singletons may name their running instance",
			"null and non-object request bodies are refused (400), as unknown fields were; a bad GET /v1/events query (an unknown parameter included) is 400",
		}},
		{3, "2026-12-05", []string{
			"entity payloads are read strictly: a cas without expect, a null field and a payload given to an op that takes none are 400 bad-request",
			"a lone surrogate escape (\\ud800) in a request is refused (400)",
			"the kit's default request limit is 4 s, below the harness's op timeout (it was 10 s)",
		}},
		{4, "2026-12-06", []string{
			"the journal capability: an implementation that keeps state in the harness's journal declares it; journal faults are drawn only for those that do",
			"capabilities may name the revision an implementation was written for (revision); conform labels the rules new since then",
		}},
	}
}

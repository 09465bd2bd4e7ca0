package protocol

import "time"

// DefaultOpTimeout is how long the harness waits for the reply to one
// operation of a run (an entity request, a next-id) unless the run sets
// its own (shardtest run --op-timeout; a scenario's; test.json records it
// as op_timeout_ns). Then it stops waiting and records the operation's
// outcome as unknown: a reply after it is never read. So a node answers
// before it, with the result, or with unknown-outcome when it cannot tell
// what became of the request (docs/protocol.md, Timeouts).
const DefaultOpTimeout = 5 * time.Second

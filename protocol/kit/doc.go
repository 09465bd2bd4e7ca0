// Package kit serves shardtest/1 (docs/protocol.md) for a Go
// implementation of cluster sharding or cluster singletons, so that
// `shardtest run --image` and `shardtest conform` can drive it. The
// implementation fills in a Node — a struct of functions, one per part of
// the protocol it has — and serves Node.Handler; the kit does the rest:
//
//   - capabilities: declared from what is set (a nil function is a
//     capability not declared, and its endpoint answers 404), so a node
//     never declares what it does not serve;
//   - strict requests: unknown fields, null, arrays and other non-object
//     bodies, trailing data and oversized bodies are 400 bad-request;
//   - entity requests: ValidateEntityRequest runs on every POST
//     /v1/entity before the readiness check and before Entity or Tell. It
//     checks what the protocol says of every entity request — a declared
//     type, an id of 1 to 256 bytes of UTF-8, an op, a sender of at most
//     256 bytes, the mode — and, for the protocol's own types (register,
//     log, sender), the op and its payload, strictly (ParseRegister,
//     ParseLog, ParseSender: missing is not null; a cas without expect is
//     refused). Every refusal is bad-request, outcome fail; it reads no
//     state and has no effect. So Entity and Tell get valid requests and
//     read the payload with the same Parse function, never by hand; an
//     entity reached another way (a message from a peer) reads it with
//     that function too. A type of the implementation's own is checked up
//     to its op; its payload is the implementation's;
//   - every reply names its server: the X-Shardtest-Node and
//     X-Shardtest-Incarnation headers and the served_by body field;
//   - errors: a handler returns an error, and the kit answers the
//     protocol's error body. Errorf(protocol.CodeX, ...) takes the HTTP
//     status and the outcome from the protocol's table; any other error
//     (a timeout, a lost reply) is 504 unknown-outcome, because only a
//     request certainly without effect may be answered "fail";
//   - readiness: entity and singleton requests to a member that is not up
//     are refused (not-ready, downed, left) before the handler runs;
//   - deadlines: NextID, Entity and Tell get a context that ends after
//     RequestTimeout (DefaultRequestTimeout, 4 s: below the harness's op
//     timeout, protocol.DefaultOpTimeout, 5 s), so that a request is
//     answered — unknown-outcome if need be — while the harness still
//     waits for it;
//   - the status: assembled from View (self and members, oldest first
//     with Age), SingletonStatus and ShardingStatus;
//   - events: an EventLog with consecutive sequence numbers, bounded, with
//     the long poll of GET /v1/events.
//
// Configuration comes from the SHARDTEST_* environment (ConfigFromEnv).
// The journal the harness runs beside the cluster is reached with package
// protocol/journal, whose doc is the journal's whole API.
//
// The kit is in the module github.com/shardtest/shardtest/protocol, which
// needs nothing outside the standard library (golang.org/x/net at most):
//
//	go get github.com/shardtest/shardtest/protocol@latest
//
// protocol/kit/minimal is a whole node in 60 lines (one member, its
// registers in memory), the one docs/protocol.md shows; peers/protoactor
// is a complete one: a protoactor-go cluster member served through the
// kit.
package kit

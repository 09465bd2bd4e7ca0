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
//   - every reply names its server: the X-Shardtest-Node and
//     X-Shardtest-Incarnation headers and the served_by body field;
//   - errors: a handler returns an error, and the kit answers the
//     protocol's error body. Errorf(protocol.CodeX, ...) takes the HTTP
//     status and the outcome from the protocol's table; any other error
//     (a timeout, a lost reply) is 504 unknown-outcome, because only a
//     request certainly without effect may be answered "fail";
//   - readiness: entity and singleton requests to a member that is not up
//     are refused (not-ready, downed, left) before the handler runs;
//     every request has a deadline (RequestTimeout), after which it is
//     answered unknown-outcome, never left hanging;
//   - the status: assembled from View (self and members, oldest first
//     with Age), SingletonStatus and ShardingStatus;
//   - events: an EventLog with consecutive sequence numbers, bounded, with
//     the long poll of GET /v1/events.
//
// Configuration comes from the SHARDTEST_* environment (ConfigFromEnv).
// The journal the harness runs beside the cluster is reached with package
// protocol/journal, whose doc is the journal's whole API.
//
// A minimal node with an ask-only register entity type, in outline (the
// cluster, placement and the entities are the implementation's own):
//
//	cfg, err := kit.ConfigFromEnv()
//	if err != nil { log.Fatal(err) }
//	inc := newIncarnation()               // e.g. a random hex string
//	events := kit.NewEventLog(nil, 0)
//	events.SetIncarnation(inc)
//	node := &kit.Node{
//		Implementation: "my-sharding",
//		Name:           cfg.Name,
//		Incarnation:    func() string { return inc },
//		View: func() kit.View {
//			return kit.View{Self: self(), Members: members()} // protocol.Member values
//		},
//		EntityTypes: []string{protocol.TypeRegister},
//		Entity: func(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
//			// route to the entity; errors: kit.Errorf(protocol.CodeBadRequest, ...),
//			// kit.Errorf(protocol.CodeUnavailable, ...) when it was never sent, or
//			// any other error (unknown outcome)
//		},
//		ShardingStatus: func() []protocol.ShardingStatus { ... }, // what runs here
//		Events:         events,
//	}
//	log.Fatal(kit.Serve(ctx, cfg.HTTP, node.Handler()))
//
// peers/protoactor is a complete example: a protoactor-go cluster member
// served through the kit.
package kit

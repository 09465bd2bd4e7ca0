package entities

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/shardtest/shardtest/protocol"

	"github.com/shardtest/shardtest/impl/sharding"
)

// Log ops and their payloads. An entry names its client and the client's
// own sequence number, so checkers can see order, loss and duplicates.
//
//	append {"client": c, "seq": n, "dedup": bool} → {"length": len, "duplicate": bool}
//	read   {}                                     → {"entries": [{"client","seq"}...]}
//
// With dedup, an entry whose (client, seq) is already in the log is not
// appended again: receiver-side de-duplication, which makes at-least-once
// delivery effectively-once.

type appendLog struct {
	journaled
	entries []protocol.LogEntry
	seen    map[protocol.LogEntry]bool
}

// NewLog returns the factory of append-log entities.
func NewLog(opts Options) sharding.EntityFactory {
	return func(ctx context.Context, ec sharding.EntityContext) (sharding.Entity, error) {
		l := &appendLog{seen: map[protocol.LogEntry]bool{}}
		l.journaled = newJournaled(ec, protocol.TypeLog, l.apply)
		if err := l.recover(ctx, opts); err != nil {
			return nil, err
		}
		return l, nil
	}
}

func (l *appendLog) apply(data []byte) error {
	var e protocol.LogEntry
	if err := json.Unmarshal(data, &e); err != nil {
		return err
	}
	l.entries = append(l.entries, e)
	l.seen[e] = true
	return nil
}

func (l *appendLog) Handle(ctx context.Context, msg sharding.Message) (json.RawMessage, error) {
	if err := l.sync(ctx); err != nil {
		return nil, err
	}
	switch msg.Op {
	case protocol.OpAppend:
		var req protocol.LogAppend
		if err := decode(msg.Payload, &req); err != nil {
			return nil, err
		}
		e := req.LogEntry
		if e.Client == "" {
			return nil, fmt.Errorf("%w: append needs a client", ErrBadRequest)
		}
		if req.Dedup && l.seen[e] {
			return json.Marshal(protocol.LogAppendResult{Length: len(l.entries), Duplicate: true})
		}
		if err := l.persist(ctx, e); err != nil {
			return nil, err
		}
		l.entries = append(l.entries, e)
		l.seen[e] = true
		return json.Marshal(protocol.LogAppendResult{Length: len(l.entries)})
	case protocol.OpRead:
		entries := l.entries
		if entries == nil {
			entries = []protocol.LogEntry{}
		}
		return json.Marshal(protocol.LogReadResult{Entries: entries})
	}
	return nil, fmt.Errorf("%w: unknown log op %q (append, read)", ErrBadRequest, msg.Op)
}

func (l *appendLog) Stop(context.Context) error { return nil }

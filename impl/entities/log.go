package entities

import (
	"context"
	"encoding/json"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"

	"github.com/shardtest/shardtest/impl/sharding"
)

// Log ops and their payloads (kit.ParseLog reads them). An entry names its client and the client's
// own sequence number, so checkers can see order, loss and duplicates.
//
//	append {"client": c, "seq": n, "dedup": bool} → {"length": len, "duplicate": bool}
//	read   —                                      → {"entries": [{"client","seq"}...]}
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
		l.journaled = newJournaled(ec, protocol.TypeLog)
		if err := l.recover(ctx, opts, l.apply); err != nil {
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
	op, err := kit.ParseLog(msg.Op, msg.Payload)
	if err != nil {
		return nil, parsed(err)
	}
	if err := l.sync(ctx, l.apply); err != nil {
		return nil, err
	}
	if op.Op == protocol.OpRead {
		entries := l.entries
		if entries == nil {
			entries = []protocol.LogEntry{}
		}
		return json.Marshal(protocol.LogReadResult{Entries: entries})
	}
	e := op.Append.LogEntry
	if op.Append.Dedup && l.seen[e] {
		return json.Marshal(protocol.LogAppendResult{Length: len(l.entries), Duplicate: true})
	}
	if err := l.persist(ctx, e); err != nil {
		return nil, err
	}
	l.entries = append(l.entries, e)
	l.seen[e] = true
	return json.Marshal(protocol.LogAppendResult{Length: len(l.entries)})
}

func (l *appendLog) Stop(context.Context) error { return nil }

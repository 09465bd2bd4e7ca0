package entities

import (
	"context"
	"encoding/json"

	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// Register ops and their payloads (kit.ParseRegister reads them).
//
//	read  —                                → {"value": v | null}
//	write {"value": v}                     → {"value": v}
//	cas   {"expect": e | null, "value": v} → {"ok": bool, "value": current}

type registerEvent struct {
	Value int64 `json:"v"`
}

type register struct {
	journaled
	value *int64
}

// NewRegister returns the factory of register entities.
func NewRegister(opts Options) sharding.EntityFactory {
	return func(ctx context.Context, ec sharding.EntityContext) (sharding.Entity, error) {
		r := &register{}
		r.journaled = newJournaled(ec, protocol.TypeRegister)
		if err := r.recover(ctx, opts, r.apply); err != nil {
			return nil, err
		}
		return r, nil
	}
}

func (r *register) apply(data []byte) error {
	var e registerEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return err
	}
	v := e.Value
	r.value = &v
	return nil
}

func (r *register) Handle(ctx context.Context, msg sharding.Message) (json.RawMessage, error) {
	op, err := kit.ParseRegister(msg.Op, msg.Payload)
	if err != nil {
		return nil, parsed(err)
	}
	if err := r.sync(ctx, r.apply); err != nil {
		return nil, err
	}
	switch op.Op {
	case protocol.OpWrite:
		if err := r.persist(ctx, registerEvent{Value: op.Value}); err != nil {
			return nil, err
		}
		r.value = &op.Value
	case protocol.OpCAS:
		if !sameValue(r.value, op.Expect) {
			f := false
			return json.Marshal(protocol.RegisterResult{OK: &f, Value: r.value})
		}
		if err := r.persist(ctx, registerEvent{Value: op.Value}); err != nil {
			return nil, err
		}
		r.value = &op.Value
		t := true
		return json.Marshal(protocol.RegisterResult{OK: &t, Value: r.value})
	}
	return json.Marshal(protocol.RegisterResult{Value: r.value})
}

func sameValue(a, b *int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func (r *register) Stop(context.Context) error { return nil }

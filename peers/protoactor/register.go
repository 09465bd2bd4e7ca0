package main

import (
	"encoding/json"
	"fmt"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// The register entity type (docs/protocol.md, Entity types), without any
// I/O: a command (kit.RegisterOp, read strictly by kit.ParseRegister)
// decided against the state, and the event that records its effect.
//
//	read  —                                → {"value": v | null}
//	write {"value": v}                     → {"value": v}
//	cas   {"expect": e | null, "value": v} → {"ok": true, "value": v} or {"ok": false, "value": current}

// registerEvent is what the journal stores for a change: the value set,
// and the request that set it, so a retried request is answered with its
// first attempt's effect instead of being applied twice.
type registerEvent struct {
	Request string `json:"req"`
	Value   int64  `json:"value"`
}

// rememberedRequests bounds how many requests' effects a register keeps
// for answering retries.
const rememberedRequests = 4096

// registerState is a register as its events built it.
type registerState struct {
	value *int64
	// seq is the sequence number of the last event applied: the expected
	// sequence number of the next append.
	seq int64
	// applied maps the requests of recent events to the value each set;
	// order is their order, to forget the oldest.
	applied map[string]int64
	order   []string
}

// apply applies the event stored at seq.
func (s *registerState) apply(seq int64, e registerEvent) {
	v := e.Value
	s.value, s.seq = &v, seq
	if e.Request == "" {
		return
	}
	if s.applied == nil {
		s.applied = map[string]int64{}
	}
	if _, dup := s.applied[e.Request]; !dup {
		s.order = append(s.order, e.Request)
	}
	s.applied[e.Request] = e.Value
	if len(s.order) > rememberedRequests {
		delete(s.applied, s.order[0])
		s.order = s.order[1:]
	}
}

// applyData decodes and applies an event as the journal returned it.
func (s *registerState) applyData(seq int64, data []byte) error {
	var e registerEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("register event %d: %w", seq, err)
	}
	s.apply(seq, e)
	return nil
}

// answered returns the result of request req if an event of it was
// applied: a retry of a request that took effect is answered with that
// effect.
func (s *registerState) answered(req string, c kit.RegisterOp) (protocol.RegisterResult, bool) {
	v, ok := s.applied[req]
	if !ok || req == "" || c.Op == protocol.OpRead {
		return protocol.RegisterResult{}, false
	}
	res := protocol.RegisterResult{Value: &v}
	if c.Op == protocol.OpCAS {
		res.OK = ptr(true)
	}
	return res, true
}

// decide decides c against the state: its result once it has taken
// effect, and the event to append first (nil: none, c changes nothing).
func (s *registerState) decide(req string, c kit.RegisterOp) (protocol.RegisterResult, *registerEvent) {
	switch c.Op {
	case protocol.OpWrite:
		return protocol.RegisterResult{Value: ptr(c.Value)}, &registerEvent{Request: req, Value: c.Value}
	case protocol.OpCAS:
		if !sameValue(s.value, c.Expect) {
			return protocol.RegisterResult{OK: ptr(false), Value: s.value}, nil
		}
		return protocol.RegisterResult{OK: ptr(true), Value: ptr(c.Value)}, &registerEvent{Request: req, Value: c.Value}
	}
	return protocol.RegisterResult{Value: s.value}, nil
}

func sameValue(a, b *int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func ptr[T any](v T) *T { return &v }

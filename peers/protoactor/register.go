package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// The register entity type (docs/protocol.md, Entity types), without any
// I/O: a command parsed from the request, decided against the state, and
// the event that records its effect.
//
//	read  —                                → {"value": v | null}
//	write {"value": v}                     → {"value": v}
//	cas   {"expect": e | null, "value": v} → {"ok": true, "value": v} or {"ok": false, "value": current}

// command is one register operation, parsed and checked.
type command struct {
	op     string
	value  int64
	expect *int64 // cas only; nil: expects "never written"
}

// writePayload and casPayload are the payloads as sent; pointers tell a
// missing field from a zero one.
type writePayload struct {
	Value *int64 `json:"value"`
}

type casPayload struct {
	// Expect is raw so that a null (expects "never written") is told
	// from a missing field: a RawMessage keeps the null.
	Expect json.RawMessage `json:"expect"`
	Value  *int64          `json:"value"`
}

// parseCommand checks an op and its payload. Every error is a bad-request
// *kit.Error: the request had no effect.
func parseCommand(op string, payload json.RawMessage) (command, error) {
	switch op {
	case protocol.OpRead:
		if bytes.Equal(bytes.TrimSpace(payload), []byte("null")) {
			return command{op: op}, nil
		}
		if err := kit.DecodeJSON(payload, &struct{}{}); err != nil {
			return command{}, kit.Errorf(protocol.CodeBadRequest, "read takes no payload: %s", message(err))
		}
		return command{op: op}, nil
	case protocol.OpWrite:
		var p writePayload
		if err := kit.DecodeJSON(payload, &p); err != nil {
			return command{}, kit.Errorf(protocol.CodeBadRequest, "write payload: %s", message(err))
		}
		if p.Value == nil {
			return command{}, kit.Errorf(protocol.CodeBadRequest, `write needs {"value": integer}`)
		}
		return command{op: op, value: *p.Value}, nil
	case protocol.OpCAS:
		var p casPayload
		if err := kit.DecodeJSON(payload, &p); err != nil {
			return command{}, kit.Errorf(protocol.CodeBadRequest, "cas payload: %s", message(err))
		}
		if p.Value == nil || p.Expect == nil {
			return command{}, kit.Errorf(protocol.CodeBadRequest, `cas needs {"expect": integer or null, "value": integer}`)
		}
		var expect *int64
		if err := json.Unmarshal(p.Expect, &expect); err != nil {
			return command{}, kit.Errorf(protocol.CodeBadRequest, "cas expect: want an integer or null: %v", err)
		}
		return command{op: op, value: *p.Value, expect: expect}, nil
	}
	return command{}, kit.Errorf(protocol.CodeBadRequest, "unknown register op %q (read, write, cas)", op)
}

// message is err's text without the kit's code prefix.
func message(err error) string {
	if e, ok := err.(*kit.Error); ok {
		return e.Message
	}
	return err.Error()
}

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
func (s *registerState) answered(req string, c command) (protocol.RegisterResult, bool) {
	v, ok := s.applied[req]
	if !ok || req == "" || c.op == protocol.OpRead {
		return protocol.RegisterResult{}, false
	}
	res := protocol.RegisterResult{Value: &v}
	if c.op == protocol.OpCAS {
		res.OK = ptr(true)
	}
	return res, true
}

// decide decides c against the state: its result once it has taken
// effect, and the event to append first (nil: none, c changes nothing).
func (s *registerState) decide(req string, c command) (protocol.RegisterResult, *registerEvent) {
	switch c.op {
	case protocol.OpWrite:
		return protocol.RegisterResult{Value: ptr(c.value)}, &registerEvent{Request: req, Value: c.value}
	case protocol.OpCAS:
		if !sameValue(s.value, c.expect) {
			return protocol.RegisterResult{OK: ptr(false), Value: s.value}, nil
		}
		return protocol.RegisterResult{OK: ptr(true), Value: ptr(c.value)}, &registerEvent{Request: req, Value: c.value}
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

package kit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/shardtest/shardtest/protocol"
)

// The payloads of the protocol's entity types (docs/protocol.md, Entity
// types), read strictly, so that an implementation of register, log or
// sender writes only its state logic. Every error is a bad-request *Error
// (outcome fail: nothing happened). The rules, for every op:
//
//   - an op with no payload (register read, log read, sender pending and
//     flush) takes none: absent, null or {}; anything else is refused;
//   - an op with a payload needs one JSON object (as Decode reads it: no
//     unknown field, valid UTF-8, no lone surrogate escape), and in it
//     every field the table names, except dedup (optional, false when
//     absent). Missing is not null: cas's "expect": null expects a
//     register never written, and a cas without "expect" is refused;
//     every other field refuses null;
//   - integers are JSON integers that fit an int64 (not 1.5, 1e30 or "1");
//     client names and log ids are 1 to 256 bytes (protocol.MaxSenderBytes,
//     protocol.MaxEntityIDBytes).
//
// ValidateEntityRequest applies them to every request for these types
// before Entity or Tell runs; an entity that gets its messages another way
// (from a peer) reads them with the same functions.

// RegisterOp is a register operation, read by ParseRegister.
type RegisterOp struct {
	// Op is protocol.OpRead, OpWrite or OpCAS.
	Op string
	// Value is what write and cas set.
	Value int64
	// Expect is what cas expects the register to hold; nil: never
	// written ("expect": null).
	Expect *int64
}

// LogOp is a log operation, read by ParseLog.
type LogOp struct {
	// Op is protocol.OpAppend or OpRead.
	Op string
	// Append is append's payload.
	Append protocol.LogAppend
}

// SenderOp is an at-least-once sender's operation, read by ParseSender.
type SenderOp struct {
	// Op is protocol.OpSend, OpPending or OpFlush.
	Op string
	// Send is send's payload.
	Send protocol.SenderSend
}

// ParseRegister reads a register op and its payload strictly:
// read —, write {"value": v}, cas {"expect": e or null, "value": v}.
func ParseRegister(op string, payload json.RawMessage) (RegisterOp, error) {
	switch op {
	case protocol.OpRead:
		return RegisterOp{Op: op}, noPayload(protocol.TypeRegister, op, payload)
	case protocol.OpWrite:
		var p struct {
			Value json.RawMessage `json:"value"`
		}
		if err := decodePayload(protocol.TypeRegister, op, payload, &p); err != nil {
			return RegisterOp{}, err
		}
		v, err := intField(op, "value", p.Value)
		return RegisterOp{Op: op, Value: v}, err
	case protocol.OpCAS:
		var p struct {
			Expect json.RawMessage `json:"expect"`
			Value  json.RawMessage `json:"value"`
		}
		if err := decodePayload(protocol.TypeRegister, op, payload, &p); err != nil {
			return RegisterOp{}, err
		}
		expect, err := nullableIntField(op, "expect", p.Expect)
		if err != nil {
			return RegisterOp{}, err
		}
		v, err := intField(op, "value", p.Value)
		return RegisterOp{Op: op, Value: v, Expect: expect}, err
	}
	return RegisterOp{}, unknownOp(protocol.TypeRegister, op, protocol.OpRead, protocol.OpWrite, protocol.OpCAS)
}

// ParseLog reads a log op and its payload strictly: append
// {"client": c, "seq": n, "dedup": bool (optional)}, read —.
func ParseLog(op string, payload json.RawMessage) (LogOp, error) {
	switch op {
	case protocol.OpRead:
		return LogOp{Op: op}, noPayload(protocol.TypeLog, op, payload)
	case protocol.OpAppend:
		var p struct {
			Client json.RawMessage `json:"client"`
			Seq    json.RawMessage `json:"seq"`
			Dedup  json.RawMessage `json:"dedup"`
		}
		if err := decodePayload(protocol.TypeLog, op, payload, &p); err != nil {
			return LogOp{}, err
		}
		a, err := appendFields(op, p.Client, p.Seq, p.Dedup)
		return LogOp{Op: op, Append: a}, err
	}
	return LogOp{}, unknownOp(protocol.TypeLog, op, protocol.OpAppend, protocol.OpRead)
}

// ParseSender reads a sender op and its payload strictly: send
// {"to": log id, "client": c, "seq": n, "dedup": bool (optional)},
// pending —, flush —.
func ParseSender(op string, payload json.RawMessage) (SenderOp, error) {
	switch op {
	case protocol.OpPending, protocol.OpFlush:
		return SenderOp{Op: op}, noPayload(protocol.TypeSender, op, payload)
	case protocol.OpSend:
		var p struct {
			To     json.RawMessage `json:"to"`
			Client json.RawMessage `json:"client"`
			Seq    json.RawMessage `json:"seq"`
			Dedup  json.RawMessage `json:"dedup"`
		}
		if err := decodePayload(protocol.TypeSender, op, payload, &p); err != nil {
			return SenderOp{}, err
		}
		// Checked before the message is stored: a message to a log id
		// no request could name would be redelivered forever.
		to, err := nameField(op, "to", p.To, protocol.MaxEntityIDBytes)
		if err != nil {
			return SenderOp{}, err
		}
		a, err := appendFields(op, p.Client, p.Seq, p.Dedup)
		if err != nil {
			return SenderOp{}, err
		}
		return SenderOp{Op: op, Send: protocol.SenderSend{To: to, Client: a.Client, Seq: a.Seq, Dedup: a.Dedup}}, nil
	}
	return SenderOp{}, unknownOp(protocol.TypeSender, op, protocol.OpSend, protocol.OpPending, protocol.OpFlush)
}

// appendFields reads what a log append and a sender's send share: the
// entry's client and seq, and dedup.
func appendFields(op string, client, seq, dedup json.RawMessage) (protocol.LogAppend, error) {
	var a protocol.LogAppend
	var err error
	if a.Client, err = nameField(op, "client", client, protocol.MaxSenderBytes); err != nil {
		return protocol.LogAppend{}, err
	}
	if a.Seq, err = intField(op, "seq", seq); err != nil {
		return protocol.LogAppend{}, err
	}
	if a.Dedup, err = optionalBoolField(op, "dedup", dedup); err != nil {
		return protocol.LogAppend{}, err
	}
	return a, nil
}

// CheckPayload checks op and payload of one of the protocol's entity
// types (ParseRegister, ParseLog, ParseSender). A type the protocol does
// not define is the implementation's own, and is not checked (nil).
func CheckPayload(typ, op string, payload json.RawMessage) error {
	var err error
	switch typ {
	case protocol.TypeRegister:
		_, err = ParseRegister(op, payload)
	case protocol.TypeLog:
		_, err = ParseLog(op, payload)
	case protocol.TypeSender:
		_, err = ParseSender(op, payload)
	}
	return err
}

// isNull reports whether a payload or a field is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// noPayload accepts what an op without a payload may be sent: nothing,
// null or {}.
func noPayload(typ, op string, payload json.RawMessage) error {
	if isNull(payload) {
		return nil
	}
	if err := DecodeJSON(payload, &struct{}{}); err != nil {
		return Errorf(protocol.CodeBadRequest, "%s %s takes no payload (absent, null or {}): %s", typ, op, message(err))
	}
	return nil
}

// decodePayload reads an op's payload object into p (a struct of
// json.RawMessage fields, so that a missing field stays nil and a null one
// is "null").
func decodePayload(typ, op string, payload json.RawMessage, p any) error {
	if isNull(payload) {
		return Errorf(protocol.CodeBadRequest, "%s %s needs a payload object", typ, op)
	}
	if err := DecodeJSON(payload, p); err != nil {
		return Errorf(protocol.CodeBadRequest, "%s %s payload: %s", typ, op, message(err))
	}
	return nil
}

// message is err's text without the kit's code prefix.
func message(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

func unknownOp(typ, op string, ops ...string) error {
	return Errorf(protocol.CodeBadRequest, "unknown %s op %q (%s)", typ, op, strings.Join(ops, ", "))
}

// fieldError is a payload field's refusal.
func fieldError(op, name string, raw json.RawMessage, want string) error {
	switch {
	case raw == nil:
		return Errorf(protocol.CodeBadRequest, "%s: %q is missing: want %s", op, name, want)
	case isNull(raw):
		return Errorf(protocol.CodeBadRequest, "%s: %q is null: want %s", op, name, want)
	}
	return Errorf(protocol.CodeBadRequest, "%s: %q is %.40s: want %s", op, name, raw, want)
}

// intField reads a required integer field.
func intField(op, name string, raw json.RawMessage) (int64, error) {
	var v int64
	if isNull(raw) || json.Unmarshal(raw, &v) != nil {
		return 0, fieldError(op, name, raw, "an integer")
	}
	return v, nil
}

// nullableIntField reads a required field that is an integer or null.
func nullableIntField(op, name string, raw json.RawMessage) (*int64, error) {
	const want = "an integer, or null"
	if raw == nil {
		return nil, fieldError(op, name, raw, want)
	}
	var v *int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fieldError(op, name, raw, want)
	}
	return v, nil
}

// nameField reads a required string of 1 to most bytes of UTF-8.
func nameField(op, name string, raw json.RawMessage, most int) (string, error) {
	want := fmt.Sprintf("a string of 1 to %d bytes", most)
	var s string
	if isNull(raw) || json.Unmarshal(raw, &s) != nil || s == "" || len(s) > most || !utf8.ValidString(s) {
		return "", fieldError(op, name, raw, want)
	}
	return s, nil
}

// optionalBoolField reads a boolean field that may be missing (false), but
// not null.
func optionalBoolField(op, name string, raw json.RawMessage) (bool, error) {
	if raw == nil {
		return false, nil
	}
	var b bool
	if isNull(raw) || json.Unmarshal(raw, &b) != nil {
		return false, fieldError(op, name, raw, "true or false (or no field: false)")
	}
	return b, nil
}

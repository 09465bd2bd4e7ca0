package main

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

// What travels between the member that took a client's request and the
// grain, through protoactor remote: JSON in a protobuf well-known type
// (wrapperspb.BytesValue), which the remote's proto serializer knows
// without generated code.

// grainRequest is a register request for a grain.
type grainRequest struct {
	// Request identifies the client's request across the framework's
	// retries (cluster.Request sends it again after a timeout).
	Request string          `json:"req"`
	Op      string          `json:"op"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// grainReply is a grain's answer: the result, or an error code of
// shardtest/1 with a message; Node and Incarnation name the activation
// that answered.
type grainReply struct {
	Node        string          `json:"node"`
	Incarnation string          `json:"incarnation"`
	Result      json.RawMessage `json:"result,omitempty"`
	Code        string          `json:"code,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// encode wraps v as the message protoactor carries.
func encode(v any) (*wrapperspb.BytesValue, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return wrapperspb.Bytes(b), nil
}

// decode unwraps a message protoactor delivered into v.
func decode(msg any, v any) error {
	bv, ok := msg.(*wrapperspb.BytesValue)
	if !ok {
		return fmt.Errorf("unexpected message %T (want a BytesValue)", msg)
	}
	if err := json.Unmarshal(bv.GetValue(), v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}

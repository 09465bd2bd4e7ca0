package kit

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/shardtest/shardtest/protocol"
)

// Error is an error a handler returns to answer with a protocol error
// code. The kit takes the HTTP status and the outcome from the protocol's
// table (protocol.Code); a code of the implementation's own needs both.
type Error struct {
	Code    string
	Message string
	// Status and Outcome, for a code shardtest/1 does not define.
	Status  int
	Outcome protocol.Outcome
	// Err is the cause, if any (for errors.Is/As and logs).
	Err error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a protocol code (protocol.Code*) and a
// message; a %w verb's error becomes its Err.
func Errorf(code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Message: err.Error(), Err: errors.Unwrap(err)}
}

// Custom returns an *Error with a code of the implementation's own, its
// HTTP status and its outcome. Outcome fail promises that the request had
// no effect: never use it for anything that may have happened.
func Custom(status int, code string, outcome protocol.Outcome, message string) *Error {
	return &Error{Code: code, Message: message, Status: status, Outcome: outcome}
}

// reply is the HTTP status and body the kit answers err with. Only an
// *Error with a code whose outcome is fail (or a Custom fail) is a
// definite failure; a deadline, a cancellation or any other error is
// unknown-outcome: the request may have had an effect.
func reply(err error, sb protocol.ServedBy) (int, protocol.ErrorBody) {
	var e *Error
	if errors.As(err, &e) {
		return protocol.ErrorReply(protocol.ScopeNode, e.Status, protocol.ErrorBody{Error: e.Message, Code: e.Code, Outcome: e.Outcome, ServedBy: sb})
	}
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		msg = "no answer in time: " + msg
	}
	return http.StatusGatewayTimeout, protocol.ErrorBody{Error: msg, Code: protocol.CodeUnknownOutcome, Outcome: protocol.Unknown, ServedBy: sb}
}

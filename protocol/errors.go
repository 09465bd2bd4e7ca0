package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// Outcome is what a reply says about a request's effect. Checkers depend
// on the difference between Fail and Unknown: a timeout is never a failure.
type Outcome string

// Outcomes.
const (
	// OK: the request took effect (a 2xx reply).
	OK Outcome = "ok"
	// Fail: the request certainly had no effect.
	Fail Outcome = "fail"
	// Unknown: it may or may not have taken effect.
	Unknown Outcome = "unknown"
)

// ErrorBody is the body of every non-2xx reply.
type ErrorBody struct {
	// Error is a message for people.
	Error string `json:"error"`
	// Code is a stable machine-readable reason (Codes).
	Code string `json:"code"`
	// Outcome is "fail" or "unknown"; it is what the harness relies on.
	Outcome  Outcome  `json:"outcome"`
	ServedBy ServedBy `json:"served_by"`
}

// Error codes of shardtest/1 (docs/protocol.md, Error codes).
const (
	CodeBadRequest         = "bad-request"
	CodeNotFound           = "not-found"
	CodeMethodNotAllowed   = "method-not-allowed"
	CodeCannotLeave        = "cannot-leave"
	CodeUnknownMember      = "unknown-member"
	CodeNotReady           = "not-ready"
	CodeDowned             = "downed"
	CodeLeft               = "left"
	CodeDropped            = "dropped"
	CodeUnavailable        = "unavailable"
	CodeEntityStale        = "entity-stale"
	CodeJournalUnavailable = "journal-unavailable"
	CodeUnknownOutcome     = "unknown-outcome"
	CodeInternal           = "internal"
)

// CodeInfo is what an error code means on the wire.
type CodeInfo struct {
	Code string
	// Status is the HTTP status a node answers with.
	Status int
	// Outcome is the request's outcome: Fail only for codes that are
	// given before anything happened.
	Outcome Outcome
	// When says when the code is answered (for docs and conform).
	When string
}

// codeTable is the one table of the protocol's error codes: the HTTP
// status and the outcome of each, in the order of the docs' table. The kit
// answers with it and conform checks replies against it; an implementation
// may use codes of its own, with an outcome it must get right.
func codeTable() []CodeInfo {
	return []CodeInfo{
		{CodeBadRequest, http.StatusBadRequest, Fail, "malformed JSON, unknown field, null or non-object body, bad query parameter, value out of range, unknown entity type or op"},
		{CodeNotFound, http.StatusNotFound, Fail, "no such endpoint (also the endpoint of a capability not declared)"},
		{CodeMethodNotAllowed, http.StatusMethodNotAllowed, Fail, "wrong method for the endpoint"},
		{CodeCannotLeave, http.StatusConflict, Fail, "leave refused in the current state"},
		{CodeUnknownMember, http.StatusNotFound, Fail, "down names no member this node knows"},
		{CodeNotReady, http.StatusServiceUnavailable, Fail, "the member has not joined yet"},
		{CodeDowned, http.StatusServiceUnavailable, Fail, "this member was downed and does not serve"},
		{CodeLeft, http.StatusServiceUnavailable, Fail, "this member has left"},
		{CodeDropped, http.StatusServiceUnavailable, Fail, "the request was dropped from a full buffer (singleton proxy, shard region, tell queue)"},
		{CodeUnavailable, http.StatusServiceUnavailable, Fail, "no singleton (or shard home) was reachable in time; the request was never sent to one"},
		{CodeEntityStale, http.StatusServiceUnavailable, Fail, "a newer incarnation of the entity took over first"},
		{CodeJournalUnavailable, http.StatusServiceUnavailable, Fail, "the entity could not read its journal before acting"},
		{CodeUnknownOutcome, http.StatusGatewayTimeout, Unknown, "the request reached a singleton or entity (or may have) and no answer came in time"},
		{CodeInternal, http.StatusInternalServerError, Unknown, "a bug in the node"},
	}
}

// Code returns what a protocol error code means; ok is false for a code
// shardtest/1 does not define.
func Code(code string) (CodeInfo, bool) {
	for _, c := range codeTable() {
		if c.Code == code {
			return c, true
		}
	}
	return CodeInfo{}, false
}

// Codes lists the protocol's error codes in the order of the docs' table.
func Codes() []CodeInfo { return codeTable() }

// Error is a request that did not succeed, as a client saw it.
type Error struct {
	// Status is the HTTP status (0 if no reply arrived).
	Status   int
	Code     string
	Message  string
	Outcome  Outcome
	ServedBy ServedBy
	// Err is the transport error, if any.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s (outcome %s)", e.Err, e.Outcome)
	}
	return fmt.Sprintf("%d %s: %s (outcome %s)", e.Status, e.Code, e.Message, e.Outcome)
}

func (e *Error) Unwrap() error { return e.Err }

// Text is the error for a history entry: "code: message", or the
// transport error.
func (e *Error) Text() string {
	if e.Code != "" {
		return e.Code + ": " + e.Message
	}
	if e.Err != nil {
		return e.Err.Error()
	}
	return fmt.Sprintf("status %d: %s", e.Status, e.Message)
}

// OutcomeOf is the one place that decides an error's outcome: nil is OK;
// an *Error says; anything else (no answer) is Unknown.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) && e.Outcome == Fail {
		return Fail
	}
	return Unknown
}

// ErrorText is err for a history entry (see Error.Text).
func ErrorText(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Text()
	}
	return err.Error()
}

// TransportOutcome classifies a request that got no reply. A failed dial
// (connection refused: the node is down) means no byte of the request
// left: it certainly had no effect. Anything later (reset, timeout) may
// have reached the node.
func TransportOutcome(err error) Outcome {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return Fail
	}
	return Unknown
}

// ReplyError reads a non-2xx reply's body: the node's error body when it
// is one (its outcome is the node's word), otherwise an Unknown error
// carrying the raw body (a proxy's page, a crash: the request may have
// been acted on).
func ReplyError(status int, body []byte) *Error {
	e := &Error{Status: status, Outcome: Unknown}
	var eb ErrorBody
	if json.Unmarshal(body, &eb) == nil && (eb.Code != "" || eb.Outcome != "") {
		e.Code, e.Message, e.ServedBy = eb.Code, eb.Error, eb.ServedBy
		if eb.Outcome == Fail {
			e.Outcome = Fail
		}
		return e
	}
	e.Message = string(body)
	return e
}

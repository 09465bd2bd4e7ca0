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

// ErrorBody is the body of every non-2xx reply: of a node (shardtest/1),
// of the journal, and of the reference node's node-to-node transport
// (Scope).
type ErrorBody struct {
	// Error is a message for people.
	Error string `json:"error"`
	// Code is a stable machine-readable reason (Codes, AllCodes).
	Code string `json:"code"`
	// Outcome is "fail" or "unknown"; it is what the harness relies on.
	Outcome Outcome `json:"outcome"`
	// Reason refines Code where a receiver passes on a refusal it got from
	// further in (an entity's rejection code, under entity-rejected on the
	// reference node's transport). A node never sets it on shardtest/1.
	Reason string `json:"reason,omitempty"`
	// ServedBy names the node on shardtest/1, where it is always set (every
	// node has a name). The journal and the node-to-node transport leave it
	// zero, and so out of their bodies (omitzero).
	ServedBy ServedBy `json:"served_by,omitzero"`
}

// Scope is the wire an error code is answered on.
type Scope string

// Scopes.
const (
	// ScopeNode is the public node protocol, shardtest/1
	// (docs/protocol.md): what every implementation answers and the
	// harness and conform read. Codes lists it.
	ScopeNode Scope = "shardtest/1"
	// ScopeJournal is the journal's wire protocol (package
	// protocol/journal): what `shardtest journal` answers to any node that
	// keeps its state there.
	ScopeJournal Scope = "journal"
	// ScopePeer is the reference node's node-to-node transport (package
	// impl/peer: the /internal/ endpoints of its singletons and shard
	// regions, between its own members on their peer addresses). Other
	// implementations never see these codes: they are no part of
	// shardtest/1, and conform does not check them.
	ScopePeer Scope = "reference-peer"
)

// Error codes of shardtest/1 (docs/protocol.md, Error codes), some of
// which the journal and the node-to-node transport answer too (the table
// says with which status and outcome there).
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

// Error codes of the journal alone (ScopeJournal).
const (
	CodeSeqConflict = "seq-conflict"
	CodeFenced      = "fenced"
	CodeInvalid     = "invalid"
	CodeTooLarge    = "too-large"
)

// Error codes of the reference node's node-to-node transport alone
// (ScopePeer).
const (
	// CodePeerRefused and CodeWrongMember are the peer guard's refusals;
	// a sender may retry (the member it meant may be there under another
	// incarnation, or not know it yet).
	CodePeerRefused = "peer-refused"
	CodeWrongMember = "wrong-member"
	CodeBadJSON     = "bad-json"
	// CodeBadUpgrade: a request for a stream (impl/peer's StreamPath) that
	// cannot be one.
	CodeBadUpgrade = "bad-upgrade"
	// CodeTooManyStreams: the sending member holds as many streams as it
	// may; it sends over plain HTTP instead.
	CodeTooManyStreams = "too-many-streams"
	// CodeTimeout is a deadline that passed once the request was taken:
	// it may have had an effect.
	CodeTimeout = "timeout"

	// Shard regions (/internal/v1/sharding).
	CodeShardNotHere  = "shard-not-here"
	CodeHandingOff    = "handing-off"
	CodeProxyOnly     = "proxy-only"
	CodeRegionStopped = "region-stopped"
	CodeEntityError   = "entity-error"
	// CodeEntityRejected: the entity refused the message (definite); the
	// body's Reason carries the entity's rejection code.
	CodeEntityRejected    = "entity-rejected"
	CodeEntityUnavailable = "entity-unavailable"
	CodeNotDelivered      = "not-delivered"

	// Singleton managers (/internal/v1/singleton).
	CodeSingletonNotRunning = "singleton-not-running"
	CodeSingletonFailed     = "singleton-failed"
	// CodeSingletonOutcomeUnknown is the manager's word that the instance
	// may have acted (not CodeUnknownOutcome, the public code).
	CodeSingletonOutcomeUnknown = "outcome-unknown"
	CodeInstanceError           = "instance-error"
	CodeUnknownSingleton        = "unknown-singleton"
	CodeNoManager               = "manager-not-running"
	// CodeNotNextOldest: a hand-over-to-me from a member that is not the
	// one this member would hand the singleton to (the oldest Up member
	// with the role other than itself); views may disagree for a moment,
	// and the sender asks again.
	CodeNotNextOldest = "not-next-oldest"
	// CodeNotCoordinator: a coordinator's request (host-shard,
	// begin-hand-off, hand-off) from a member that does not run the
	// entity type's coordinator in this member's view.
	CodeNotCoordinator = "not-coordinator"
)

// CodeInfo is what an error code means on one wire.
type CodeInfo struct {
	Scope Scope
	Code  string
	// Status is the HTTP status it is answered with.
	Status int
	// Outcome is the request's outcome: Fail only for codes that are
	// given before anything happened.
	Outcome Outcome
	// When says when the code is answered (for docs and conform), and the
	// status or outcome of any case that differs from Status and Outcome.
	When string
}

// codeTable is the one table of error codes: for each wire (Scope), the
// HTTP status and the outcome of each code; shardtest/1's first, in the
// order of the docs' table. The kit answers with it and conform checks
// replies against it; the journal server, the reference node's transport
// and their clients answer and read theirs with it. An implementation may
// use codes of its own on shardtest/1, with an outcome it must get right.
func codeTable() []CodeInfo {
	return []CodeInfo{
		{ScopeNode, CodeBadRequest, http.StatusBadRequest, Fail, "malformed JSON, unknown field, null or non-object body, bad query parameter, value out of range, unknown entity type or op"},
		{ScopeNode, CodeNotFound, http.StatusNotFound, Fail, "no such endpoint (also the endpoint of a capability not declared)"},
		{ScopeNode, CodeMethodNotAllowed, http.StatusMethodNotAllowed, Fail, "wrong method for the endpoint"},
		{ScopeNode, CodeCannotLeave, http.StatusConflict, Fail, "leave refused in the current state"},
		{ScopeNode, CodeUnknownMember, http.StatusNotFound, Fail, "down names no member this node knows"},
		{ScopeNode, CodeNotReady, http.StatusServiceUnavailable, Fail, "the member has not joined yet"},
		{ScopeNode, CodeDowned, http.StatusServiceUnavailable, Fail, "this member was downed and does not serve"},
		{ScopeNode, CodeLeft, http.StatusServiceUnavailable, Fail, "this member has left"},
		{ScopeNode, CodeDropped, http.StatusServiceUnavailable, Fail, "the request was dropped from a full buffer (singleton proxy, shard region, tell queue)"},
		{ScopeNode, CodeUnavailable, http.StatusServiceUnavailable, Fail, "no singleton (or shard home) was reachable in time; the request was never sent to one"},
		{ScopeNode, CodeEntityStale, http.StatusServiceUnavailable, Fail, "a newer incarnation of the entity took over first"},
		{ScopeNode, CodeJournalUnavailable, http.StatusServiceUnavailable, Fail, "the entity could not read its journal before acting"},
		{ScopeNode, CodeUnknownOutcome, http.StatusGatewayTimeout, Unknown, "the request reached a singleton or entity (or may have) and no answer came in time"},
		{ScopeNode, CodeInternal, http.StatusInternalServerError, Unknown, "a bug in the node"},

		// The journal (package protocol/journal's doc): fail means
		// nothing was written.
		{ScopeJournal, CodeSeqConflict, http.StatusConflict, Fail, "expected_seq is not the id's highest stored sequence number"},
		{ScopeJournal, CodeFenced, http.StatusConflict, Fail, "a newer writer epoch has fenced the id"},
		{ScopeJournal, CodeInvalid, http.StatusBadRequest, Fail, "malformed request, bad pid, missing expected_seq, no events, too many"},
		{ScopeJournal, CodeTooLarge, http.StatusRequestEntityTooLarge, Fail, "the request body is larger than the journal takes"},
		{ScopeJournal, CodeNotFound, http.StatusNotFound, Fail, "no such endpoint"},
		{ScopeJournal, CodeMethodNotAllowed, http.StatusMethodNotAllowed, Fail, "wrong method for the endpoint"},
		{ScopeJournal, CodeUnavailable, http.StatusServiceUnavailable, Unknown, "the store timed out: an append may or may not have been written; outcome fail when the request was cancelled while it waited for a slot (nothing of it was read)"},
		{ScopeJournal, CodeInternal, http.StatusInternalServerError, Unknown, "a storage error"},

		// The reference node's node-to-node transport.
		{ScopePeer, CodePeerRefused, http.StatusForbidden, Fail, "the sender is not a current member, calls from another address than its member's, or the cluster secret is wrong (a stream's upgrade as each request); a body names another sender than the member the request comes from; 503 when no member runs at this address"},
		{ScopePeer, CodeWrongMember, http.StatusServiceUnavailable, Fail, "the request is for another member (an earlier incarnation at this address)"},
		{ScopePeer, CodeNotReady, http.StatusServiceUnavailable, Fail, "no member runs on this node yet"},
		{ScopePeer, CodeNotFound, http.StatusNotFound, Fail, "no such endpoint, entity type or singleton on this node"},
		{ScopePeer, CodeMethodNotAllowed, http.StatusMethodNotAllowed, Fail, "wrong method for the endpoint"},
		{ScopePeer, CodeBadRequest, http.StatusBadRequest, Fail, "a required field is missing or out of range; 413 when the body is larger than the endpoint takes"},
		{ScopePeer, CodeBadJSON, http.StatusBadRequest, Fail, "the body is not the endpoint's JSON, or could not be read"},
		{ScopePeer, CodeBadUpgrade, http.StatusBadRequest, Fail, "a stream request that is not a GET with the stream's Upgrade header, or names no sender; 500 (still fail: nothing was done) when the server cannot hand over its connection"},
		{ScopePeer, CodeTooManyStreams, http.StatusTooManyRequests, Fail, "a stream's upgrade from a member that holds as many streams here as a member may (it sends over plain HTTP)"},
		{ScopePeer, CodeInternal, http.StatusInternalServerError, Unknown, "the answer could not be encoded or was too long, or its handler panicked"},
		{ScopePeer, CodeTimeout, http.StatusGatewayTimeout, Unknown, "the deadline passed once the request was taken (by an entity, a singleton instance)"},
		{ScopePeer, CodeShardNotHere, http.StatusServiceUnavailable, Fail, "the region does not host the shard"},
		{ScopePeer, CodeHandingOff, http.StatusServiceUnavailable, Fail, "host-shard for a shard being handed off here"},
		{ScopePeer, CodeNotCoordinator, http.StatusConflict, Fail, "host-shard, begin-hand-off or hand-off from a member that does not run the type's coordinator in this member's view"},
		{ScopePeer, CodeProxyOnly, http.StatusConflict, Fail, "host-shard on a proxy-only region"},
		{ScopePeer, CodeRegionStopped, http.StatusServiceUnavailable, Fail, "the region has stopped, or the request is for an earlier incarnation's"},
		{ScopePeer, CodeEntityError, http.StatusInternalServerError, Unknown, "the entity ran and returned an error"},
		{ScopePeer, CodeEntityRejected, http.StatusConflict, Fail, "the entity refused the message (Reason: its rejection code)"},
		{ScopePeer, CodeEntityUnavailable, http.StatusServiceUnavailable, Fail, "the entity could not be started"},
		{ScopePeer, CodeNotDelivered, http.StatusServiceUnavailable, Fail, "the message was only buffered when its deadline passed"},
		{ScopePeer, CodeSingletonNotRunning, http.StatusServiceUnavailable, Fail, "no instance of the singleton runs here"},
		{ScopePeer, CodeSingletonFailed, http.StatusServiceUnavailable, Fail, "the instance failed (stale, fenced) and did nothing"},
		{ScopePeer, CodeUnavailable, http.StatusServiceUnavailable, Fail, "the instance could not serve the request now and did nothing"},
		{ScopePeer, CodeSingletonOutcomeUnknown, http.StatusServiceUnavailable, Unknown, "the instance may have acted (e.g. the journal did not answer a write)"},
		{ScopePeer, CodeInstanceError, http.StatusInternalServerError, Unknown, "the instance returned an unclassified error or a reply that is not JSON"},
		{ScopePeer, CodeUnknownSingleton, http.StatusNotFound, Fail, "no singleton of that name on this node"},
		{ScopePeer, CodeNoManager, http.StatusServiceUnavailable, Fail, "the singleton manager is not running"},
		{ScopePeer, CodeNotNextOldest, http.StatusConflict, Fail, "hand-over-to-me from a member that is not the next oldest in this member's view"},
	}
}

// CodeIn returns what code means on the wire of scope; ok is false for a
// code that wire does not define.
func CodeIn(scope Scope, code string) (CodeInfo, bool) {
	for _, c := range codeTable() {
		if c.Scope == scope && c.Code == code {
			return c, true
		}
	}
	return CodeInfo{}, false
}

// Code returns what a protocol error code means; ok is false for a code
// shardtest/1 does not define.
func Code(code string) (CodeInfo, bool) { return CodeIn(ScopeNode, code) }

// Codes lists the protocol's (shardtest/1's) error codes in the order of
// the docs' table.
func Codes() []CodeInfo { return codesIn(ScopeNode) }

// AllCodes lists the error codes of every scope: shardtest/1's (Codes),
// then the journal's, then the reference node's transport's.
func AllCodes() []CodeInfo { return codeTable() }

func codesIn(scope Scope) []CodeInfo {
	var out []CodeInfo
	for _, c := range codeTable() {
		if c.Scope == scope {
			out = append(out, c)
		}
	}
	return out
}

// ErrorReply is the HTTP status and the body of an error answer on the
// wire of scope: where status is 0 or b has no outcome, the table's for
// b.Code. A code the table does not define, without a status or with an
// outcome that is neither fail nor unknown, is answered as an unknown
// outcome with 504: nothing says it had no effect.
func ErrorReply(scope Scope, status int, b ErrorBody) (int, ErrorBody) {
	if info, ok := CodeIn(scope, b.Code); ok {
		if status == 0 {
			status = info.Status
		}
		if b.Outcome == "" {
			b.Outcome = info.Outcome
		}
	}
	if status == 0 || b.Outcome != Fail && b.Outcome != Unknown {
		status, b.Outcome = http.StatusGatewayTimeout, Unknown
	}
	return status, b
}

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

// Package singleton runs one instance of a service on the oldest Up member
// of the cluster (or of the members with a role), hands it over when that
// member leaves, takes it over when that member is downed, and routes
// requests to wherever it runs.
//
// It follows Akka's ClusterSingletonManager / ClusterSingletonProxy:
//
//   - Manager runs on every member that may host the singleton. The one on
//     the oldest member starts the instance; a new oldest asks the previous
//     one to hand over (HandOverToMe) and starts only once the previous
//     instance has stopped (HandOverDone); an oldest that is no longer the
//     oldest asks the new one to take over (TakeOverFromMe).
//   - Proxy forwards requests to the manager on the current oldest,
//     buffering them (bounded, oldest dropped first) while no instance runs.
//   - IDGenerator is a singleton service handing out unique, increasing ids
//     persisted in a journal whose writer epochs fence stale instances.
//
// Node-to-node messages are HTTP/JSON POSTs under
// /internal/v1/singleton/{name}/ carried by peer.Client.
package singleton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"

	"github.com/shardtest/shardtest/protocol/journal"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

// Request is one message to the singleton instance.
type Request struct {
	Op      string          `json:"op"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Instance is a running singleton.
type Instance interface {
	// Handle processes one request. The manager calls it one request at a
	// time, in mailbox (arrival) order.
	Handle(ctx context.Context, req Request) (json.RawMessage, error)
	// Stop is the termination message: finish work, release resources. The
	// instance counts as stopped once Stop has returned.
	Stop(ctx context.Context) error
}

// Factory starts (recovers) an instance. ctx is cancelled when the manager
// abandons the start (node downed or manager shutting down).
type Factory func(ctx context.Context) (Instance, error)

// Errors.
var (
	// ErrInstanceFailed marks an instance as stale or broken: when Handle
	// returns an error wrapping it (or journal.ErrFenced /
	// journal.ErrSeqConflict), the manager stops the instance and, if
	// this member is still the oldest, starts a fresh one after
	// Config.RetryInterval. On its own it says nothing about whether the
	// failed request took effect; wrapped around a definite journal error it
	// is definite.
	ErrInstanceFailed = errors.New("singleton: instance failed")
	// ErrNotRunning: no instance runs here (or it stopped, or the request
	// expired, before the request's turn). The request was not processed.
	ErrNotRunning = errors.New("singleton: not running here")
	// ErrBadRequest: the request is malformed or names an unknown op. It was
	// not processed.
	ErrBadRequest = errors.New("singleton: bad request")
	// ErrDropped: the proxy's buffer was full and this request was the
	// oldest waiting one. It was never sent.
	ErrDropped = errors.New("singleton: dropped from the proxy buffer")
	// ErrUnknownOutcome wraps errors after which the request may or may not
	// have taken effect (timeout, lost connection, journal unavailable
	// during a write). Such a request must not be resent blindly.
	ErrUnknownOutcome = errors.New("singleton: outcome unknown")
	// ErrUnavailable: the instance could not serve the request right now (a
	// dependency is unavailable) and did nothing. It is definite.
	ErrUnavailable = errors.New("singleton: temporarily unavailable")
)

// IsDefinite reports whether err certainly means the request had no effect:
// ErrDropped, ErrNotRunning (including a proxy deadline that passed while the
// request was only buffered), ErrBadRequest, ErrUnavailable, definite journal
// errors, and remote answers with outcome "fail". Anything wrapping
// ErrUnknownOutcome, and anything unclassified, is not definite.
func IsDefinite(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnknownOutcome):
		return false
	case errors.Is(err, ErrDropped), errors.Is(err, ErrNotRunning),
		errors.Is(err, ErrBadRequest), errors.Is(err, ErrUnavailable):
		return true
	case journal.IsDefinite(err), peer.IsDefiniteFailure(err):
		return true
	}
	return false
}

// InstanceFailed reports whether a Handle error marks the instance as stale
// or broken: its manager stops it (for a driver other than Manager).
func InstanceFailed(err error) bool { return isInstanceFailure(err) }

// isInstanceFailure reports whether a Handle error marks the instance as
// stale or broken.
func isInstanceFailure(err error) bool {
	return errors.Is(err, ErrInstanceFailed) || errors.Is(err, journal.ErrFenced) ||
		errors.Is(err, journal.ErrSeqConflict)
}

// retryable reports whether a definite failure means "no instance took the
// request, try again where the singleton runs next".
func retryable(err error) bool {
	if errors.Is(err, ErrUnknownOutcome) {
		return false
	}
	if errors.Is(err, ErrNotRunning) {
		return true
	}
	return isInstanceFailure(err) && IsDefinite(err)
}

// errorCode is the code (protocol.ScopePeer) an error of Manager.Handle
// is answered with; the table gives its status and outcome.
func errorCode(err error) string {
	timeout := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	switch {
	case errors.Is(err, ErrUnknownOutcome):
		if timeout {
			return protocol.CodeTimeout
		}
		return protocol.CodeSingletonOutcomeUnknown
	case errors.Is(err, ErrBadRequest):
		return protocol.CodeBadRequest
	case errors.Is(err, ErrNotRunning):
		return protocol.CodeSingletonNotRunning
	case isInstanceFailure(err) && IsDefinite(err):
		return protocol.CodeSingletonFailed
	case IsDefinite(err):
		return protocol.CodeUnavailable
	case timeout:
		return protocol.CodeTimeout
	}
	return protocol.CodeInstanceError
}

// classifyRemote turns an error of peer.Client.Call for a /request into what
// the proxy does with it: retry (the request certainly was not processed and
// the singleton may run elsewhere or later) or return err.
func classifyRemote(err error) (retry bool, out error) {
	var re *peer.RemoteError
	if errors.As(err, &re) {
		if re.Body.Outcome != protocol.Fail {
			return false, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
		}
		switch re.Body.Code {
		case protocol.CodeSingletonNotRunning, protocol.CodeSingletonFailed, protocol.CodeNoManager, protocol.CodePeerRefused, protocol.CodeWrongMember:
			// Not running there, or not that member (another incarnation,
			// or it does not know this one yet): try again.
			return true, err
		case protocol.CodeBadRequest, protocol.CodeBadJSON:
			return false, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		return false, err
	}
	// A connection that was never made carried nothing.
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true, err
	}
	return false, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
}

var nameRE = regexp.MustCompile(`^[a-z0-9-]{1,64}$`)

// validName reports whether s is a usable singleton name.
func validName(s string) bool { return nameRE.MatchString(s) }

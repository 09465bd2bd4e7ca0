package sharding

import (
	"errors"
	"fmt"

	"github.com/shardtest/shardtest/protocol/journal"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/singleton"
)

// Errors of Deliver and the coordinator. Every failure a caller sees is
// either definite (the message certainly reached no entity) or wraps
// ErrUnknownOutcome; IsDefinite tells them apart.
var (
	// ErrUnknownOutcome wraps failures after which the message may or may
	// not have been handled (a forward timed out or its answer was lost).
	// Such a message is never resent by the region.
	ErrUnknownOutcome = errors.New("sharding: outcome unknown")
	// ErrBufferFull: the region's buffer was full; this (newest) message
	// was dropped and never sent. Definite.
	ErrBufferFull = errors.New("sharding: region buffer full; message dropped")
	// ErrNotDelivered: the caller's deadline passed (or the region stopped)
	// while the message was only buffered; it was never sent. Definite.
	ErrNotDelivered = errors.New("sharding: message not delivered")
	// ErrShardNotHere: the region asked does not host the shard. Definite.
	ErrShardNotHere = errors.New("sharding: shard not hosted here")
	// ErrBadMessage: the message is malformed (empty entity id). Definite.
	ErrBadMessage = errors.New("sharding: bad message")
	// ErrEntityUnavailable: the entity could not be started (its factory
	// failed) and did not handle the message. Definite.
	ErrEntityUnavailable = errors.New("sharding: entity unavailable")
	// ErrRegionStopped: the region has stopped. Definite.
	ErrRegionStopped = errors.New("sharding: region stopped")
	// ErrRebalanceInProgress: the coordinator will not answer for a shard
	// being handed off; the asking region keeps buffering and retries.
	ErrRebalanceInProgress = errors.New("sharding: rebalance in progress")
)

// EntityError is an error an entity's Handle returned: the entity ran, so
// whether the message had an effect is the entity's business (not
// definite).
type EntityError struct {
	Entity string
	Err    error
}

func (e *EntityError) Error() string { return fmt.Sprintf("entity %s: %v", e.Entity, e.Err) }
func (e *EntityError) Unwrap() error { return e.Err }

// IsDefinite reports whether err certainly means the message (or request)
// had no effect: buffer overflow, expiry while only buffered, shard not
// hosted, bad message, entity that could not start, stopped region, a
// remote answer with outcome "fail", definite singleton / journal errors.
// Anything wrapping ErrUnknownOutcome is not definite, nor is an
// EntityError unless it wraps ErrEntityFailed.
func IsDefinite(err error) bool {
	var ee *EntityError
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnknownOutcome), errors.Is(err, singleton.ErrUnknownOutcome):
		return false
	case errors.As(err, &ee):
		// A stale incarnation (ErrEntityFailed) or a rejection did nothing;
		// any other entity error is the entity's business.
		var rej *Rejection
		return errors.Is(ee.Err, ErrEntityFailed) || errors.As(ee.Err, &rej)
	case errors.Is(err, ErrBufferFull), errors.Is(err, ErrNotDelivered), errors.Is(err, ErrShardNotHere),
		errors.Is(err, ErrBadMessage), errors.Is(err, ErrEntityUnavailable), errors.Is(err, ErrRegionStopped),
		errors.Is(err, ErrRebalanceInProgress):
		return true
	case peer.IsDefiniteFailure(err), journal.IsDefinite(err), singleton.IsDefinite(err):
		return true
	}
	return false
}

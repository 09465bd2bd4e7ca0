package sharding

import (
	"errors"
	"fmt"
)

// ErrEntityFailed marks an entity as stale or broken: when Handle returns an
// error wrapping it (a persistent entity fenced by a newer incarnation),
// the shard stops that incarnation; the next message starts a new one,
// which recovers its state afresh.
var ErrEntityFailed = errors.New("sharding: entity failed")

// Rejection is an entity's definite refusal: the entity did nothing with
// the message (a malformed request, a stale incarnation). Code is a stable
// machine-readable reason that crosses the network unchanged, so the node
// that took the request can answer with it, as a definite failure.
type Rejection struct {
	Code string
	Err  error
}

// Reject returns a Rejection; entities wrap it (%w) in what they return.
func Reject(code string, err error) *Rejection { return &Rejection{Code: code, Err: err} }

func (r *Rejection) Error() string { return fmt.Sprintf("%v (%s)", r.Err, r.Code) }
func (r *Rejection) Unwrap() error { return r.Err }

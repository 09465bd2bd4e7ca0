package sharding

import "errors"

// ErrEntityFailed marks an entity as stale or broken: when Handle returns an
// error wrapping it (a persistent entity fenced by a newer incarnation),
// the shard stops that incarnation; the next message starts a new one,
// which recovers its state afresh.
var ErrEntityFailed = errors.New("sharding: entity failed")

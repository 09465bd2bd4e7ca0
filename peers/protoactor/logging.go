package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
)

// Both the peer and protoactor log with log/slog to stderr, which the
// harness stores as the container's log: the framework's own lines
// (lib=Proto.Actor) are the evidence of what it did. protoactor's default
// logger prints times to the minute (time.Kitchen); this one keeps its
// attributes (lib, system) and level but prints times to the millisecond.

// newLogger is the peer's own logger.
func newLogger(w io.Writer, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})).With("lib", "shardtest-peer", "node", name)
}

// frameworkLogger is protoactor's logger factory at level.
func frameworkLogger(w io.Writer, level slog.Level) func(*actor.ActorSystem) *slog.Logger {
	return func(system *actor.ActorSystem) *slog.Logger {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("lib", "Proto.Actor", "system", system.ID)
	}
}

// parseLevel parses a log level name: debug, info, warn or error.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error: %w", s, err)
	}
	return l, nil
}

package cluster

import (
	"bytes"
	"log"
	"log/slog"
)

// newStdLogger routes memberlist's standard-library logging into slog:
// warnings and errors at their level, the rest at debug.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimSpace(p))
	switch {
	case bytes.Contains(p, []byte("[ERR]")):
		w.l.Error(msg, "component", "memberlist")
	case bytes.Contains(p, []byte("[WARN]")):
		w.l.Warn(msg, "component", "memberlist")
	default:
		w.l.Debug(msg, "component", "memberlist")
	}
	return len(p), nil
}

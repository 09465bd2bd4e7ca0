package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shardtest/shardtest/protocol/kit"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/impl/persistence"
)

// journalFile is the bbolt file inside --data.
const journalFile = "journal.db"

// journalMaxConnections bounds the connections the journal keeps open
// (kit.Slots: silent ones make room for new ones).
const journalMaxConnections = 1024

// journalShutdownGrace is how long in-flight requests get to finish after
// the command is asked to stop.
const journalShutdownGrace = 10 * time.Second

// journalFlags are the flags of `shardtest journal`.
type journalFlags struct {
	listen   string
	data     string
	noFsync  bool
	logLevel string
}

func newJournalCmd() *cobra.Command {
	var f journalFlags
	cmd := &cobra.Command{
		Use:   "journal",
		Short: "Run the durable event journal server",
		Long: `Run the durable event journal server.

The journal stores events per persistence id. Writers append under the
sequence number they last saw, so two writers on one id conflict instead of
interleaving; readers replay an id from a sequence number; a new incarnation
fences an id to get a writer epoch that makes older incarnations' appends
fail. Every event also gets a journal-wide commit number, so a checker can
read the order in which the journal accepted writes.

Nodes reach the journal over HTTP/JSON:

  POST /v1/append   {"pid","expected_seq","epoch","events":[base64...]}
  POST /v1/replay   {"pid","from","max"}
  POST /v1/fence    {"pid","token"}
  POST /v1/highest  {"pid"}
  GET  /v1/health

A fence with a token (optional: 1-64 letters, digits, '-', '_') is
idempotent: repeating it returns the epoch it first gave, so a writer whose
fence answer was lost can retry without fencing itself (the last 16 tokens
of each id are remembered).

Errors come back as {"error","code","outcome"}; outcome "fail" means nothing
was written, "unknown" means it may have been.

Events are kept in a single bbolt file, <data>/` + journalFile + `, which is
fsynced before every append is acknowledged. Only one journal process can
use a data directory at a time.

Flags:
  --listen     TCP address to serve on (host:port). Default 127.0.0.1:7400.
  --data       Directory holding ` + journalFile + `; created if missing.
               Default ./journal-data.
  --no-fsync   Do not fsync commits. UNSAFE: a machine crash can lose events
               that were acknowledged. For benchmarks only.
  --log-level  One of debug, info, warn, error. Default info. Logs go to
               stderr.

The server stops gracefully on SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runJournal(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7400", "address to serve the journal API on (host:port)")
	fl.StringVar(&f.data, "data", "./journal-data", "directory for "+journalFile+" (created if missing)")
	fl.BoolVar(&f.noFsync, "no-fsync", false, "UNSAFE: skip fsync on commit; acknowledged events can be lost in a crash (benchmarks only)")
	fl.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// runJournal serves the journal until ctx is cancelled.
func runJournal(ctx context.Context, f journalFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	level, err := parseLogLevel(f.logLevel)
	if err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return fmt.Errorf("invalid --listen %q (want host:port): %w", f.listen, err)
	}
	if strings.TrimSpace(f.data) == "" {
		return errors.New("invalid --data: empty directory name")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// Listen first, before anything touches the disk, so a taken address
	// is reported as such and leaves no files behind.
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", f.listen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("listen on %s: address already in use (is another journal running?): %w", f.listen, err)
		}
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	// Serve closes ln; until then, failures below must.
	serving := false
	defer func() {
		if !serving {
			_ = ln.Close()
		}
	}()

	if err := ensureWritableDir(f.data); err != nil {
		return err
	}
	path := filepath.Join(f.data, journalFile)
	store, err := persistence.Open(path, persistence.StoreOptions{NoSync: f.noFsync})
	if err != nil {
		return err // already names the file and, if so, that it is locked
	}
	defer func() {
		if err := store.Close(); err != nil {
			logger.Error("close journal", "err", err)
		}
	}()

	// A request must arrive in time and connections are bounded, so slow
	// or many clients cannot hold the journal (the server also bounds the
	// requests it handles at once).
	srv := kit.NewServer(persistence.NewServer(store, logger))
	srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	if f.noFsync {
		logger.Warn("fsync disabled: acknowledged events can be lost in a crash")
	}
	logger.Info("journal serving", "addr", ln.Addr().String(), "file", path, "fsync", !f.noFsync)

	serveErr := make(chan error, 1)
	serving = true
	go func() { serveErr <- kit.Slots{Max: journalMaxConnections}.Serve(srv, ln) }()

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve journal: %w", err)
	case <-ctx.Done():
	}
	logger.Info("journal shutting down")
	// The parent context is already done; the grace period needs its own.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("shut down journal server: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve journal: %w", err)
	}
	logger.Info("journal stopped")
	return nil
}

// parseLogLevel accepts exactly the four documented names.
func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", s)
}

// ensureWritableDir creates dir if needed and proves it is writable, so a
// read-only or misnamed directory fails up front with a clear message.
func ensureWritableDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create --data directory %s: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".write-probe-*")
	if err != nil {
		return fmt.Errorf("--data directory %s is not writable: %w", dir, err)
	}
	name := probe.Name()
	_ = probe.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("--data directory %s: remove write probe: %w", dir, err)
	}
	return nil
}

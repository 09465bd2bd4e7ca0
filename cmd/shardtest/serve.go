package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/results"
)

func newServeCmd() *cobra.Command {
	var dir, listen string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the results store as web pages: every run, its verdict and its files",
		Long: `Serve the results store read-only over HTTP. The index page lists every run,
newest first (name, start time, verdict, ok/fail/info counts, seed, runtime,
nodes, workload), with links to each run's report (index.html, written by
run and rewritten by check: the verdict links to it) and to its files:
test.json, results.json, junit.xml, history.jsonl and the node logs (.jsonl
and .log are served as plain text). The verdict shown is results.json's.
The page needs no JavaScript and no external assets, so it works offline.
The listing is re-read on every request; runs still in progress or whose
harness was killed show as "incomplete".

Stop with Ctrl-C; requests in flight are given a few seconds to finish.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := results.Handler(dir)
			if err != nil {
				return err
			}
			ln, err := listenTCP(listen)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving %s at http://%s/ (Ctrl-C stops)\n", dir, ln.Addr())
			return serveUntilDone(cmd.Context(), ln, h)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "results", "results", "results root folder to serve (as written by shardtest run --results)")
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on, host:port (port 0 picks a free one)")
	return cmd
}

// listenTCP listens on addr with an error that says what to do.
func listenTCP(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen on %s: the address is already in use (another server running?); choose another with --listen", addr)
		}
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}

// serveUntilDone serves h on ln until ctx ends, then shuts down gracefully.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

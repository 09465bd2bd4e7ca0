package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/explore"
	"github.com/shardtest/shardtest/internal/atomicfile"
)

func newBenchExploreCmd() *cobra.Command {
	var (
		e         exploreFlags
		campaigns int
	)
	cmd := &cobra.Command{
		Use:   "explore",
		Short: "coverage-guided campaigns against random ones on the same budget, several of each",
		Long: `Run --campaigns campaigns of each arm the same way: random (every run a
fresh --nemesis draw with a new seed, as shardtest run makes it) and guided
(shardtest explore), with the same runs, faults and bounds, seeds --seed,
--seed+1, ..., one campaign at a time, the arms alternating. Each campaign
stops at its first invalid run (or, with --keep-going, at --budget or
--runs).

Writes <results>/bench-explore/<time>/: every campaign's folder,
comparison.md (every campaign; per arm the median and spread of the time to
the first invalid run and of the distinct behaviours by the time every
campaign reached) and comparison.json. docs/exploration.md has the figures.

Exit status: 0 the comparison ran; 3 bad input or a campaign could not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if campaigns < 1 {
				return cannotRun(fmt.Errorf("--campaigns %d: want at least 1", campaigns))
			}
			cfg, release, err := e.config(cmd, "bench-explore")
			if err != nil {
				return cannotRun(fmt.Errorf("bench explore: %w", err))
			}
			defer release()
			dir := cfg.Dir
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "bench explore: %d campaigns of each arm, %s on %d nodes, faults %s, %v main phase; %s\n",
				campaigns, cfg.Base.Workload, cfg.Base.Nodes, cfg.Base.Nemesis, cfg.Base.TimeLimit, dir)
			trials, err := explore.Compare(cmd.Context(), cfg, campaigns, dir, func(t explore.Trial) {
				found := "no invalid run"
				if t.Found {
					found = fmt.Sprintf("first invalid run after %s (%d runs)", t.FirstInvalid.Round(time.Second), t.RunsToInvalid)
				}
				fmt.Fprintf(out, "%-6s seed %d: %s; %d runs, %d distinct behaviours, stopped: %s\n", t.Arm, t.Seed, found, t.Runs, t.Behaviours, t.Stopped)
			})
			if len(trials) > 0 {
				var md bytes.Buffer
				explore.WriteComparison(&md, trials)
				b, _ := json.MarshalIndent(trials, "", "  ")
				if werr := os.MkdirAll(dir, 0o755); werr == nil {
					werr = atomicfile.Write(dir, "comparison.md", md.Bytes())
					if werr == nil {
						werr = atomicfile.Write(dir, "comparison.json", append(b, '\n'))
					}
					if werr != nil && err == nil {
						err = werr
					}
				}
				fmt.Fprintf(out, "\n%s\ncomparison: %s\n", md.String(), filepath.Join(dir, "comparison.md"))
			}
			if err != nil {
				return cannotRun(err)
			}
			return nil
		},
	}
	e.register(cmd)
	cmd.Flags().IntVar(&campaigns, "campaigns", 3, "campaigns of each arm")
	return cmd
}

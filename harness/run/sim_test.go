package run

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/workloads"
)

func simOptions(name string) Options {
	o := options(name)
	o.Runtime, o.Workload, o.TimeLimit, o.Concurrency = "sim", "idgen", 40*time.Second, 8
	o.Nemesis, o.NemesisInterval = "partition,kill,pause", 5*time.Second
	return o
}

// TestSimSameSeedSameBytes: a faulty simulated run of the reference node
// (the ID generator, and sharding with the register workload and with
// at-least-once senders) is valid,
// and its options and seed write the same history, node events and status
// samples, byte for byte, each time; another seed writes others.
func TestSimSameSeedSameBytes(t *testing.T) {
	for _, workload := range []string{"idgen", "register", "deliver"} {
		t.Run(workload, func(t *testing.T) {
			w, err := workloads.Named(workload)
			if err != nil {
				t.Fatal(err)
			}
			run := func(seed int64) (hist, events []byte, res Result) {
				defer func() {
					// status.jsonl: the samples are the same bytes too.
					st, err := os.ReadFile(filepath.Join(res.Dir, history.StatusFile))
					if err != nil || len(st) == 0 {
						t.Fatalf("status samples: %d bytes, %v", len(st), err)
					}
					events = append(events, st...)
				}()
				o := simOptions("sim-same")
				o.Seed, o.Workload = seed, workload
				test := &Test{Options: o, Runtime: Sim{}, Workload: w, Log: quiet()}
				res, err := test.Run(context.Background(), t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				hist, err = os.ReadFile(filepath.Join(res.Dir, history.HistoryFile))
				if err != nil {
					t.Fatal(err)
				}
				events, err = os.ReadFile(filepath.Join(res.Dir, history.EventsFile))
				if err != nil {
					t.Fatal(err)
				}
				return hist, events, res
			}
			h1, e1, res := run(3)
			if res.Verdict != checker.Valid {
				t.Fatalf("verdict %s, want valid: %+v", res.Verdict, res.Checks)
			}
			if res.Summary.Nemesis < 2 || res.Summary.OK < 1000 {
				t.Fatalf("the run did too little to show anything: %+v", res.Summary)
			}
			h2, e2, _ := run(3)
			if !bytes.Equal(h1, h2) || !bytes.Equal(e1, e2) {
				t.Fatalf("one seed, two histories (%d vs %d bytes) or event logs (%d vs %d bytes)", len(h1), len(h2), len(e1), len(e2))
			}
			if h3, _, _ := run(4); bytes.Equal(h1, h3) {
				t.Fatal("two seeds wrote the same history")
			}
		})
	}
}

// TestSimRefusesWhatItCannotRun: a node argument, bug or setting the
// simulation does not take, and an image, are refused before any side
// effect, as unsupported.
func TestSimRefusesWhatItCannotRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(o *Options)
	}{
		{"node-arg", func(o *Options) { o.NodeArgs = []string{"--heartbeat-interval=1s"} }},
		{"bug", func(o *Options) { o.NodeArgs = []string{"--bugs=no-such-bug"} }},
		{"setting", func(o *Options) { o.NodeSettings = map[string]string{"roles": "a"} }},
		{"image", func(o *Options) { o.Image = "someone/else:1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := simOptions("sim-refuse")
			tc.edit(&o)
			w, err := workloads.Named(o.Workload)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			test := &Test{Options: o, Runtime: Sim{}, Workload: w, Log: quiet()}
			if _, err := test.Run(context.Background(), root); !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err %v, want unsupported", err)
			}
			if _, err := NewRuntime(o, RuntimeConfig{}); !errors.Is(err, ErrUnsupported) {
				t.Fatalf("NewRuntime: err %v, want unsupported", err)
			}
			if ents, _ := os.ReadDir(root); len(ents) > 0 {
				t.Fatalf("a refused run left %d entries in the results store", len(ents))
			}
		})
	}
}

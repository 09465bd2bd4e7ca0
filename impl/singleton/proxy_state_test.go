package singleton

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"testing"

	"github.com/shardtest/shardtest/internal/transcript"
)

// TestProxyTranscripts replays testdata/proxy: inputs to a ProxyState and
// the effects each gives, then the proxy's counters. Inputs:
//
//	config buffer=2 retry=200ms role=R
//	view self=n2 n1:up n2:up          as in testdata/manager
//	call 1                            a new request, ID 1
//	not-running 1 [err=why]           its attempt found no instance
//	timer 1 | expired 1 | done 1
func TestProxyTranscripts(t *testing.T) {
	transcript.Run(t, filepath.Join("testdata", "proxy"), func() func(string) ([]string, error) {
		r := &proxyRunner{views: newTranscriptRunner()}
		return r.step
	})
}

type proxyRunner struct {
	cfg   ProxyConfig
	p     *ProxyState
	views *transcriptRunner // builds the views
}

func (r *proxyRunner) step(input string) ([]string, error) {
	cmd, args, plain := transcript.Args(input)
	if cmd == "config" {
		if r.p != nil {
			return nil, errors.New("config must come first")
		}
		for k, v := range args {
			switch k {
			case "buffer":
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, err
				}
				r.cfg.BufferSize = n
			case "retry":
				d, err := time.ParseDuration(v)
				if err != nil {
					return nil, err
				}
				r.cfg.RetryInterval = d
			case "role":
				r.cfg.Role = v
			default:
				return nil, fmt.Errorf("unknown config %q", k)
			}
		}
		return nil, nil
	}
	if r.p == nil {
		r.cfg.Name = "id-generator"
		cfg, err := ProxyConfigDefaults(r.cfg)
		if err != nil {
			return nil, err
		}
		r.p = NewProxyState(cfg)
	}
	id := func() (uint64, error) {
		if len(plain) != 1 {
			return 0, fmt.Errorf("want: %s ID", cmd)
		}
		return strconv.ParseUint(plain[0], 10, 64)
	}
	var in ProxyInput
	switch cmd {
	case "view":
		snap, err := r.views.snapshot(args["self"], plain)
		if err != nil {
			return nil, err
		}
		in = PxView{Snapshot: snap}
	case "call", "not-running", "timer", "expired", "done":
		n, err := id()
		if err != nil {
			return nil, err
		}
		switch cmd {
		case "call":
			in = PxCall{ID: n}
		case "not-running":
			in = PxNotRunning{ID: n, Err: errors.New(args["err"])}
		case "timer":
			in = PxTimer{ID: n}
		case "expired":
			in = PxExpired{ID: n, Err: errors.New("context deadline exceeded")}
		case "done":
			in = PxDone{ID: n}
		}
	default:
		return nil, fmt.Errorf("unknown input %q", cmd)
	}
	var out []string
	for _, e := range r.p.Step(in) {
		out = append(out, e.String())
	}
	out = append(out, fmt.Sprintf("waiting=%d dropped=%d forwarded=%d", r.p.Waiting(), r.p.Dropped(), r.p.Forwarded()))
	return out, nil
}

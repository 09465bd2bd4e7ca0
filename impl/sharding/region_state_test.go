package sharding

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/internal/transcript"
)

// TestRegionTranscripts replays the transcripts in testdata/region: each
// block is one input to a RegionState (the region r1 unless config says
// otherwise), then "----", then the effects it must give and the state it
// is left in. Inputs:
//
//	config self=r1 buffer=10 retry=1s [shards=N] [proxy] [bug=NAME]
//	submit id=N shard=S [entity=E]       a local caller sends message N
//	peer-deliver id=N shard=S            another region forwards N here
//	abandon id=N                         N's caller gave up
//	home shard=S region=R | home shard=S err=WHY
//	retry shard=S
//	forwarded id=N home=R [flush] delivered|requeued|expired
//	rebuffer shard=S ids=N,M             held messages back from the shard
//	host shard=S | begin-hand-off shard=S | hand-off shard=S
//	                                     each [from=M] [coordinator=C]: who
//	                                     asks, and where the region's view
//	                                     runs the coordinator (both c1)
//	shard-removed shard=S | stop
func TestRegionTranscripts(t *testing.T) {
	transcript.Run(t, filepath.Join("testdata", "region"), func() func(string) ([]string, error) {
		return (&regionRunner{msgs: map[uint64]RegionMsg{}}).step
	})
}

type regionRunner struct {
	cfg  RegionConfig
	self string
	m    *RegionState
	msgs map[uint64]RegionMsg
}

func (r *regionRunner) machine() *RegionState {
	if r.m == nil {
		if r.self == "" {
			r.self = "r1"
		}
		if r.cfg.BufferSize == 0 {
			r.cfg.BufferSize = 10
		}
		if r.cfg.RetryInterval == 0 {
			r.cfg.RetryInterval = time.Second
		}
		r.cfg.TypeName = "t"
		r.m = NewRegionState(r.self, r.cfg, nil)
	}
	return r.m
}

func (r *regionRunner) msg(args map[string]string, define bool) (RegionMsg, error) {
	id, err := strconv.ParseUint(args["id"], 10, 64)
	if err != nil {
		return RegionMsg{}, fmt.Errorf("want id=N: %w", err)
	}
	if !define {
		m, ok := r.msgs[id]
		if !ok {
			return m, fmt.Errorf("message %d was never sent", id)
		}
		return m, nil
	}
	if args["shard"] == "" {
		return RegionMsg{}, errors.New("want shard=S")
	}
	m := RegionMsg{ID: id, Shard: args["shard"], Entity: args["entity"]}
	if m.Entity == "" {
		m.Entity = "e" + args["id"]
	}
	r.msgs[id] = m
	return m, nil
}

func (r *regionRunner) step(input string) ([]string, error) {
	cmd, args, plain := transcript.Args(input)
	var in RegionInput
	switch cmd {
	case "config":
		if r.m != nil {
			return nil, errors.New("config must come first")
		}
		for k, v := range args {
			switch k {
			case "self":
				r.self = v
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
			case "bug":
				if err := ParseBug(v, &r.cfg.Bugs); err != nil {
					return nil, err
				}
			case "shards":
				n, err := strconv.Atoi(v)
				if err != nil {
					return nil, err
				}
				r.cfg.NumberOfShards = n
			default:
				return nil, fmt.Errorf("unknown config %q", k)
			}
		}
		r.cfg.ProxyOnly = slices.Contains(plain, "proxy")
		return nil, nil
	case "submit", "peer-deliver":
		m, err := r.msg(args, true)
		if err != nil {
			return nil, err
		}
		if cmd == "submit" {
			in = RgSubmit{Msg: m}
		} else {
			in = RgPeerDeliver{Msg: m}
		}
	case "abandon":
		m, err := r.msg(args, false)
		if err != nil {
			return nil, err
		}
		in = RgAbandoned{ID: m.ID}
	case "home":
		h := RgHome{Shard: args["shard"], Home: args["region"]}
		if e := args["err"]; e != "" {
			h.Err = errors.New(e)
		}
		in = h
	case "retry":
		in = RgRetry{Shard: args["shard"]}
	case "forwarded":
		m, err := r.msg(args, false)
		if err != nil {
			return nil, err
		}
		f := RgForwarded{Msg: m, Home: args["home"], Flush: slices.Contains(plain, "flush")}
		switch {
		case slices.Contains(plain, "delivered"):
			f.Delivered = true
		case slices.Contains(plain, "requeued"):
			f.Requeued = true
		case slices.Contains(plain, "expired"):
		default:
			return nil, errors.New("want delivered, requeued or expired")
		}
		in = f
	case "rebuffer":
		rb := RgRebuffer{Shard: args["shard"]}
		for _, s := range strings.Split(args["ids"], ",") {
			m, err := r.msg(map[string]string{"id": s}, false)
			if err != nil {
				return nil, err
			}
			rb.Msgs = append(rb.Msgs, m)
		}
		in = rb
	case "host":
		in = RgHostShard{Shard: args["shard"], By: byCoordinator(args)}
	case "begin-hand-off":
		in = RgBeginHandOff{Shard: args["shard"], By: byCoordinator(args)}
	case "hand-off":
		in = RgHandOff{Shard: args["shard"], By: byCoordinator(args)}
	case "shard-removed":
		in = RgShardRemoved{Shard: args["shard"]}
	case "stop":
		in = RgStop{}
	default:
		return nil, fmt.Errorf("unknown input %q", cmd)
	}
	m := r.machine()
	var out []string
	for _, e := range m.Step(in) {
		out = append(out, formatRegionEffect(e))
	}
	return append(out, r.state()), nil
}

// byCoordinator is who asks for a coordinator's request: from=M (default
// c1) and coordinator=C, where the region's view runs the coordinator
// (default c1).
func byCoordinator(args map[string]string) ByCoordinator {
	by := ByCoordinator{From: "c1", Coordinator: "c1"}
	if f, ok := args["from"]; ok {
		by.From = f
	}
	if c, ok := args["coordinator"]; ok {
		by.Coordinator = c
	}
	return by
}

// state sums up the machine after a step: its shards hosted here and
// their modes, the known homes and the buffers with their phases.
func (r *regionRunner) state() string {
	m := r.m
	var parts []string
	for _, sh := range slices.Sorted(maps.Keys(m.local)) {
		parts = append(parts, fmt.Sprintf("%s:%s", sh, map[shardMode]string{shardAccepting: "accepting", shardClosed: "closed", shardStopping: "stopping"}[m.local[sh]]))
	}
	for _, sh := range slices.Sorted(maps.Keys(m.homes)) {
		parts = append(parts, fmt.Sprintf("%s@%s", sh, m.homes[sh]))
	}
	for _, sh := range slices.Sorted(maps.Keys(m.buffers)) {
		b := m.buffers[sh]
		ids := make([]string, len(b.queue))
		for i, msg := range b.queue {
			ids[i] = strconv.FormatUint(msg.ID, 10)
		}
		phase := map[bufferPhase]string{phaseAsking: "asking", phaseWaiting: "waiting", phaseFlushing: "flushing"}[b.phase]
		if b.phase == phaseFlushing {
			phase += fmt.Sprintf(" to %s", b.home)
			if b.inFlight != 0 {
				phase += fmt.Sprintf(" (%d in flight)", b.inFlight)
			}
		}
		parts = append(parts, fmt.Sprintf("buffer %s [%s] %s", sh, strings.Join(ids, " "), phase))
	}
	if m.stopped {
		parts = append(parts, "stopped")
	}
	if len(parts) == 0 {
		return "state empty"
	}
	return "state " + strings.Join(parts, "; ")
}

func formatRegionEffect(e RegionEffect) string {
	switch e := e.(type) {
	case Enqueue:
		return fmt.Sprintf("enqueue %d shard=%s", e.Msg.ID, e.Shard)
	case Forward:
		if e.Flush {
			return fmt.Sprintf("forward %d to=%s flush", e.Msg.ID, e.Home)
		}
		return fmt.Sprintf("forward %d to=%s", e.Msg.ID, e.Home)
	case AskHome:
		if e.NotHere != "" {
			return fmt.Sprintf("ask-home %s not-here=%s", e.Shard, e.NotHere)
		}
		return "ask-home " + e.Shard
	case ArmRetry:
		return fmt.Sprintf("arm-retry %s after=%v", e.Shard, e.After)
	case FailMsg:
		return fmt.Sprintf("fail %d %q", e.Msg.ID, e.Err.Error())
	case ForgetMsg:
		return fmt.Sprintf("forget %d", e.Msg.ID)
	case StartShard:
		return "start-shard " + e.Shard
	case CloseShard:
		return "close-shard " + e.Shard
	case ReopenShard:
		return "reopen-shard " + e.Shard
	case StopShard:
		if e.Now {
			return "stop-shard " + e.Shard + " now"
		}
		return "stop-shard " + e.Shard
	case HostResult:
		if e.Err != nil {
			return fmt.Sprintf("host refused %q", e.Err.Error())
		}
		return "host ok"
	case Refused:
		return fmt.Sprintf("refused %q", e.Err.Error())
	case EmitRegionEvent:
		s := "event " + e.Event.Type + " shard=" + e.Event.Shard
		if e.Event.Entity != "" {
			s += " entity=" + e.Event.Entity
		}
		if e.Event.Detail != "" {
			s += fmt.Sprintf(" %q", e.Event.Detail)
		}
		return s
	case LocalChanged:
		return "local-changed"
	}
	return fmt.Sprintf("%T", e)
}

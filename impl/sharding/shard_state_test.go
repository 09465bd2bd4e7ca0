package sharding

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/internal/transcript"
)

// TestShardTranscripts replays the transcripts in testdata/shard: each
// block is one input to the ShardState of shard s1, then "----", then the
// effects it must give and the state it is left in. Incarnations are
// named i1, i2, ... in the order they start. Inputs:
//
//	config passivate=30s hand-off-timeout=10s [bug=NAME]
//	time 5s                          the time of the steps that follow
//	enqueue id=N entity=E
//	started entity=E inc=I [err=WHY] | handled entity=E inc=I [failed]
//	stopped entity=E inc=I [err=WHY] | passivate entity=E inc=I
//	idle | close | reopen | hand-off | stop-now | timeout
func TestShardTranscripts(t *testing.T) {
	transcript.Run(t, filepath.Join("testdata", "shard"), func() func(string) ([]string, error) {
		return (&shardRunner{}).step
	})
}

type shardRunner struct {
	cfg  ShardConfig
	m    *ShardState
	now  time.Duration
	incs int
}

func (r *shardRunner) machine() *ShardState {
	if r.m == nil {
		if r.cfg.HandOffTimeout == 0 {
			r.cfg.HandOffTimeout = 10 * time.Second
		}
		r.cfg.TypeName, r.cfg.Self = "t", "r1"
		r.cfg.NextIncarnation = func() string {
			r.incs++
			return "i" + strconv.Itoa(r.incs)
		}
		r.m = NewShardState("s1", r.cfg, nil)
	}
	return r.m
}

func (r *shardRunner) step(input string) ([]string, error) {
	cmd, args, plain := transcript.Args(input)
	errArg := func() error {
		if e := args["err"]; e != "" {
			return errors.New(e)
		}
		return nil
	}
	var in ShardInput
	switch cmd {
	case "config":
		if r.m != nil {
			return nil, errors.New("config must come first")
		}
		for k, v := range args {
			if k == "bug" {
				if err := ParseBug(v, &r.cfg.Bugs); err != nil {
					return nil, err
				}
				continue
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, err
			}
			switch k {
			case "passivate":
				r.cfg.PassivateIdleAfter = d
			case "hand-off-timeout":
				r.cfg.HandOffTimeout = d
			default:
				return nil, fmt.Errorf("unknown config %q", k)
			}
		}
		return nil, nil
	case "time":
		d, err := time.ParseDuration(strings.Join(plain, ""))
		if err != nil {
			return nil, err
		}
		r.now = d
		return nil, nil
	case "enqueue":
		id, err := strconv.ParseUint(args["id"], 10, 64)
		if err != nil || args["entity"] == "" {
			return nil, errors.New("want enqueue id=N entity=E")
		}
		in = ShEnqueue{Msg: RegionMsg{ID: id, Shard: "s1", Entity: args["entity"]}}
	case "started":
		in = ShStarted{Entity: args["entity"], Inc: args["inc"], Err: errArg()}
	case "handled":
		in = ShHandled{Entity: args["entity"], Inc: args["inc"], Failed: slices.Contains(plain, "failed")}
	case "stopped":
		in = ShStopped{Entity: args["entity"], Inc: args["inc"], Err: errArg()}
	case "passivate":
		in = ShPassivate{Entity: args["entity"], Inc: args["inc"]}
	case "idle":
		in = ShIdleTick{}
	case "close":
		in = ShClose{}
	case "reopen":
		in = ShReopen{}
	case "hand-off":
		in = ShHandOff{}
	case "stop-now":
		in = ShStopNow{}
	case "timeout":
		in = ShTimeout{}
	default:
		return nil, fmt.Errorf("unknown input %q", cmd)
	}
	m := r.machine()
	var out []string
	for _, e := range m.Step(r.now, in) {
		out = append(out, formatShardEffect(e))
	}
	return append(out, r.state()), nil
}

// state sums up the machine: each entity's incarnation, phase, mailbox and
// held messages, and the shard's closing.
func (r *shardRunner) state() string {
	m := r.m
	var parts []string
	ids := make([]string, 0, len(m.entities))
	for id := range m.entities {
		ids = append(ids, id)
	}
	for id := range m.held {
		if m.entities[id] == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := id
		if e := m.entities[id]; e != nil {
			p += fmt.Sprintf("/%s %s", e.inc, map[entityPhase]string{entityStarting: "starting", entityIdle: "parked", entityBusy: "busy", entityStopping: "stopping"}[e.phase])
			if len(e.queue) > 0 {
				p += " queue=" + msgIDs(e.queue)
			}
			if e.passivating {
				p += " passivating"
			} else if e.stopReq {
				p += " stop-asked"
			}
			if e.givenUp {
				p += " given-up"
			}
		}
		if h := m.held[id]; len(h) > 0 {
			p += " held=" + msgIDs(h)
		}
		parts = append(parts, p)
	}
	switch {
	case m.ending != nil && m.ending.done:
		parts = append(parts, "ended")
	case m.ending != nil:
		parts = append(parts, "ending")
	case m.closed:
		parts = append(parts, "closed")
	}
	if len(parts) == 0 {
		return "state empty"
	}
	return "state " + strings.Join(parts, "; ")
}

func msgIDs(ms []RegionMsg) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = strconv.FormatUint(m.ID, 10)
	}
	return strings.Join(s, ",")
}

func formatShardEffect(e ShardEffect) string {
	switch e := e.(type) {
	case StartEntity:
		return "start " + e.Entity + "/" + e.Inc
	case HandleMsg:
		return fmt.Sprintf("handle %d by %s/%s", e.Msg.ID, e.Entity, e.Inc)
	case StopEntity:
		return "stop " + e.Entity + "/" + e.Inc
	case CancelEntity:
		return "cancel " + e.Entity + "/" + e.Inc
	case FailShardMsg:
		return fmt.Sprintf("fail %d %q", e.Msg.ID, e.Err.Error())
	case ForgetShardMsg:
		return fmt.Sprintf("forget %d", e.Msg.ID)
	case RebufferMsgs:
		return "rebuffer " + msgIDs(e.Msgs)
	case EntityEvent:
		s := "event " + e.Type + " " + e.Entity + "/" + e.Inc
		if e.Detail != "" {
			s += fmt.Sprintf(" %q", e.Detail)
		}
		return s
	case ArmShardTimer:
		return fmt.Sprintf("arm-timer %v", e.After)
	case ShardDone:
		return fmt.Sprintf("done forced=%d", e.Forced)
	}
	return fmt.Sprintf("%T", e)
}

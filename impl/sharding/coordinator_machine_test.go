package sharding

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/internal/transcript"
	"github.com/shardtest/shardtest/protocol/journal"
)

// TestCoordinatorTranscripts replays the transcripts in
// testdata/coordinator: each block is one input to a CoordinatorMachine
// (a fresh coordinator, epoch 1, empty journal), then "----", then the
// effects it must give and the state it is left in. Members are written
// as in a view (name[@incarnation][#up]:status; region uids name@a).
// Inputs:
//
//	config max-rebalance=1 threshold=1 margin=5s retry=1s [bug=NAME]
//	time 5s                               the Elapsed reading from now on
//	view n1 n2:leaving n3:down
//	register id=N region=UID [proxy]
//	get-shard-home id=N shard=S region=UID [not-here=UID]
//	graceful-shutdown id=N region=UID | state id=N
//	appended [tag=T] last=N | appended [tag=T] err=fenced|conflict|unknown|invalid
//	highest [tag=T] h=N [err=WHY]
//	called tag=T [err=WHY] | timer tag=T
//	watch | rebalance | stop
//
// tag defaults to that of the last effect of the kind.
func TestCoordinatorTranscripts(t *testing.T) {
	transcript.Run(t, filepath.Join("testdata", "coordinator"), func() func(string) ([]string, error) {
		return (&coordinatorRunner{last: map[string]uint64{}}).step
	})
}

type coordinatorRunner struct {
	s    Settings
	m    *CoordinatorMachine
	now  time.Duration
	ver  uint64
	last map[string]uint64 // effect kind → last tag
}

func (r *coordinatorRunner) machine() *CoordinatorMachine {
	if r.m == nil {
		r.s.TypeName = "t"
		r.s = r.s.WithDefaults()
		r.m = NewCoordinatorMachine(CoordinatorConfig{Settings: r.s, Self: "n1@a"}, nil, NewState(), 1, 0, nil)
	}
	return r.m
}

func (r *coordinatorRunner) tag(args map[string]string, kind string) (uint64, error) {
	if t, ok := args["tag"]; ok {
		return strconv.ParseUint(t, 10, 64)
	}
	t, ok := r.last[kind]
	if !ok {
		return 0, fmt.Errorf("no %s in flight: give tag=", kind)
	}
	return t, nil
}

func (r *coordinatorRunner) step(input string) ([]string, error) {
	cmd, args, plain := transcript.Args(input)
	var in CoInput
	request := func(op string, payload any) error {
		id, err := strconv.ParseUint(args["id"], 10, 64)
		if err != nil {
			return fmt.Errorf("want id=N: %w", err)
		}
		b, err := json.Marshal(payload)
		if err != nil {
			return err
		}
		in = CoRequest{ID: id, Op: op, Payload: b}
		return nil
	}
	var err error
	switch cmd {
	case "config":
		if r.m != nil {
			return nil, errors.New("config must come first")
		}
		for k, v := range args {
			if err := r.configure(k, v); err != nil {
				return nil, err
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
	case "view":
		snap, err := r.view(plain)
		if err != nil {
			return nil, err
		}
		in = CoView{Snapshot: snap}
	case "register":
		err = request(OpRegister, RegisterRequest{Region: args["region"], Proxy: slices.Contains(plain, "proxy")})
	case "get-shard-home":
		err = request(OpGetShardHome, GetShardHomeRequest{Shard: args["shard"], Region: args["region"], NotHere: args["not-here"]})
	case "graceful-shutdown":
		err = request(OpGracefulShutdown, GracefulShutdownRequest{Region: args["region"]})
	case "state":
		err = request(OpState, nil)
		if err == nil {
			cr := in.(CoRequest)
			cr.Payload = nil
			in = cr
		}
	case "appended":
		tag, terr := r.tag(args, "append")
		if terr != nil {
			return nil, terr
		}
		a := CoAppended{Tag: tag}
		switch args["err"] {
		case "":
			a.Last, err = strconv.ParseInt(args["last"], 10, 64)
		case "fenced":
			a.Err = journal.ErrFenced
		case "conflict":
			a.Err = journal.ErrSeqConflict
		case "invalid":
			a.Err = journal.ErrInvalid
		case "unknown":
			a.Err = journal.ErrUnavailable
		default:
			return nil, fmt.Errorf("unknown append error %q", args["err"])
		}
		in = a
	case "highest":
		tag, terr := r.tag(args, "check-highest")
		if terr != nil {
			return nil, terr
		}
		h := CoHighestIs{Tag: tag}
		if e := args["err"]; e != "" {
			h.Err = errors.New(e)
		} else {
			h.Highest, err = strconv.ParseInt(args["h"], 10, 64)
		}
		in = h
	case "called":
		tag, terr := r.tag(args, "call")
		if terr != nil {
			return nil, terr
		}
		c := CoCalled{Tag: tag}
		if e := args["err"]; e != "" {
			c.Err = errors.New(e)
		}
		in = c
	case "timer":
		tag, terr := r.tag(args, "arm")
		if terr != nil {
			return nil, terr
		}
		in = CoTimer{Tag: tag}
	case "watch":
		in = CoWatchTick{}
	case "rebalance":
		in = CoRebalanceTick{}
	case "stop":
		in = CoStop{}
	default:
		return nil, fmt.Errorf("unknown input %q", cmd)
	}
	if err != nil {
		return nil, err
	}
	m := r.machine()
	var out []string
	for _, e := range m.Step(r.now, in) {
		out = append(out, r.format(e))
	}
	return append(out, r.state()), nil
}

func (r *coordinatorRunner) configure(k, v string) error {
	if k == "bug" {
		return ParseBug(v, &r.s.Bugs)
	}
	if n, err := strconv.Atoi(v); err == nil {
		switch k {
		case "max-rebalance":
			r.s.MaxSimultaneousRebalance = n
			return nil
		case "threshold":
			r.s.RebalanceThreshold = n
			return nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("config %s=%s: %w", k, v, err)
	}
	switch k {
	case "margin":
		r.s.DownRemovalMargin = d
	case "retry":
		r.s.RetryInterval = d
	default:
		return fmt.Errorf("unknown config %q", k)
	}
	return nil
}

func (r *coordinatorRunner) view(members []string) (cluster.Snapshot, error) {
	r.ver++
	snap := cluster.Snapshot{Version: r.ver}
	for i, spec := range members {
		pm, err := transcript.ParseMember(spec)
		if err != nil {
			return snap, err
		}
		ms := cluster.MemberState{Member: cluster.Member{Name: pm.Name, Incarnation: pm.Incarnation, UpNumber: pm.UpNumber},
			Status: cluster.Status(pm.Status), Reachable: true}
		if ms.Status.Final() {
			snap.Gone = append(snap.Gone, ms)
		} else {
			snap.Members = append(snap.Members, ms)
		}
		if i == 0 {
			snap.Self = ms
		}
	}
	return snap, nil
}

func (r *coordinatorRunner) format(e CoEffect) string {
	switch e := e.(type) {
	case CoAppend:
		r.last["append"] = e.Tag
		evs := make([]string, len(e.Events))
		for i, ev := range e.Events {
			evs[i] = ev.Type + "(" + strings.Trim(ev.Region+" "+ev.Shard, " ") + ")"
		}
		return fmt.Sprintf("append tag=%d expect=%d epoch=%d %s", e.Tag, e.ExpectSeq, e.Epoch, strings.Join(evs, " "))
	case CoCheckHighest:
		r.last["check-highest"] = e.Tag
		return fmt.Sprintf("check-highest tag=%d", e.Tag)
	case CoCall:
		r.last["call"] = e.Tag
		return fmt.Sprintf("call tag=%d %s %s at %s within %v", e.Tag, e.Op, e.Shard, e.Region, e.Timeout)
	case CoArm:
		r.last["arm"] = e.Tag
		return fmt.Sprintf("arm tag=%d %v", e.Tag, e.After)
	case CoAnswer:
		if e.Err != nil {
			return fmt.Sprintf("answer %d error %q", e.ID, e.Err.Error())
		}
		b, _ := json.Marshal(e.Reply)
		return fmt.Sprintf("answer %d %s", e.ID, b)
	case CoEmit:
		s := "event " + e.Event.Type + " " + e.Event.Member
		if e.Event.Shard != "" {
			s += " shard=" + e.Event.Shard
		}
		if e.Event.Detail != "" {
			s += fmt.Sprintf(" %q", e.Event.Detail)
		}
		return s
	}
	return fmt.Sprintf("%T", e)
}

// state sums up the machine: the allocation table, what is in progress,
// the journal position, and whether it is broken.
func (r *coordinatorRunner) state() string {
	m := r.m
	var parts []string
	alloc := m.st.Allocations(nil)
	for _, region := range slices.Sorted(func(yield func(string) bool) {
		for k := range alloc {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, region+"["+strings.Join(alloc[region], ",")+"]")
	}
	st := m.State()
	if len(st.Proxies) > 0 {
		parts = append(parts, "proxies="+strings.Join(st.Proxies, ","))
	}
	if len(st.Rebalancing) > 0 {
		parts = append(parts, "rebalancing="+strings.Join(st.Rebalancing, ","))
	}
	if len(st.ShuttingDown) > 0 {
		parts = append(parts, "shutting-down="+strings.Join(st.ShuttingDown, ","))
	}
	var hosting []string
	for sh := range m.hosting {
		hosting = append(hosting, sh)
	}
	if len(hosting) > 0 {
		slices.Sort(hosting)
		parts = append(parts, "hosting="+strings.Join(hosting, ","))
	}
	if n := len(m.writes); n > 0 {
		parts = append(parts, fmt.Sprintf("%d writes waiting", n))
	}
	parts = append(parts, fmt.Sprintf("seq=%d", m.seq))
	if m.broken != nil {
		parts = append(parts, "broken")
	}
	if m.stopped {
		parts = append(parts, "stopped")
	}
	return "state " + strings.Join(parts, " ")
}

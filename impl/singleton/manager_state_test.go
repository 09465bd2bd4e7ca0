package singleton

import (
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
)

// TestManagerTranscripts replays the transcripts in testdata/manager: each
// block is one input to a ManagerState, then "----", then the effects it
// must give and the state it is left in. Inputs:
//
//	config retry=1s margin=2s stop=10s hand-over-retries=15 take-over-retries=10
//	time 5s                      the Elapsed reading of the steps that follow
//	view self=n2 n1:up n2:up n3@b#7:leaving n4:down
//	                             members name[@incarnation][#up-number]:status;
//	                             incarnation "a" and up-number from the name by
//	                             default; down and removed members are gone
//	message hand-over-to-me from=n1@a
//	result hand-over-to-me to=n1@a said=done|in-progress [gen=N] [err=why]
//	                             gen defaults to that of the last such send
//	state-timer | stop-timer | instance-done [err=why] | shutdown
func TestManagerTranscripts(t *testing.T) {
	transcript.Run(t, filepath.Join("testdata", "manager"), func() func(string) ([]string, error) {
		return newTranscriptRunner().step
	})
}

type transcriptRunner struct {
	cfg     Config
	m       *ManagerState
	now     time.Duration
	version uint64
	sent    map[string]uint64 // op+" "+to → gen of the last such Send
}

func newTranscriptRunner() *transcriptRunner {
	return &transcriptRunner{sent: map[string]uint64{}}
}

func (r *transcriptRunner) machine() (*ManagerState, error) {
	if r.m == nil {
		if r.cfg.Name == "" {
			r.cfg.Name = "id-generator"
		}
		if err := r.cfg.normalize(); err != nil {
			return nil, err
		}
		r.m = NewManagerState(r.cfg, nil)
	}
	return r.m, nil
}

func (r *transcriptRunner) step(input string) ([]string, error) {
	cmd, args, plain := transcript.Args(input)
	var in Input
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
		snap, err := r.snapshot(args["self"], plain)
		if err != nil {
			return nil, err
		}
		in = InView{Snapshot: snap}
	case "message":
		if len(plain) != 1 || args["from"] == "" {
			return nil, errors.New("want: message OP from=UID")
		}
		in = InMessage{Op: plain[0], From: args["from"]}
	case "result":
		if len(plain) != 1 || args["to"] == "" {
			return nil, errors.New("want: result OP to=UID said=ANSWER [gen=N] [err=WHY]")
		}
		res := InResult{Op: plain[0], To: args["to"], Said: args["said"], Gen: r.sent[plain[0]+" "+args["to"]]}
		if g, ok := args["gen"]; ok {
			n, err := strconv.ParseUint(g, 10, 64)
			if err != nil {
				return nil, err
			}
			res.Gen = n
		}
		if e := args["err"]; e != "" {
			res.Err = errors.New(e)
		}
		in = res
	case "state-timer":
		in = InStateTimer{}
	case "stop-timer":
		in = InStopTimer{}
	case "instance-done":
		var err error
		if e := args["err"]; e != "" {
			err = errors.New(e)
		}
		in = InInstanceDone{Err: err}
	case "shutdown":
		in = InShutdown{}
	default:
		return nil, fmt.Errorf("unknown input %q", cmd)
	}
	m, err := r.machine()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range m.Step(r.now, in) {
		if s, ok := e.(Send); ok {
			r.sent[s.Op+" "+s.To] = s.Gen
		}
		out = append(out, e.String())
	}
	st := m.Status()
	line := "state " + string(st.State)
	if st.Partner != "" {
		line += " partner=" + st.Partner
	}
	if st.Retries > 0 {
		line += fmt.Sprintf(" retries=%d", st.Retries)
	}
	if m.Running() {
		line += " instance"
	}
	return append(out, line), nil
}

func (r *transcriptRunner) configure(k, v string) error {
	if n, err := strconv.Atoi(v); err == nil {
		switch k {
		case "hand-over-retries":
			r.cfg.MaxHandOverRetries = n
			return nil
		case "take-over-retries":
			r.cfg.MaxTakeOverRetries = n
			return nil
		}
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("config %s=%s: %w", k, v, err)
	}
	switch k {
	case "retry":
		r.cfg.RetryInterval = d
	case "margin":
		r.cfg.DownRemovalMargin = d
	case "stop":
		r.cfg.StopTimeout = d
	default:
		return fmt.Errorf("unknown config %q", k)
	}
	return nil
}

// snapshot builds a view from members name[@incarnation][#up]:status.
func (r *transcriptRunner) snapshot(self string, members []string) (cluster.Snapshot, error) {
	r.version++
	snap := cluster.Snapshot{Version: r.version}
	foundSelf := false
	for _, spec := range members {
		m, err := transcript.ParseMember(spec)
		if err != nil {
			return snap, err
		}
		name := m.Name
		ms := cluster.MemberState{Member: cluster.Member{Name: name, Incarnation: m.Incarnation, UpNumber: m.UpNumber}, Status: cluster.Status(m.Status), Reachable: true}
		if ms.Status.Final() {
			snap.Gone = append(snap.Gone, ms)
		} else {
			snap.Members = append(snap.Members, ms)
		}
		if name == self && !foundSelf {
			snap.Self, foundSelf = ms, true
		}
	}
	if !foundSelf {
		return snap, fmt.Errorf("self %q is not among the members", self)
	}
	slices.SortFunc(snap.Members, func(a, b cluster.MemberState) int {
		if a.IsOlderThan(b.Member) {
			return -1
		}
		return 1
	})
	return snap, nil
}

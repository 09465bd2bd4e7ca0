package cluster

import (
	"encoding/json"
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

// TestMembershipTranscripts replays testdata/membership: several members'
// MembershipStates, stepped by hand over a little network of FIFO links
// with one-way cuts. Member nX has gossip address nX:7946 and incarnation
// "a" unless given. Inputs:
//
//	config failure-timeout=2s seed-timeout=3s down-notice=15s max-gone=N blind=true
//	       strategy=keep-majority stable-after=5s [down-all-when-unstable= quorum= down-if-alone= auto-down-after=]
//	                        the MembershipConfig of the members created after
//	time 5s                 the time of the steps that follow
//	node n1[@inc] [up=N] [seeds=n1,n2] [join-only] [previous=n1@a,n2@a:down]
//	                        a new member (bound; with up=N also started and
//	                        given up-number N); a new incarnation replaces
//	                        the member of that name on the network; previous
//	                        is MembershipConfig.Previous's members
//	n1 start | up-number N | up-number err=why | join-tick | join-result answered=N [err=why]
//	n1 tick | down n3 | begin-leave | finish-leave | transport-left | farewell
//	n1 rejoin-tick [alive=n2,n3]
//	                        step the input; print the effects
//	n1 exchange n2          a push/pull (join) between n1 and n2: each meets
//	                        the other and merges the other's LocalState (n2's
//	                        taken before it met n1, as memberlist answers)
//	n1 view                 the records n1 holds, oldest first, and its
//	                        failure detector's verdicts
//	n1 fresh                whether n1 is fresh at this time
//	cut n3->n1 | cut n3->*  drop datagrams that way (a stream, a push, needs
//	                        both ways); heal [n3->n1] undoes cuts
//	freeze n3 | thaw n3     a frozen member neither ticks nor reads: what
//	                        is sent to it waits
//	deliver [n1->n2]        deliver what waits on the links (all, in the
//	                        order sent, and what that sends in turn), and
//	                        print the receivers' effects
//	run to=10s every=1s     until to: advance every, tick each member not
//	                        frozen (by name), deliver; prints "at T" and
//	                        every effect but plain heartbeats
//
// Datagrams and pushes a member sends go on the links, marked "(lost)"
// when cut.
func TestMembershipTranscripts(t *testing.T) {
	transcript.Run(t, filepath.Join("testdata", "membership"), func() func(string) ([]string, error) {
		return newMemberNet().step
	})
}

type memberNet struct {
	cfg    MembershipConfig
	now    time.Duration
	nodes  map[string]*netNode // by name
	cuts   map[[2]string]bool  // from, to names ("*": any)
	queue  []packet
	quiet  bool // run: no plain heartbeats
	output []string
}

type netNode struct {
	name   string
	m      *MembershipState
	frozen bool
}

type packet struct {
	from, to string // names
	eff      Effect // SendDatagram or PushState
}

func newMemberNet() *memberNet {
	return &memberNet{
		cfg: MembershipConfig{
			FailureTimeout: 2 * time.Second, SeedTimeout: 3 * time.Second, DownNoticeFor: 15 * time.Second, MaxGone: 1000,
			Downing: DowningConfig{Strategy: KeepMajority, StableAfter: 5 * time.Second},
		},
		nodes: map[string]*netNode{},
		cuts:  map[[2]string]bool{},
	}
}

func addrOf(name string) string { return name + ":7946" }

func nameOf(addr string) string { n, _, _ := strings.Cut(addr, ":"); return n }

func (n *memberNet) say(format string, args ...any) {
	n.output = append(n.output, fmt.Sprintf(format, args...))
}

func (n *memberNet) step(input string) ([]string, error) {
	n.output = nil
	cmd, kv, plain := transcript.Args(input)
	var err error
	if node, ok := n.nodes[cmd]; ok {
		err = n.nodeStep(node, kv, plain)
	} else {
		err = n.command(cmd, kv, plain)
	}
	return n.output, err
}

func (n *memberNet) command(cmd string, kv map[string]string, plain []string) error {
	switch cmd {
	case "config":
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			if err := n.configure(k, kv[k]); err != nil {
				return err
			}
		}
		return n.cfg.Downing.Validate()
	case "time":
		d, err := time.ParseDuration(strings.Join(plain, ""))
		n.now = d
		return err
	case "node":
		return n.newNode(kv, plain)
	case "cut", "heal":
		if cmd == "heal" && len(plain) == 0 {
			clear(n.cuts)
			return nil
		}
		if len(plain) != 1 {
			return fmt.Errorf("want: %s FROM->TO", cmd)
		}
		from, to, ok := strings.Cut(plain[0], "->")
		if !ok {
			return fmt.Errorf("want: %s FROM->TO", cmd)
		}
		if cmd == "cut" {
			n.cuts[[2]string{from, to}] = true
		} else {
			delete(n.cuts, [2]string{from, to})
		}
		return nil
	case "freeze", "thaw":
		if len(plain) != 1 || n.nodes[plain[0]] == nil {
			return fmt.Errorf("want: %s NODE", cmd)
		}
		n.nodes[plain[0]].frozen = cmd == "freeze"
		return nil
	case "deliver":
		link := [2]string{}
		if len(plain) == 1 {
			from, to, ok := strings.Cut(plain[0], "->")
			if !ok {
				return errors.New("want: deliver [FROM->TO]")
			}
			link = [2]string{from, to}
		}
		n.deliver(link)
		return nil
	case "run":
		to, err := time.ParseDuration(kv["to"])
		if err != nil {
			return fmt.Errorf("run to=: %w", err)
		}
		every, err := time.ParseDuration(kv["every"])
		if err != nil || every <= 0 {
			return fmt.Errorf("run every=: %v", err)
		}
		n.quiet = true
		defer func() { n.quiet = false }()
		for n.now+every <= to {
			n.now += every
			n.say("at %v", n.now)
			for _, name := range slices.Sorted(maps.Keys(n.nodes)) {
				if nd := n.nodes[name]; !nd.frozen {
					n.effects(nd, nd.m.Step(n.now, InTick{}))
				}
			}
			n.deliver([2]string{})
		}
		return nil
	}
	return fmt.Errorf("unknown input %q", cmd)
}

func (n *memberNet) configure(k, v string) error {
	var err error
	switch k {
	case "failure-timeout":
		n.cfg.FailureTimeout, err = time.ParseDuration(v)
	case "seed-timeout":
		n.cfg.SeedTimeout, err = time.ParseDuration(v)
	case "down-notice":
		n.cfg.DownNoticeFor, err = time.ParseDuration(v)
	case "max-gone":
		n.cfg.MaxGone, err = strconv.Atoi(v)
	case "blind":
		n.cfg.BlindToOneWay, err = strconv.ParseBool(v)
	case "auto-down-after":
		n.cfg.Downing.AutoDownAfter, err = time.ParseDuration(v)
		n.cfg.Downing.AllowUnsafeAutoDown = true
	default:
		return configureDowning(&n.cfg.Downing, k, v)
	}
	if err != nil {
		return fmt.Errorf("config %s=%s: %w", k, v, err)
	}
	return nil
}

func (n *memberNet) newNode(kv map[string]string, plain []string) error {
	if len(plain) < 1 {
		return errors.New("want: node NAME[@INC] [up=N] [seeds=...] [join-only]")
	}
	name, inc, ok := strings.Cut(plain[0], "@")
	if !ok {
		inc = "a"
	}
	cfg := n.cfg
	cfg.Seeds = nil
	if s := kv["seeds"]; s != "" {
		for _, sn := range strings.Split(s, ",") {
			cfg.Seeds = append(cfg.Seeds, addrOf(sn))
		}
	}
	cfg.JoinOnly = slices.Contains(plain[1:], "join-only")
	if p := kv["previous"]; p != "" {
		cfg.Previous = &Snapshot{}
		for _, spec := range strings.Split(p, ",") {
			pm, err := transcript.ParseMember(spec)
			if err != nil {
				return err
			}
			cfg.Previous.Members = append(cfg.Previous.Members, MemberState{
				Member: Member{Name: pm.Name, Incarnation: pm.Incarnation, UpNumber: pm.UpNumber, GossipAddr: addrOf(pm.Name)},
				Status: Status(pm.Status),
			})
		}
	}
	nd := &netNode{name: name, m: NewMembershipState(cfg, Member{Name: name, Incarnation: inc, HTTPAddr: name + ":8080"})}
	n.nodes[name] = nd
	n.effects(nd, nd.m.Step(n.now, InBound{Addr: addrOf(name)}))
	if up, ok := kv["up"]; ok {
		num, err := strconv.ParseInt(up, 10, 64)
		if err != nil {
			return fmt.Errorf("up=%s: %w", up, err)
		}
		n.effects(nd, nd.m.Step(n.now, InStart{}))
		n.effects(nd, nd.m.Step(n.now, InUpNumber{UpNumber: num}))
	}
	return nil
}

// uidOf reads a member as NAME (its current incarnation) or a UID.
func (n *memberNet) uidOf(s string) string {
	if strings.Contains(s, "@") {
		return s
	}
	if nd := n.nodes[s]; nd != nil {
		return nd.m.Self().UID()
	}
	return s
}

func (n *memberNet) nodeStep(nd *netNode, kv map[string]string, plain []string) error {
	if len(plain) == 0 {
		return errors.New("want: NODE OP ...")
	}
	op, args := plain[0], plain[1:]
	var in Input
	switch op {
	case "start":
		in = InStart{}
	case "up-number":
		res := InUpNumber{}
		if e := kv["err"]; e != "" {
			res.Err = errors.New(e)
		} else if len(args) == 1 {
			num, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return err
			}
			res.UpNumber = num
		}
		in = res
	case "join-tick":
		in = InJoinTick{}
	case "join-result":
		res := InJoinResult{}
		if a := kv["answered"]; a != "" {
			num, err := strconv.Atoi(a)
			if err != nil {
				return err
			}
			res.Answered = num
		}
		if e := kv["err"]; e != "" {
			res.Err = errors.New(e)
		}
		in = res
	case "tick":
		in = InTick{}
	case "down":
		if len(args) != 1 {
			return errors.New("want: NODE down MEMBER")
		}
		in = InDown{UID: n.uidOf(args[0])}
	case "begin-leave":
		in = InBeginLeave{}
	case "finish-leave":
		in = InFinishLeave{}
	case "transport-left":
		in = InTransportLeft{}
	case "farewell":
		in = InFarewell{}
	case "rejoin-tick":
		var alive []string
		if a := kv["alive"]; a != "" {
			for _, s := range strings.Split(a, ",") {
				alive = append(alive, addrOf(s))
			}
		}
		in = InRejoinTick{Alive: alive}
	case "exchange":
		if len(args) != 1 || n.nodes[args[0]] == nil {
			return errors.New("want: NODE exchange NODE")
		}
		n.exchange(nd, n.nodes[args[0]])
		return nil
	case "view":
		n.view(nd)
		return nil
	case "fresh":
		if nd.m.Fresh(n.now) {
			n.say("%s: fresh", nd.name)
		} else {
			n.say("%s: not fresh", nd.name)
		}
		return nil
	default:
		return fmt.Errorf("unknown op %q", op)
	}
	n.effects(nd, nd.m.Step(n.now, in))
	return nil
}

func (n *memberNet) cut(from, to string) bool {
	return n.cuts[[2]string{from, to}] || n.cuts[[2]string{from, "*"}] || n.cuts[[2]string{"*", to}]
}

// effects prints what a member asks for and puts its datagrams and pushes
// on the links.
func (n *memberNet) effects(nd *netNode, effs []Effect) {
	for _, e := range effs {
		line := e.String()
		var to string
		switch e := e.(type) {
		case SendDatagram:
			to = nameOf(e.To)
		case PushState:
			to = nameOf(e.To)
		}
		if to != "" {
			_, stream := e.(PushState)
			switch {
			case n.nodes[to] == nil:
				line += " (nobody there)"
			case n.cut(nd.name, to) || stream && n.cut(to, nd.name):
				line += " (lost)"
			default:
				n.queue = append(n.queue, packet{from: nd.name, to: to, eff: e})
			}
			if sd, ok := e.(SendDatagram); ok && sd.DownNotice == "" && n.quiet {
				continue
			}
		}
		n.say("%s: %s", nd.name, line)
	}
}

// deliver delivers what waits on link (all links if empty) to members not
// frozen, in the order sent, and what that sends in turn.
func (n *memberNet) deliver(link [2]string) {
	for {
		i := slices.IndexFunc(n.queue, func(p packet) bool {
			return (link[0] == "" || p.from == link[0] && p.to == link[1]) && n.nodes[p.to] != nil && !n.nodes[p.to].frozen
		})
		if i < 0 {
			return
		}
		p := n.queue[i]
		n.queue = slices.Delete(n.queue, i, i+1)
		nd := n.nodes[p.to]
		var msg []byte
		switch e := p.eff.(type) {
		case SendDatagram:
			msg = e.Msg
		case PushState:
			msg = e.Msg
		}
		n.effects(nd, nd.m.Step(n.now, InReceived{Msg: msg}))
	}
}

// exchange is a memberlist push/pull from a to b: b reads a's state, answers
// with its own (taken before it meets a), then meets a and merges a's
// state; a meets b and merges b's answer.
func (n *memberNet) exchange(a, b *netNode) {
	if n.cut(a.name, b.name) || n.cut(b.name, a.name) {
		n.say("%s: exchange with %s failed", a.name, b.name)
		return
	}
	aState, bState := a.m.LocalState(true), b.m.LocalState(true)
	n.effects(b, b.m.Step(n.now, InMet{Meta: a.m.Meta()}))
	n.effects(b, b.m.Step(n.now, InRemoteState{State: aState, Join: true}))
	n.effects(a, a.m.Step(n.now, InMet{Meta: b.m.Meta()}))
	n.effects(a, a.m.Step(n.now, InRemoteState{State: bState, Join: true}))
}

// view prints the records a member holds, oldest first.
func (n *memberNet) view(nd *netNode) {
	m := nd.m
	if !m.Joined() {
		n.say("%s: not joined", nd.name)
	}
	recs := m.state.records()
	slices.SortFunc(recs, func(a, b *record) int {
		if a.Member.IsOlderThan(b.Member) {
			return -1
		}
		return 1
	})
	for _, r := range recs {
		uid := r.Member.UID()
		line := fmt.Sprintf("%s: %s %s", nd.name, r.Member, r.Status)
		switch {
		case uid == m.self.UID():
			line += " self"
		case r.Status.Final():
		case m.reachable[uid]:
			line += " reachable"
		default:
			if _, judged := m.reachable[uid]; judged {
				line += " unreachable"
			} else {
				line += " not judged yet"
			}
		}
		if r.ObsVersion > 0 {
			line += fmt.Sprintf(" ov=%d u=%s", r.ObsVersion, uidList(r.Unreachable))
		}
		if r.DownReason != "" {
			b, _ := json.Marshal(r.DownReason)
			line += " reason=" + string(b)
		}
		n.say("%s", line)
	}
}

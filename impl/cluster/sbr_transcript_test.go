package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/internal/transcript"
)

// TestResolverTranscripts replays testdata/resolver: one member's
// split-brain resolver, tick by tick. Inputs:
//
//	config strategy=keep-majority stable-after=5s [down-all-when-unstable=10s] [quorum=2] [down-if-alone=true]
//	time 5s               the Elapsed reading of the ticks that follow
//	tick self=n1 n1 n2 n3! n4:leaving n2/n3,n4
//	                      members name[@incarnation][#up-number][:status], "!"
//	                      when self does not reach it (incarnation "a", the
//	                      up-number from the name, status up by default);
//	                      observer/subject,... are gossiped observations
//
// Each member has a resolver of its own. A tick prints what the member finds (unreachable, indirectly connected,
// its side's leader) and the decision it takes, if any.
func TestResolverTranscripts(t *testing.T) {
	transcript.Run(t, filepath.Join("testdata", "resolver"), func() func(string) ([]string, error) {
		var (
			cfg DowningConfig
			now time.Duration
			// Each member's resolver has a memory of its own.
			resolvers = map[string]*resolver{}
		)
		return func(input string) ([]string, error) {
			cmd, kv, plain := transcript.Args(input)
			switch cmd {
			case "config":
				for k, v := range kv {
					if err := configureDowning(&cfg, k, v); err != nil {
						return nil, err
					}
				}
				return nil, cfg.Validate()
			case "time":
				d, err := time.ParseDuration(strings.Join(plain, ""))
				now = d
				return nil, err
			case "tick":
				v, err := transcriptView(kv["self"], plain)
				if err != nil {
					return nil, err
				}
				unreachable, indirect := v.problem()
				out := []string{fmt.Sprintf("unreachable %s; indirect %s; leader %s", list(unreachable), list(indirect), v.leader())}
				r := resolvers[v.self]
				if r == nil {
					r = &resolver{}
					resolvers[v.self] = r
				}
				if d := r.step(cfg, now, v); !d.empty() {
					out = append(out, fmt.Sprintf("down %s: %s", strings.Join(d.down, ","), d.reason))
				}
				return out, nil
			}
			return nil, fmt.Errorf("unknown input %q", cmd)
		}
	})
}

func list(uids []string) string {
	if len(uids) == 0 {
		return "none"
	}
	return strings.Join(uids, ",")
}

func configureDowning(cfg *DowningConfig, k, v string) error {
	var err error
	switch k {
	case "strategy":
		cfg.Strategy = v
	case "stable-after":
		cfg.StableAfter, err = time.ParseDuration(v)
	case "down-all-when-unstable":
		cfg.DownAllWhenUnstable, err = time.ParseDuration(v)
	case "quorum":
		cfg.QuorumSize, err = strconv.Atoi(v)
	case "down-if-alone":
		cfg.DownIfAlone, err = strconv.ParseBool(v)
	default:
		err = errors.New("unknown setting")
	}
	if err != nil {
		return fmt.Errorf("config %s=%s: %w", k, v, err)
	}
	return nil
}

// transcriptView builds the view of self from member and observation words.
func transcriptView(self string, words []string) (view, error) {
	v := view{observations: map[string][]string{}}
	uid := map[string]string{} // name → uid
	var observations [][2]string
	for _, w := range words {
		if observer, subjects, ok := strings.Cut(w, "/"); ok {
			observations = append(observations, [2]string{observer, subjects})
			continue
		}
		spec, err := transcript.ParseMember(w)
		if err != nil {
			return v, err
		}
		name := spec.Name
		m := MemberState{Member: Member{Name: name, Incarnation: spec.Incarnation, UpNumber: spec.UpNumber}, Status: Status(spec.Status), Reachable: !spec.Marked}
		v.members = append(v.members, m)
		uid[name] = m.UID()
		if name == self {
			v.self = m.UID()
		}
	}
	if v.self == "" {
		return v, fmt.Errorf("self %q is not among the members", self)
	}
	for _, o := range observations {
		ou, ok := uid[o[0]]
		if !ok {
			return v, fmt.Errorf("observer %q is not a member", o[0])
		}
		for _, s := range strings.Split(o[1], ",") {
			su, ok := uid[s]
			if !ok {
				return v, fmt.Errorf("subject %q is not a member", s)
			}
			v.observations[ou] = append(v.observations[ou], su)
		}
	}
	return v, nil
}

package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/protocol/kit"
)

func TestDeriveSettings(t *testing.T) {
	base := func() (kit.Config, flags) {
		return kit.Config{Name: "n2", HTTP: "0.0.0.0:7500", GossipBind: "10.0.0.12", GossipPort: 7946,
				Seeds: []string{"10.0.0.11:7946", "10.0.0.12:7946", "10.0.0.13:7946"}},
			flags{clientPort: 2379, forwardPort: 7947, sessionTTL: 5, writes: writesUnguarded, dataDir: "/d", etcdLog: "info"}
	}
	tests := []struct {
		name    string
		edit    func(*kit.Config, *flags)
		wantErr string
		check   func(t *testing.T, s settings)
	}{
		{name: "a joining member asks the other seeds", check: func(t *testing.T, s settings) {
			if s.Bootstrap {
				t.Error("n2 is not the first seed, yet bootstraps")
			}
			want := []string{"http://10.0.0.11:2379", "http://10.0.0.13:2379"}
			if !slices.Equal(s.JoinEndpoints, want) {
				t.Errorf("join endpoints %v, want %v", s.JoinEndpoints, want)
			}
			if s.PeerURL().String() != "http://10.0.0.12:7946" || s.ClientURL().String() != "http://10.0.0.12:2379" || s.ForwardAddr() != "10.0.0.12:7947" {
				t.Errorf("urls %s %s %s", s.PeerURL(), s.ClientURL(), s.ForwardAddr())
			}
			if s.Fenced || !s.StepDownWaits || s.Writes != writesUnguarded {
				t.Errorf("unguarded writes: fenced %v, step-down waits %v, writes %q", s.Fenced, s.StepDownWaits, s.Writes)
			}
		}},
		{name: "the first seed bootstraps", edit: func(c *kit.Config, f *flags) { c.GossipBind = "10.0.0.11"; f.writes = writesFenced },
			check: func(t *testing.T, s settings) {
				if !s.Bootstrap || !s.Fenced || !s.StepDownWaits {
					t.Errorf("bootstrap %v fenced %v step-down waits %v, want all", s.Bootstrap, s.Fenced, s.StepDownWaits)
				}
			}},
		{name: "checked writes step down at once", edit: func(_ *kit.Config, f *flags) { f.writes = writesChecked },
			check: func(t *testing.T, s settings) {
				if s.Fenced || s.StepDownWaits {
					t.Errorf("checked: fenced %v step-down waits %v, want neither", s.Fenced, s.StepDownWaits)
				}
			}},
		{name: "no seeds: a cluster of one", edit: func(c *kit.Config, _ *flags) { c.Seeds = nil },
			check: func(t *testing.T, s settings) {
				if !s.Bootstrap || len(s.JoinEndpoints) != 0 {
					t.Errorf("bootstrap %v endpoints %v", s.Bootstrap, s.JoinEndpoints)
				}
			}},
		{name: "the suggested port is the default", edit: func(c *kit.Config, _ *flags) { c.GossipPort = 0 },
			check: func(t *testing.T, s settings) {
				if s.PeerPort != defaultPeerPort {
					t.Errorf("peer port %d", s.PeerPort)
				}
			}},
		{name: "no bind IP", edit: func(c *kit.Config, _ *flags) { c.GossipBind = "" }, wantErr: "SHARDTEST_GOSSIP_BIND is required"},
		{name: "bind is a name", edit: func(c *kit.Config, _ *flags) { c.GossipBind = "node1" }, wantErr: "want an IP"},
		{name: "seed is a name", edit: func(c *kit.Config, _ *flags) { c.Seeds = []string{"node1:7946"} }, wantErr: "not a host name"},
		{name: "unknown writes", edit: func(_ *kit.Config, f *flags) { f.writes = "careful" }, wantErr: `--writes "careful"`},
		{name: "client port clashes", edit: func(_ *kit.Config, f *flags) { f.clientPort = 7946 }, wantErr: "--client-port 7946 is also the peer port"},
		{name: "forward port clashes", edit: func(_ *kit.Config, f *flags) { f.forwardPort = 2379 }, wantErr: "--forward-port 2379 is also --client-port"},
		{name: "port out of range", edit: func(_ *kit.Config, f *flags) { f.forwardPort = 70000 }, wantErr: "want 1 to 65535"},
		{name: "ttl too short", edit: func(_ *kit.Config, f *flags) { f.sessionTTL = 1 }, wantErr: "--session-ttl 1"},
		{name: "bad etcd log level", edit: func(_ *kit.Config, f *flags) { f.etcdLog = "loud" }, wantErr: "--etcd-log"},
		{name: "no data dir", edit: func(_ *kit.Config, f *flags) { f.dataDir = "" }, wantErr: "--data-dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, f := base()
			if tt.edit != nil {
				tt.edit(&cfg, &f)
			}
			s, err := deriveSettings(cfg, f)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s)
		})
	}
}

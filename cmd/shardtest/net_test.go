package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/nemesis/nftables/netnstest"
)

// runNet runs `shardtest net ARGS` inside ns, never the host's namespace,
// and returns its standard output.
func runNet(t *testing.T, ns *netnstest.NS, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := ns.Do(func() error {
		cmd := newRootCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append([]string{"net"}, args...))
		return cmd.ExecuteContext(context.Background())
	})
	return out.String(), err
}

const emptyShow = `{"drop_in":[],"drop_out":[],"loss_percent":0,"loss_peers":[]}` + "\n"

// Bad input to net apply fails with a message saying what is wrong, and
// leaves the rules as they were.
func TestNetApplyRefusesBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--drop-in", "10.0.0.300"}, `--drop-in "10.0.0.300": not an IP address`},
		{[]string{"--drop-out", "10.0.0.2,"}, "--drop-out: empty address"},
		{[]string{"--drop-in", "fd00::1"}, "fd00::1: not an IPv4 address"},
		{[]string{"--drop-in", "10.0.0.2", "--drop-in", "10.0.0.2"}, "10.0.0.2: listed twice"},
		{[]string{"--loss", "101", "--loss-peers", "10.0.0.2"}, "loss percent 101: want 0..100"},
		{[]string{"--loss", "10"}, "without loss peers"},
		{[]string{"--loss-peers", "10.0.0.2"}, "loss peers without a loss percent"},
		{[]string{"--loss", "ten"}, `invalid argument "ten"`},
		{[]string{"10.0.0.2"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			ns := netnstest.New(t)
			if _, err := runNet(t, ns, "apply", "--drop-in", "10.0.0.9"); err != nil {
				t.Fatal(err)
			}
			_, err := runNet(t, ns, append([]string{"apply"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
			got, err := runNet(t, ns, "show")
			if err != nil {
				t.Fatal(err)
			}
			if want := `{"drop_in":["10.0.0.9"],"drop_out":[],"loss_percent":0,"loss_peers":[]}` + "\n"; got != want {
				t.Fatalf("after the refused apply, show = %q, want %q", got, want)
			}
		})
	}
}

// apply, show and heal, in order, print what the kernel holds.
func TestNetApplyShowHeal(t *testing.T) {
	ns := netnstest.New(t)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"show"}, emptyShow},
		{[]string{"apply", "--drop-in", "10.0.0.3,10.0.0.4", "--drop-out", "10.0.0.3"},
			"table inet shardtest: drop in from 10.0.0.3,10.0.0.4; drop out to 10.0.0.3\n"},
		{[]string{"show"}, `{"drop_in":["10.0.0.3","10.0.0.4"],"drop_out":["10.0.0.3"],"loss_percent":0,"loss_peers":[]}` + "\n"},
		{[]string{"apply", "--loss", "20", "--loss-peers", "10.0.0.5", "--loss-peers", "10.0.0.6"},
			"table inet shardtest: lose 20% to and from 10.0.0.5,10.0.0.6\n"},
		{[]string{"show"}, `{"drop_in":[],"drop_out":[],"loss_percent":20,"loss_peers":["10.0.0.5","10.0.0.6"]}` + "\n"},
		{[]string{"heal"}, "table inet shardtest removed: nothing dropped\n"},
		{[]string{"show"}, emptyShow},
		{[]string{"heal"}, "table inet shardtest removed: nothing dropped\n"},
		{[]string{"apply", "--drop-out", "10.0.0.7"}, "table inet shardtest: drop out to 10.0.0.7\n"},
		{[]string{"apply"}, "table inet shardtest removed: nothing dropped\n"},
		{[]string{"show"}, emptyShow},
	}
	for _, s := range steps {
		got, err := runNet(t, ns, s.args...)
		if err != nil {
			t.Fatalf("net %s: %v", strings.Join(s.args, " "), err)
		}
		if got != s.want {
			t.Fatalf("net %s printed %q, want %q", strings.Join(s.args, " "), got, s.want)
		}
	}
}

// net dial connects through an open path and fails through a cut one.
func TestNetDial(t *testing.T) {
	ns := netnstest.New(t)
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	addr := ln.Addr().String()
	steps := []struct {
		args    []string
		want    string // stdout on success
		wantErr string
	}{
		{args: []string{"dial", addr}, want: "connected\n"},
		{args: []string{"apply", "--drop-out", "127.0.0.1"}, want: "table inet shardtest: drop out to 127.0.0.1\n"},
		{args: []string{"dial", addr, "--timeout", "300ms"}, wantErr: "net dial: dial tcp " + addr},
		{args: []string{"heal"}, want: "table inet shardtest removed: nothing dropped\n"},
		{args: []string{"dial", addr, "--timeout", "300ms"}, want: "connected\n"},
		{args: []string{"dial", "127.0.0.1"}, wantErr: "not host:port"},
		{args: []string{"dial", addr, "--timeout", "0s"}, wantErr: "--timeout 0s: want a positive duration"},
		{args: []string{"dial"}, wantErr: "accepts 1 arg"},
	}
	for _, s := range steps {
		got, err := runNet(t, ns, s.args...)
		name := "net " + strings.Join(s.args, " ")
		switch {
		case s.wantErr == "" && err != nil:
			t.Fatalf("%s: %v", name, err)
		case s.wantErr == "" && got != s.want:
			t.Fatalf("%s printed %q, want %q", name, got, s.want)
		case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
			t.Fatalf("%s: err = %v, want one mentioning %q", name, err, s.wantErr)
		}
	}
}

// The help says where the command runs and what it never cuts.
func TestNetHelp(t *testing.T) {
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"net", "--help"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"docker exec", "CAP_NET_ADMIN", "bridge gateway", "apply", "heal", "show", "dial"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("net --help does not mention %q", want)
		}
	}
}

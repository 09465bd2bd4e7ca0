package nftables

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	nft "github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/shardtest/shardtest/nemesis/nftables/netnstest"
)

// These tests install real rules, always in a fresh network namespace of
// their own, never the host's.

// Apply replaces the table, Current reads back exactly what was applied,
// bad rules change nothing, and Heal leaves nothing behind.
func TestApplyCurrentHeal(t *testing.T) {
	ns := netnstest.New(t)
	tbl := New(nft.WithNetNSFd(ns.FD()))
	steps := []struct {
		name    string
		heal    bool
		apply   Rules
		wantErr string
		want    Rules
	}{
		{name: "nothing installed yet", heal: true, want: Rules{}},
		{name: "drop in", apply: Rules{DropIn: addrs("10.0.0.2", "10.0.0.3")}, want: Rules{DropIn: addrs("10.0.0.2", "10.0.0.3")}},
		// A second Apply replaces the first: nothing of it remains.
		{name: "replace", apply: Rules{DropOut: addrs("10.0.0.4")}, want: Rules{DropOut: addrs("10.0.0.4")}},
		{name: "same again", apply: Rules{DropOut: addrs("10.0.0.4")}, want: Rules{DropOut: addrs("10.0.0.4")}},
		{
			name:  "loss",
			apply: Rules{LossPercent: 30, LossPeers: addrs("10.0.0.5", "10.0.0.6")},
			want:  Rules{LossPercent: 30, LossPeers: addrs("10.0.0.5", "10.0.0.6")},
		},
		{
			name:  "everything",
			apply: Rules{DropIn: addrs("10.0.0.2"), DropOut: addrs("10.0.0.3", "10.0.0.2"), LossPercent: 100, LossPeers: addrs("10.0.0.7")},
			want:  Rules{DropIn: addrs("10.0.0.2"), DropOut: addrs("10.0.0.3", "10.0.0.2"), LossPercent: 100, LossPeers: addrs("10.0.0.7")},
		},
		{
			name:    "invalid changes nothing",
			apply:   Rules{DropIn: addrs("10.0.0.9"), LossPercent: 101, LossPeers: addrs("10.0.0.7")},
			wantErr: "loss percent 101",
			want:    Rules{DropIn: addrs("10.0.0.2"), DropOut: addrs("10.0.0.3", "10.0.0.2"), LossPercent: 100, LossPeers: addrs("10.0.0.7")},
		},
		{name: "heal", heal: true, want: Rules{}},
		{name: "heal again", heal: true, want: Rules{}},
		{name: "after heal", apply: Rules{LossPercent: 1, LossPeers: addrs("10.0.0.8")}, want: Rules{LossPercent: 1, LossPeers: addrs("10.0.0.8")}},
		{name: "zero rules remove the table", apply: Rules{}, want: Rules{}},
	}
	for _, s := range steps {
		var err error
		if s.heal {
			err = tbl.Heal()
		} else {
			err = tbl.Apply(s.apply)
		}
		switch {
		case s.wantErr == "" && err != nil:
			t.Fatalf("%s: %v", s.name, err)
		case s.wantErr != "" && (err == nil || !strings.Contains(err.Error(), s.wantErr)):
			t.Fatalf("%s: err = %v, want one mentioning %q", s.name, err, s.wantErr)
		}
		got, err := tbl.Current()
		if err != nil {
			t.Fatalf("%s: Current: %v", s.name, err)
		}
		if !got.Equal(s.want) {
			t.Fatalf("%s: Current() = %+v, want %+v", s.name, got, s.want)
		}
		if s.want.IsZero() && hasTable(t, ns, "inet", TableName) {
			t.Fatalf("%s: table inet %s still exists", s.name, TableName)
		}
	}
}

// Apply and Heal leave every other table alone, including ones of the same
// name in another family and Docker's iptables-nft tables.
func TestOtherTablesUntouched(t *testing.T) {
	ns := netnstest.New(t)
	c, err := nft.New(nft.WithNetNSFd(ns.FD()))
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []*nft.Table{
		{Name: TableName, Family: nft.TableFamilyIPv4},
		{Name: "filter", Family: nft.TableFamilyINet},
	} {
		c.AddTable(other)
		ch := c.AddChain(baseChain(other, "input", nft.ChainHookInput))
		c.AddRule(&nft.Rule{Table: other, Chain: ch, Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	tbl := New(nft.WithNetNSFd(ns.FD()))
	if err := tbl.Apply(Rules{DropIn: addrs("10.0.0.2")}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Heal(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ family, name string }{{"ip", TableName}, {"inet", "filter"}} {
		if !hasTable(t, ns, tt.family, tt.name) {
			t.Errorf("table %s %s is gone", tt.family, tt.name)
		}
	}
	fam := map[string]nft.TableFamily{"ip": nft.TableFamilyIPv4, "inet": nft.TableFamilyINet}
	for _, tt := range []struct{ family, name string }{{"ip", TableName}, {"inet", "filter"}} {
		rules, err := c.GetRules(&nft.Table{Name: tt.name, Family: fam[tt.family]}, &nft.Chain{Name: "input"})
		if err != nil || len(rules) != 1 {
			t.Errorf("table %s %s: %d rules, %v; want its one rule", tt.family, tt.name, len(rules), err)
		}
	}
}

// Current refuses to describe a table it did not write rather than misread
// it: `shardtest net show` must not claim a state the kernel is not in.
func TestCurrentRefusesForeignTable(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.2")
	tests := []struct {
		name  string
		build func(c *nft.Conn, tbl *nft.Table, in, out *nft.Chain)
		want  string
	}{
		{"extra chain", func(c *nft.Conn, tbl *nft.Table, in, out *nft.Chain) {
			c.AddChain(baseChain(tbl, "forward", nft.ChainHookForward))
		}, `chain "forward"`},
		{"policy drop", func(c *nft.Conn, tbl *nft.Table, in, out *nft.Chain) {
			drop := nft.ChainPolicyDrop
			c.AddChain(&nft.Chain{Name: outputChain, Table: tbl, Type: nft.ChainTypeFilter,
				Hooknum: nft.ChainHookOutput, Priority: nft.ChainPriorityFilter, Policy: &drop})
		}, "does not have policy accept"},
		{"accept rule", func(c *nft.Conn, tbl *nft.Table, in, out *nft.Chain) {
			exprs := matchExprs(saddrOffset, ip)
			c.AddRule(&nft.Rule{Table: tbl, Chain: in, Exprs: append(exprs, &expr.Verdict{Kind: expr.VerdictAccept})})
		}, "not one shardtest installs"},
		{"daddr rule in input", func(c *nft.Conn, tbl *nft.Table, in, out *nft.Chain) {
			c.AddRule(&nft.Rule{Table: tbl, Chain: in, Exprs: dropExprs(daddrOffset, ip)})
		}, "not one shardtest installs"},
		{"loss one way", func(c *nft.Conn, tbl *nft.Table, in, out *nft.Chain) {
			c.AddRule(&nft.Rule{Table: tbl, Chain: in, Exprs: lossExprs(saddrOffset, ip, 10)})
		}, "loss peers differ"},
		{"loss percents disagree", func(c *nft.Conn, tbl *nft.Table, in, out *nft.Chain) {
			c.AddRule(&nft.Rule{Table: tbl, Chain: in, Exprs: lossExprs(saddrOffset, ip, 10)})
			c.AddRule(&nft.Rule{Table: tbl, Chain: out, Exprs: lossExprs(daddrOffset, ip, 20)})
		}, "loss rules disagree"},
		{"loss over 100", func(c *nft.Conn, tbl *nft.Table, in, out *nft.Chain) {
			c.AddRule(&nft.Rule{Table: tbl, Chain: in, Exprs: lossExprs(saddrOffset, ip, 150)})
		}, "loss of 150%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := netnstest.New(t)
			c, err := nft.New(nft.WithNetNSFd(ns.FD()))
			if err != nil {
				t.Fatal(err)
			}
			tbl := c.AddTable(table())
			in := c.AddChain(baseChain(tbl, inputChain, nft.ChainHookInput))
			var out *nft.Chain
			if tt.name != "policy drop" {
				out = c.AddChain(baseChain(tbl, outputChain, nft.ChainHookOutput))
			}
			tt.build(c, tbl, in, out)
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			got, err := New(nft.WithNetNSFd(ns.FD())).Current()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Current() = %+v, %v; want an error mentioning %q", got, err, tt.want)
			}
		})
	}
}

// The rules really drop packets, on an established TCP connection too, and
// Heal really lets them through again. This uses the package-level
// functions, which act on the calling thread's namespace as `shardtest net`
// does inside a container.
func TestDropIsReal(t *testing.T) {
	loopback := addrs("127.0.0.1")
	tests := []struct {
		name string
		r    Rules
	}{
		{"drop out", Rules{DropOut: loopback}},
		{"drop in", Rules{DropIn: loopback}},
		{"loss 100", Rules{LossPercent: 100, LossPeers: loopback}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns := netnstest.New(t)
			err := ns.Do(func() error {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return err
				}
				defer ln.Close()
				go echo(ln)
				addr := ln.Addr().String()
				if err := roundTrip(addr); err != nil {
					return errors.New("before Apply: " + err.Error())
				}
				established, err := net.Dial("tcp", addr)
				if err != nil {
					return err
				}
				defer established.Close()
				if err := ping(established); err != nil {
					return errors.New("established, before Apply: " + err.Error())
				}

				if err := Apply(tt.r); err != nil {
					return err
				}
				if err := roundTrip(addr); err == nil {
					return errors.New("a new connection got through the rules")
				}
				if err := ping(established); err == nil {
					return errors.New("an established connection got through the rules")
				}

				if err := Heal(); err != nil {
					return err
				}
				if err := roundTrip(addr); err != nil {
					return errors.New("after Heal: " + err.Error())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Random loss drops about the share asked for, in both directions: over
// lo a datagram passes the output chain and then the input chain, so at
// 50% a quarter of them arrive. A byte-order mistake in the comparison
// would make it all or nothing.
func TestLossIsRandom(t *testing.T) {
	const (
		batches   = 20
		perBatch  = 100 // small enough for the receive buffer
		idleAfter = 100 * time.Millisecond
	)
	ns := netnstest.New(t)
	var received int
	err := ns.Do(func() error {
		rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return err
		}
		defer rx.Close()
		tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
		if err != nil {
			return err
		}
		defer tx.Close()
		if err := Apply(Rules{LossPercent: 50, LossPeers: addrs("127.0.0.1")}); err != nil {
			return err
		}
		buf := make([]byte, 64)
		for range batches {
			for range perBatch {
				// A lost datagram is reported by nothing but its absence;
				// an error here would be EPERM from the drop, which is fine.
				_, _ = tx.Write([]byte("x"))
			}
			for {
				_ = rx.SetReadDeadline(time.Now().Add(idleAfter))
				if _, err := rx.Read(buf); err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) {
						break
					}
					return err
				}
				received++
			}
		}
		return Heal()
	})
	if err != nil {
		t.Fatal(err)
	}
	// Expect 500 of 2000; the standard deviation is about 19.
	if sent := batches * perBatch; received < 350 || received > 650 {
		t.Fatalf("%d of %d datagrams arrived at 50%% loss each way, want about %d", received, sent, sent/4)
	}
	t.Logf("%d of %d datagrams arrived", received, batches*perBatch)
}

// echo answers every connection on ln with what it reads.
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// roundTrip connects to addr and pings once, all within half a second.
func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	return ping(c)
}

// ping writes a byte on c and waits up to half a second for the echo.
func ping(c net.Conn) error {
	if err := c.SetDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
		return err
	}
	if _, err := c.Write([]byte{'p'}); err != nil {
		return err
	}
	b := make([]byte, 1)
	_, err := io.ReadFull(c, b)
	return err
}

// hasTable reports whether ns holds the table family name.
func hasTable(t *testing.T, ns *netnstest.NS, family, name string) bool {
	t.Helper()
	c, err := nft.New(nft.WithNetNSFd(ns.FD()))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	fam := map[string]nft.TableFamily{"ip": nft.TableFamilyIPv4, "inet": nft.TableFamilyINet}[family]
	for _, tb := range tables {
		if tb.Name == name && tb.Family == fam {
			return true
		}
	}
	return false
}

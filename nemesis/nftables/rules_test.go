package nftables

import (
	"net/netip"
	"strings"
	"testing"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		r    Rules
		want []string // substrings of the error; none means valid
	}{
		{"zero", Rules{}, nil},
		{"drops", Rules{DropIn: addrs("10.0.0.2", "10.0.0.3"), DropOut: addrs("10.0.0.2")}, nil},
		{"loss", Rules{LossPercent: 30, LossPeers: addrs("10.0.0.4")}, nil},
		{"loss 100", Rules{LossPercent: 100, LossPeers: addrs("10.0.0.4")}, nil},
		{"loopback", Rules{DropOut: addrs("127.0.0.1")}, nil},
		{"peer also dropped", Rules{DropIn: addrs("10.0.0.4"), LossPercent: 5, LossPeers: addrs("10.0.0.4")}, nil},
		{"percent 101", Rules{LossPercent: 101, LossPeers: addrs("10.0.0.4")}, []string{"loss percent 101: want 0..100"}},
		{"percent -1", Rules{LossPercent: -1, LossPeers: addrs("10.0.0.4")}, []string{"loss percent -1"}},
		{"loss without peers", Rules{LossPercent: 10}, []string{"without loss peers"}},
		{"peers without loss", Rules{LossPeers: addrs("10.0.0.4")}, []string{"loss peers without a loss percent"}},
		{"ipv6", Rules{DropIn: addrs("fd00::1")}, []string{"drop-in fd00::1: not an IPv4 address"}},
		{"mapped", Rules{DropOut: addrs("::ffff:10.0.0.2")}, []string{"IPv4-mapped", "write it as 10.0.0.2"}},
		{"empty address", Rules{DropOut: []netip.Addr{{}}}, []string{"drop-out: empty address"}},
		{"duplicate", Rules{DropIn: addrs("10.0.0.2", "10.0.0.2")}, []string{"drop-in 10.0.0.2: listed twice"}},
		{"duplicate peer", Rules{LossPercent: 1, LossPeers: addrs("10.0.0.2", "10.0.0.2")}, []string{"loss peer 10.0.0.2: listed twice"}},
		{"all at once", Rules{DropIn: addrs("fd00::1"), LossPercent: 200}, []string{"fd00::1", "loss percent 200"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.r.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error mentioning %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
		})
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		r    Rules
		want string
	}{
		{Rules{}, "nothing dropped"},
		{Rules{DropIn: addrs("10.0.0.2", "10.0.0.3")}, "drop in from 10.0.0.2,10.0.0.3"},
		{
			Rules{DropIn: addrs("10.0.0.2"), DropOut: addrs("10.0.0.3"), LossPercent: 30, LossPeers: addrs("10.0.0.4")},
			"drop in from 10.0.0.2; drop out to 10.0.0.3; lose 30% to and from 10.0.0.4",
		},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

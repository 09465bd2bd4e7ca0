// Package nftables is the kernel side of the partition nemesis: it installs
// packet drops and random packet loss in the current network namespace
// (a node's container) with nftables, through netlink in pure Go, so it
// works in a static CGO_ENABLED=0 binary in an image built FROM scratch.
//
// Everything lives in one table, "inet shardtest", with a chain on the
// input hook and one on the output hook. Apply replaces that table
// atomically, Heal deletes it, and Current reads back what the kernel holds.
// No other table is ever touched: Docker's own rules (iptables-nft tables
// in the same namespace) stay as they are.
//
// Rules name peers only. The harness reaches a node from the Docker bridge
// gateway, which no rule names, so the harness's own path is never cut.
// There is deliberately no "accept established" rule: a partition must cut
// existing TCP connections too, not just new ones.
//
// All operations need CAP_NET_ADMIN in the namespace.
package nftables

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Rules is the packet filter a node's network namespace gets. The zero
// value drops nothing.
type Rules struct {
	// DropIn drops every packet arriving from these IPv4 addresses.
	DropIn []netip.Addr `json:"drop_in"`
	// DropOut drops every packet sent to these IPv4 addresses.
	DropOut []netip.Addr `json:"drop_out"`
	// LossPercent (0..100) of the packets to and from LossPeers are
	// dropped, each packet independently at random.
	LossPercent int          `json:"loss_percent"`
	LossPeers   []netip.Addr `json:"loss_peers"`
}

// Validate reports everything wrong with r at once: addresses that are not
// IPv4, duplicates within a list, a loss percentage outside 0..100, loss
// without peers and peers without loss. Apply refuses rules that do not
// validate, before touching the kernel.
func (r Rules) Validate() error {
	var errs []error
	errs = append(errs, validateAddrs("drop-in", r.DropIn)...)
	errs = append(errs, validateAddrs("drop-out", r.DropOut)...)
	errs = append(errs, validateAddrs("loss peer", r.LossPeers)...)
	switch {
	case r.LossPercent < 0 || r.LossPercent > 100:
		errs = append(errs, fmt.Errorf("loss percent %d: want 0..100", r.LossPercent))
	case r.LossPercent > 0 && len(r.LossPeers) == 0:
		errs = append(errs, fmt.Errorf("loss percent %d without loss peers: name the peers to lose packets to and from", r.LossPercent))
	case r.LossPercent == 0 && len(r.LossPeers) > 0:
		// Refused rather than ignored: nothing would be installed for the
		// peers, so the caller's intent would silently not happen.
		errs = append(errs, errors.New("loss peers without a loss percent: give a percent from 1 to 100"))
	}
	return errors.Join(errs...)
}

// validateAddrs checks one list of r.
func validateAddrs(what string, addrs []netip.Addr) []error {
	var errs []error
	seen := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		switch {
		case !a.IsValid():
			errs = append(errs, fmt.Errorf("%s: empty address", what))
			continue
		case a.Is4In6():
			errs = append(errs, fmt.Errorf("%s %s: an IPv4-mapped IPv6 address; write it as %s", what, a, a.Unmap()))
			continue
		case !a.Is4():
			// The cluster network is IPv4; an IPv6 rule would match nothing.
			errs = append(errs, fmt.Errorf("%s %s: not an IPv4 address (only IPv4 is supported)", what, a))
			continue
		}
		if seen[a] {
			errs = append(errs, fmt.Errorf("%s %s: listed twice", what, a))
		}
		seen[a] = true
	}
	return errs
}

// IsZero reports whether r drops nothing.
func (r Rules) IsZero() bool {
	return len(r.DropIn) == 0 && len(r.DropOut) == 0 && r.LossPercent == 0 && len(r.LossPeers) == 0
}

// Equal reports whether r and o are the same rules, lists in the same
// order; a nil list equals an empty one.
func (r Rules) Equal(o Rules) bool {
	return slices.Equal(r.DropIn, o.DropIn) && slices.Equal(r.DropOut, o.DropOut) &&
		r.LossPercent == o.LossPercent && slices.Equal(r.LossPeers, o.LossPeers)
}

// String describes r on one line, e.g.
// "drop in from 10.0.0.2,10.0.0.3; drop out to 10.0.0.2; lose 30% to and from 10.0.0.4".
func (r Rules) String() string {
	if r.IsZero() {
		return "nothing dropped"
	}
	var parts []string
	if len(r.DropIn) > 0 {
		parts = append(parts, "drop in from "+joinAddrs(r.DropIn))
	}
	if len(r.DropOut) > 0 {
		parts = append(parts, "drop out to "+joinAddrs(r.DropOut))
	}
	if r.LossPercent != 0 || len(r.LossPeers) > 0 {
		parts = append(parts, fmt.Sprintf("lose %d%% to and from %s", r.LossPercent, joinAddrs(r.LossPeers)))
	}
	return strings.Join(parts, "; ")
}

func joinAddrs(addrs []netip.Addr) string {
	if len(addrs) == 0 {
		return "nobody"
	}
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

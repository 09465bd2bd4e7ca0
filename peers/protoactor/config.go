package main

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/shardtest/shardtest/protocol/kit"
)

// Defaults of the settings the harness does not give.
const (
	// defaultRemotePort is protoactor remote's (gRPC) port when
	// SHARDTEST_GOSSIP_PORT is not set: the port the harness suggests in
	// containers.
	defaultRemotePort = 7946
	// defaultAutoManagedPort is the automanaged provider's own HTTP port:
	// the library's default (automanaged.New uses 6330).
	defaultAutoManagedPort = 6330
	// clusterName names the protoactor cluster; members of another
	// cluster name are ignored by the automanaged provider.
	clusterName = "shardtest"
)

// settings are the peer's settings, derived from the harness's
// configuration (kit.Config) and the peer's own flags.
type settings struct {
	kit.Config
	// RemoteHost and RemotePort are where protoactor remote (gRPC)
	// listens; the member's address is RemoteHost:RemotePort.
	RemoteHost string
	RemotePort int
	// AutoManagedPort is the automanaged provider's HTTP port on this
	// member and on every other one; AutoManagedHosts are every member's
	// automanaged address (ip:AutoManagedPort), one per seed IP.
	AutoManagedPort  int
	AutoManagedHosts []string
	// FrameworkLogLevel is the level of protoactor's own logger.
	FrameworkLogLevel slog.Level
	// UpWhenSelfListed reports the member up as soon as it sees itself in
	// its topology, without waiting for the others to agree on it.
	UpWhenSelfListed bool
}

// deriveSettings derives the peer's settings: protoactor remote on the
// gossip bind IP and port, and the automanaged provider polling port
// autoManagedPort of every seed's IP (the seeds are the cluster-internal
// addresses of the members, this one included).
func deriveSettings(cfg kit.Config, autoManagedPort int, frameworkLevel slog.Level) (settings, error) {
	s := settings{Config: cfg, RemoteHost: cfg.GossipBind, RemotePort: cfg.GossipPort,
		AutoManagedPort: autoManagedPort, FrameworkLogLevel: frameworkLevel}
	if s.RemoteHost == "" {
		return s, fmt.Errorf("SHARDTEST_GOSSIP_BIND is required: the IP protoactor remote listens on and advertises")
	}
	if net.ParseIP(s.RemoteHost) == nil {
		return s, fmt.Errorf("SHARDTEST_GOSSIP_BIND=%q: want an IP", s.RemoteHost)
	}
	if s.RemotePort == 0 {
		s.RemotePort = defaultRemotePort
	}
	if s.AutoManagedPort <= 0 || s.AutoManagedPort > 65535 {
		return s, fmt.Errorf("automanaged port %d: want 1 to 65535", s.AutoManagedPort)
	}
	if s.AutoManagedPort == s.RemotePort {
		return s, fmt.Errorf("automanaged port %d is also protoactor remote's port", s.AutoManagedPort)
	}
	if cfg.Journal == "" {
		return s, fmt.Errorf("SHARDTEST_JOURNAL is required: register state is kept in the journal")
	}
	hosts, err := autoManagedHosts(cfg.Seeds, s.RemoteHost, autoManagedPort)
	if err != nil {
		return s, err
	}
	s.AutoManagedHosts = hosts
	return s, nil
}

// autoManagedHosts is every member's automanaged address: each distinct
// seed IP with port, in the seeds' order, and self's IP if no seed names
// it (a member always polls itself, or it never sees itself in the
// topology).
func autoManagedHosts(seeds []string, self string, port int) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(ip string) {
		if !seen[ip] {
			seen[ip] = true
			out = append(out, net.JoinHostPort(ip, strconv.Itoa(port)))
		}
	}
	for _, s := range seeds {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			return nil, fmt.Errorf("seed %q: want ip:port: %w", s, err)
		}
		if net.ParseIP(host) == nil {
			return nil, fmt.Errorf("seed %q: want an IP, not a host name", s)
		}
		add(host)
	}
	add(self)
	return out, nil
}

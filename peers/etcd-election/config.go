package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/shardtest/shardtest/protocol/kit"
)

// Defaults of the settings the harness does not give.
const (
	// defaultPeerPort is etcd's peer (raft) port when SHARDTEST_GOSSIP_PORT
	// is not set: the port the harness suggests in containers, and the
	// port of every seed address.
	defaultPeerPort = 7946
	// defaultClientPort is etcd's client (gRPC) port on every member:
	// etcd's own default.
	defaultClientPort = 2379
	// defaultForwardPort is the peer's own node-to-node port, on which the
	// singleton takes next-id requests other members forward to it.
	defaultForwardPort = 7947
	// defaultSessionTTL is the election session's lease TTL in seconds.
	// concurrency.NewSession's own default is 60 s; 5 s is what leader
	// election examples and most deployments choose, so that a dead
	// leader is replaced within seconds.
	defaultSessionTTL = 5
	// defaultDataDir is where the embedded member keeps its data: the
	// container's own filesystem, which a killed and restarted container
	// keeps.
	defaultDataDir = "/var/lib/etcd-election"
)

// The ways of writing the counter (--writes). In all of them the
// generator's state (running or not, the counter) is under one lock that
// next-id holds across its write, except where said.
const (
	// writesUnguarded: read the counter on winning, then a plain Put per
	// id — the way most users write it. Stepping down takes the lock, so
	// it waits for the writes already queued for it.
	writesUnguarded = "unguarded"
	// writesChecked: a plain Put too, but stepping down does not wait:
	// every write checks, right before it is sent, that the instance
	// still runs — the best an unguarded implementation can do without
	// asking etcd.
	writesChecked = "checked"
	// writesFenced: every Put in a transaction guarded by the leader
	// key's create revision (etcd's documented pattern); stepping down as
	// unguarded.
	writesFenced = "fenced"
)

// flags are the peer's own flags.
type flags struct {
	clientPort, forwardPort int
	sessionTTL              int
	writes                  string
	dataDir                 string
	etcdLog                 string
}

// settings are the peer's settings, derived from the harness's
// configuration (kit.Config) and the peer's own flags.
type settings struct {
	kit.Config
	// IP is the member's cluster-internal IP (SHARDTEST_GOSSIP_BIND):
	// etcd's peer and client URLs and the forward port are on it.
	IP                                string
	PeerPort, ClientPort, ForwardPort int
	// Bootstrap: this member is the first seed, and starts a new
	// one-member cluster if it has no data yet; every other member joins
	// the running cluster (etcd's runtime reconfiguration).
	Bootstrap bool
	// JoinEndpoints are the client URLs of the other seeds, asked for the
	// member list and to add this member.
	JoinEndpoints []string
	SessionTTL    int
	// Writes is --writes; Fenced: guarded writes; StepDownWaits:
	// stepping down takes the generator's lock.
	Writes        string
	Fenced        bool
	StepDownWaits bool
	DataDir       string
	EtcdLogLevel  string
}

// PeerURL is this member's etcd peer URL; ClientURL its client URL;
// ForwardAddr the address of its forward port.
func (s settings) PeerURL() *url.URL   { return httpURL(s.IP, s.PeerPort) }
func (s settings) ClientURL() *url.URL { return httpURL(s.IP, s.ClientPort) }
func (s settings) ForwardAddr() string {
	return net.JoinHostPort(s.IP, strconv.Itoa(s.ForwardPort))
}

func httpURL(ip string, port int) *url.URL {
	return &url.URL{Scheme: "http", Host: net.JoinHostPort(ip, strconv.Itoa(port))}
}

// deriveSettings derives the peer's settings. The harness gives every
// node the seeds' addresses (ip:port, this node's own included, the first
// seed first) and no more; etcd needs its initial cluster at start, so
// the first seed bootstraps a cluster of one, and every other member asks
// the seeds' client ports (same port on every member) to add it.
func deriveSettings(cfg kit.Config, f flags) (settings, error) {
	s := settings{Config: cfg, IP: cfg.GossipBind, PeerPort: cfg.GossipPort, ClientPort: f.clientPort,
		ForwardPort: f.forwardPort, SessionTTL: f.sessionTTL, DataDir: f.dataDir, EtcdLogLevel: f.etcdLog}
	if s.IP == "" {
		return s, fmt.Errorf("SHARDTEST_GOSSIP_BIND is required: the IP etcd's peer and client URLs are on")
	}
	if net.ParseIP(s.IP) == nil {
		return s, fmt.Errorf("SHARDTEST_GOSSIP_BIND=%q: want an IP", s.IP)
	}
	if s.PeerPort == 0 {
		s.PeerPort = defaultPeerPort
	}
	ports := map[int]string{s.PeerPort: "the peer port (SHARDTEST_GOSSIP_PORT)"}
	for _, p := range []struct {
		name string
		port int
	}{{"--client-port", s.ClientPort}, {"--forward-port", s.ForwardPort}} {
		if p.port <= 0 || p.port > 65535 {
			return s, fmt.Errorf("%s %d: want 1 to 65535", p.name, p.port)
		}
		if other, ok := ports[p.port]; ok {
			return s, fmt.Errorf("%s %d is also %s", p.name, p.port, other)
		}
		ports[p.port] = p.name
	}
	s.Writes = f.writes
	switch f.writes {
	case writesUnguarded:
		s.StepDownWaits = true
	case writesChecked:
	case writesFenced:
		s.Fenced, s.StepDownWaits = true, true
	default:
		return s, fmt.Errorf("--writes %q: want %s, %s or %s", f.writes, writesUnguarded, writesChecked, writesFenced)
	}
	// etcd grants at least its minimum TTL (1.5 election timeouts); more
	// than a minute is no test of anything here.
	if s.SessionTTL < 2 || s.SessionTTL > 60 {
		return s, fmt.Errorf("--session-ttl %d: want 2 to 60 (seconds)", s.SessionTTL)
	}
	if s.DataDir == "" {
		return s, fmt.Errorf("--data-dir is required")
	}
	if _, err := parseEtcdLevel(s.EtcdLogLevel); err != nil {
		return s, err
	}
	s.Bootstrap = true
	for i, seed := range cfg.Seeds {
		host, _, err := net.SplitHostPort(seed)
		if err != nil {
			return s, fmt.Errorf("seed %q: want ip:port: %w", seed, err)
		}
		if net.ParseIP(host) == nil {
			return s, fmt.Errorf("seed %q: want an IP, not a host name", seed)
		}
		if i == 0 && host != s.IP {
			s.Bootstrap = false
		}
		if host != s.IP {
			u := httpURL(host, s.ClientPort)
			s.JoinEndpoints = append(s.JoinEndpoints, u.String())
		}
	}
	return s, nil
}

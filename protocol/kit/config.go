package kit

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// Config is what the harness gives every node, through the environment
// (docs/protocol.md, Starting a node).
type Config struct {
	// Name is the node name, stable across restarts (SHARDTEST_NAME).
	Name string
	// HTTP is the address to serve shardtest/1 on (SHARDTEST_HTTP);
	// HTTPAdvertise what other members use for it, if set.
	HTTP, HTTPAdvertise string
	// GossipBind is the IP for cluster-internal traffic; any port of it
	// may be used. GossipPort is the one the harness suggests (7946 in
	// containers), for an implementation with one internal port.
	GossipBind string
	GossipPort int
	// Seeds are the cluster-internal addresses (ip:port, at GossipPort)
	// of the seed members, this node's own included; the first may
	// bootstrap a new cluster.
	Seeds []string
	// Journal is the journal server's URL (package protocol/journal).
	Journal string
	// ClusterSecret is a secret every member of the run shares (new for
	// every run), for the implementation to require of its node-to-node
	// traffic if it wants to.
	ClusterSecret string
	Roles         []string
	// Bugs are deliberate bugs to switch on (only those declared).
	Bugs []string
	// The optional settings a scenario may give (zero: not given). An
	// implementation maps each to its own equivalent or ignores it.
	PassivateIdleAfter time.Duration
	RebalanceInterval  time.Duration
	StableAfter        time.Duration
	DownRemovalMargin  time.Duration
}

// ConfigFromEnv reads Config from the SHARDTEST_* environment.
func ConfigFromEnv() (Config, error) { return ConfigFrom(os.LookupEnv) }

// ConfigFrom reads Config through lookup (os.LookupEnv, or a map's in a
// test). SHARDTEST_NAME and SHARDTEST_HTTP are required; a value that does
// not parse is an error naming its variable.
func ConfigFrom(lookup func(string) (string, bool)) (Config, error) {
	var c Config
	get := func(name string) string { v, _ := lookup(protocol.EnvName(name)); return strings.TrimSpace(v) }
	list := func(name string) []string {
		var out []string
		for _, s := range strings.Split(get(name), ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	c.Name, c.HTTP, c.HTTPAdvertise = get("name"), get("http"), get("http-advertise")
	c.GossipBind, c.Journal, c.ClusterSecret = get("gossip-bind"), get("journal"), get("cluster-secret")
	c.Seeds, c.Roles, c.Bugs = list("seeds"), list("roles"), list("bugs")
	switch {
	case c.Name == "":
		return c, fmt.Errorf("%s is required", protocol.EnvName("name"))
	case strings.Trim(c.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "":
		return c, fmt.Errorf("%s=%q: want [A-Za-z0-9._-]+", protocol.EnvName("name"), c.Name)
	case c.HTTP == "":
		return c, fmt.Errorf("%s is required", protocol.EnvName("http"))
	}
	if _, _, err := net.SplitHostPort(c.HTTP); err != nil {
		return c, fmt.Errorf("%s=%q: want host:port: %w", protocol.EnvName("http"), c.HTTP, err)
	}
	if p := get("gossip-port"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 65535 {
			return c, fmt.Errorf("%s=%q: want a port number", protocol.EnvName("gossip-port"), p)
		}
		c.GossipPort = n
	}
	for _, s := range c.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return c, fmt.Errorf("%s: seed %q: want ip:port", protocol.EnvName("seeds"), s)
		}
	}
	for name, d := range map[string]*time.Duration{
		"passivate-idle-after": &c.PassivateIdleAfter, "rebalance-interval": &c.RebalanceInterval,
		"stable-after": &c.StableAfter, "down-removal-margin": &c.DownRemovalMargin,
	} {
		v := get(name)
		if v == "" {
			continue
		}
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed < 0 {
			return c, fmt.Errorf("%s=%q: want a duration such as 30ms or 5s", protocol.EnvName(name), v)
		}
		*d = parsed
	}
	return c, nil
}

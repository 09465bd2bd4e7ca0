package protocol

import "strings"

// Setting is a setting the harness gives every node through the
// environment (docs/protocol.md, Starting a node).
type Setting struct {
	// Name is the setting's name (the reference node's flag):
	// SHARDTEST_<NAME> with dashes as underscores is its variable.
	Name string
	// Meaning says what it is, for docs.
	Meaning string
	// Optional: a scenario's tuning, which an implementation maps to its
	// own equivalent or ignores (Akka's name in the meaning); the others
	// are set for every node by the runtime.
	Optional bool
}

// EnvName is the environment variable of setting name: SHARDTEST_ and the
// name upper-cased, dashes as underscores.
func EnvName(name string) string {
	return "SHARDTEST_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Settings lists every setting of shardtest/1: those the runtime sets
// for every node, then the optional ones.
func Settings() []Setting {
	return []Setting{
		{Name: "name", Meaning: "node name, stable across restarts ([A-Za-z0-9._-]+)"},
		{Name: "http", Meaning: "address to serve this protocol on (host:port)"},
		{Name: "http-advertise", Meaning: "address other members use for it, if different"},
		{Name: "gossip-bind", Meaning: "IP for cluster-internal traffic (any port of it may be used)"},
		{Name: "gossip-port", Meaning: "a suggested port for cluster-internal traffic (TCP and UDP)"},
		{Name: "seeds", Meaning: "comma-separated cluster-internal addresses (ip:port) of the seed members, this node's own included; the first seed may bootstrap a new cluster"},
		{Name: "journal", Meaning: "URL of the journal server (http://ip:port)"},
		{Name: "cluster-secret", Meaning: "a secret every member of the run shares, new for every run: an implementation may require it of its node-to-node traffic, so that a stranger on the network (or another run's nodes) is refused"},
		{Name: "roles", Meaning: "comma-separated roles of the member (optional)"},
		{Name: "bugs", Meaning: "deliberate bugs to switch on (only those the node declares)"},
		{Name: "passivate-idle-after", Meaning: "passivate entities idle this long (passivate-idle-entity-after)", Optional: true},
		{Name: "rebalance-interval", Meaning: "how often the coordinator considers a rebalance (rebalance-interval)", Optional: true},
		{Name: "stable-after", Meaning: "how long reachability must be stable before the split-brain resolver acts (split-brain-resolver.stable-after)", Optional: true},
		{Name: "down-removal-margin", Meaning: "after the previous oldest was downed, wait this long before starting the singleton (down-removal-margin)", Optional: true},
	}
}

// IsStartSetting reports whether the runtime itself gives every node
// setting name, so a scenario must not set it.
func IsStartSetting(name string) bool {
	switch name {
	case "name", "http", "http-advertise", "gossip-bind", "gossip-port", "seeds", "journal", "cluster-secret":
		return true
	}
	return false
}

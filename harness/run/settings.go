package run

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/shardtest/shardtest/protocol"
)

// Node settings are the optional tuning settings of docs/protocol.md
// ("Optional settings": stable-after, passivate-idle-after, ...) that a
// scenario needs, by name and value. They reach every node as environment
// variables (SHARDTEST_STABLE_AFTER=60s), which any implementation reads
// and may ignore, and, for the reference node run as a child process, as
// its flags of the same names. Unlike NodeArgs, which go to the node
// command line unchanged and so only suit the implementation they were
// written for, settings are safe to give to any implementation.

// settingName is what a setting's name may be: the reference node's flag
// name, which also makes a valid environment variable name.
var settingName = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// validateSettings refuses names that would not make an environment
// variable or that the runtime sets itself, and values that would not
// survive an environment variable.
func validateSettings(s map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(s)) {
		v := s[k]
		switch {
		case !settingName.MatchString(k):
			return fmt.Errorf("node setting %q: want a lower-case name like stable-after", k)
		case protocol.IsStartSetting(k):
			return fmt.Errorf("node setting %q: the runtime sets it for every node", k)
		case v == "" || strings.ContainsAny(v, "\x00\n"):
			return fmt.Errorf("node setting %s=%q: want a non-empty value on one line", k, v)
		}
	}
	return nil
}

// SettingsEnv renders settings as environment variables, sorted.
func SettingsEnv(s map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		out = append(out, protocol.EnvName(k)+"="+s[k])
	}
	return out
}

// SettingsFlags renders settings as the reference node's flags, sorted.
func SettingsFlags(s map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		out = append(out, "--"+k+"="+s[k])
	}
	return out
}

// SettingsString renders settings for people: "a=1 b=2", sorted.
func SettingsString(s map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(s)) {
		out = append(out, k+"="+s[k])
	}
	return strings.Join(out, " ")
}

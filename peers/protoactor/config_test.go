package main

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/shardtest/shardtest/protocol/kit"
)

// containerEnv is what the harness gives a node in Docker.
func containerEnv() map[string]string {
	return map[string]string{
		"SHARDTEST_NAME":           "n2",
		"SHARDTEST_HTTP":           "0.0.0.0:7500",
		"SHARDTEST_HTTP_ADVERTISE": "172.30.5.12:7500",
		"SHARDTEST_GOSSIP_BIND":    "172.30.5.12",
		"SHARDTEST_GOSSIP_PORT":    "7946",
		"SHARDTEST_SEEDS":          "172.30.5.11:7946,172.30.5.12:7946,172.30.5.13:7946",
		"SHARDTEST_JOURNAL":        "http://172.30.5.2:7400",
	}
}

func configOf(t *testing.T, env map[string]string) kit.Config {
	t.Helper()
	cfg, err := kit.ConfigFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestDeriveSettingsInAContainer(t *testing.T) {
	s, err := deriveSettings(configOf(t, containerEnv()), defaultAutoManagedPort, slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	if s.RemoteHost != "172.30.5.12" || s.RemotePort != 7946 {
		t.Fatalf("remote %s:%d", s.RemoteHost, s.RemotePort)
	}
	want := []string{"172.30.5.11:6330", "172.30.5.12:6330", "172.30.5.13:6330"}
	if !slices.Equal(s.AutoManagedHosts, want) {
		t.Fatalf("automanaged hosts %v, want %v", s.AutoManagedHosts, want)
	}
}

func TestDeriveSettingsDefaultsAndSelf(t *testing.T) {
	env := containerEnv()
	delete(env, "SHARDTEST_GOSSIP_PORT")
	// A repeated seed IP is polled once; a member missing from the seeds
	// still polls itself.
	env["SHARDTEST_SEEDS"] = "172.30.5.11:7946,172.30.5.11:7947"
	s, err := deriveSettings(configOf(t, env), 7000, slog.LevelDebug)
	if err != nil {
		t.Fatal(err)
	}
	if s.RemotePort != defaultRemotePort || s.AutoManagedPort != 7000 || s.FrameworkLogLevel != slog.LevelDebug {
		t.Fatalf("settings %+v", s)
	}
	if want := []string{"172.30.5.11:7000", "172.30.5.12:7000"}; !slices.Equal(s.AutoManagedHosts, want) {
		t.Fatalf("automanaged hosts %v, want %v", s.AutoManagedHosts, want)
	}
}

func TestDeriveSettingsRefuses(t *testing.T) {
	for name, change := range map[string]func(map[string]string){
		"no bind":        func(e map[string]string) { delete(e, "SHARDTEST_GOSSIP_BIND") },
		"bind not an IP": func(e map[string]string) { e["SHARDTEST_GOSSIP_BIND"] = "node2" },
		"seed host name": func(e map[string]string) { e["SHARDTEST_SEEDS"] = "node1:7946" },
		"no journal":     func(e map[string]string) { delete(e, "SHARDTEST_JOURNAL") },
		"port clash":     func(e map[string]string) { e["SHARDTEST_GOSSIP_PORT"] = "6330" },
	} {
		t.Run(name, func(t *testing.T) {
			env := containerEnv()
			change(env)
			if s, err := deriveSettings(configOf(t, env), defaultAutoManagedPort, slog.LevelInfo); err == nil {
				t.Fatalf("accepted: %+v", s)
			}
		})
	}
	if _, err := deriveSettings(configOf(t, containerEnv()), 0, slog.LevelInfo); err == nil {
		t.Fatal("accepted automanaged port 0")
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := parseLevel(in); err != nil || got != want {
			t.Fatalf("%s: %v %v", in, got, err)
		}
	}
	if _, err := parseLevel("loud"); err == nil {
		t.Fatal("accepted loud")
	}
}

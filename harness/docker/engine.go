package docker

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// Engine is where the harness reaches what the engine publishes: the
// engine's own host. A local engine (a unix socket, or TCP on loopback)
// publishes on 127.0.0.1; a remote one (DOCKER_HOST=tcp://ADDR:PORT or
// ssh://USER@HOST) publishes on its host, and the harness's clients go
// there. The nodes' own traffic stays on the run's network inside that
// host, where the faults act; only the harness's requests, the node event
// stream and the status samples cross to the harness (docs/remote.md).
type Engine struct {
	// Bind is the address the published ports are bound to on the
	// engine's host.
	Bind netip.Addr
	// Host is where the harness dials them.
	Host string
	// Remote: the engine is not on this machine; free host ports cannot
	// be checked from here (a taken one is retried).
	Remote bool
}

// EngineAt reads where an engine's published ports are from its address
// (client.DaemonHost()).
func EngineAt(daemonHost string) (Engine, error) {
	local := Engine{Bind: netip.MustParseAddr("127.0.0.1"), Host: "127.0.0.1"}
	u, err := url.Parse(daemonHost)
	if err != nil {
		return Engine{}, fmt.Errorf("docker: engine address %q: %w", daemonHost, err)
	}
	switch u.Scheme {
	case "unix", "npipe", "":
		return local, nil
	case "tcp", "http", "https":
		host := u.Hostname()
		if host == "" {
			return Engine{}, fmt.Errorf("docker: engine address %q names no host", daemonHost)
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			// A name: it must resolve to the address the engine's host
			// publishes on.
			ips, err := net.LookupIP(host)
			if err != nil || len(ips) == 0 {
				return Engine{}, fmt.Errorf("docker: engine host %q: %v", host, err)
			}
			ip, _ = netip.AddrFromSlice(ips[0].To4())
			if !ip.IsValid() {
				ip, _ = netip.AddrFromSlice(ips[0])
			}
		}
		if ip.IsLoopback() {
			return local, nil
		}
		// The engine listens on this address of its host, so its host
		// has it: publish there, not on every interface.
		return Engine{Bind: ip.Unmap(), Host: ip.Unmap().String(), Remote: true}, nil
	case "ssh":
		host := u.Hostname()
		if host == "" || strings.EqualFold(host, "localhost") {
			return local, nil
		}
		// Which address of the host the harness reaches is not known
		// there: publish on all of them.
		return Engine{Bind: netip.IPv4Unspecified(), Host: host, Remote: true}, nil
	}
	return Engine{}, fmt.Errorf("docker: engine address %q: scheme %q not supported (unix, tcp or ssh)", daemonHost, u.Scheme)
}

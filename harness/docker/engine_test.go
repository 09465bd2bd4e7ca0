package docker

import "testing"

func TestEngineAt(t *testing.T) {
	for _, tc := range []struct {
		in, bind, host string
		remote, err    bool
	}{
		{in: "unix:///var/run/docker.sock", bind: "127.0.0.1", host: "127.0.0.1"},
		{in: "tcp://127.0.0.1:2375", bind: "127.0.0.1", host: "127.0.0.1"},
		{in: "tcp://10.251.3.2:2375", bind: "10.251.3.2", host: "10.251.3.2", remote: true},
		{in: "tcp://[::1]:2375", bind: "127.0.0.1", host: "127.0.0.1"},
		{in: "tcp://[fd00::2]:2376", bind: "fd00::2", host: "fd00::2", remote: true},
		{in: "ssh://ci@build-7.example", bind: "0.0.0.0", host: "build-7.example", remote: true},
		{in: "ssh://me@localhost", bind: "127.0.0.1", host: "127.0.0.1"},
		{in: "tcp://:2375", err: true},
		{in: "fd://", err: true},
		{in: "://bad", err: true},
	} {
		e, err := EngineAt(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("%s: err %v", tc.in, err)
			continue
		}
		if err == nil && (e.Bind.String() != tc.bind || e.Host != tc.host || e.Remote != tc.remote) {
			t.Errorf("%s: %+v, want bind %s host %s remote %v", tc.in, e, tc.bind, tc.host, tc.remote)
		}
	}
}

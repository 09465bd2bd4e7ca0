package testbin

import (
	"net"
	"strconv"
	"testing"
)

// TakePort holds a free TCP port on 127.0.0.1 below the usual ephemeral
// range (32768 and up on Linux) until the test ends, for tests that pass a
// taken --base-port: a port the kernel picks (":0") is in the ephemeral
// range, which the local runtime refuses for another reason.
func TakePort(t testing.TB) int {
	t.Helper()
	for port := 29000; port < 32000; port += 7 {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		t.Cleanup(func() { l.Close() })
		return port
	}
	t.Fatal("no free port in 29000..32000 to hold")
	return 0
}

package node

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkNextIDViaProxy measures next-id sent to a non-oldest node, whose
// singleton proxy forwards it to the oldest, where the ID generator appends
// to the journal (bbolt, fsync off here, to measure the protocol path) —
// against a plain HTTP round trip to the same nodes, measured in the same
// run. The ratio is what the proxy, the hand-off to the singleton's mailbox
// and the journal append cost over bare HTTP.
func BenchmarkNextIDViaProxy(b *testing.B) {
	tc := newTestCluster(b, 2)
	tc.agreedOldest(tc.nodes, 2)
	proxyNode, oldest := tc.nodes[1], tc.nodes[0]
	c := newIDClient()
	if _, err := c.nextID(proxyNode.n.Addr()); err != nil {
		b.Fatal(err)
	}
	hc := &http.Client{}
	roundTrip := func(addr string) {
		res, err := hc.Get("http://" + addr + "/v1/health")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	// Baseline: plain HTTP round trips to each of the two processes.
	const baselineOps = 500
	start := time.Now()
	for i := range baselineOps {
		if i%2 == 0 {
			roundTrip(proxyNode.n.Addr())
		} else {
			roundTrip(oldest.n.Addr())
		}
	}
	baseline := time.Since(start) / baselineOps

	b.ResetTimer()
	for b.Loop() {
		if _, err := c.nextID(proxyNode.n.Addr()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(baseline.Nanoseconds()), "baseline-ns/op")
	b.ReportMetric(float64(per)/float64(baseline), "x-http-roundtrip")
	c.check(b)
}

package docker

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"
)

// BenchmarkStartup measures, per iteration, the seconds from Start to a
// ready 5-node cluster with the image cached, and the cold build of a new
// image (a copy of the binary with random trailing bytes, so its hash and
// tag are new; the image is removed afterwards). It reports both and the
// cold build as a multiple of the cached start, measured in the same run.
func BenchmarkStartup(b *testing.B) {
	cli := dockerClient(b)
	bin := staticBinary(b)
	ctx := context.Background()
	if _, err := EnsureImage(ctx, cli, bin); err != nil {
		b.Fatal(err)
	}
	var ready, cold time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		c, err := Start(ctx, Options{Nodes: 5, Dir: b.TempDir(), Binary: bin, Client: cli,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		ready += time.Since(start)
		if err := c.Stop(ctx); err != nil {
			b.Fatal(err)
		}

		fresh := filepath.Join(b.TempDir(), "shardtest")
		data, err := os.ReadFile(bin)
		if err != nil {
			b.Fatal(err)
		}
		trailer := make([]byte, 16)
		rand.Read(trailer)
		if err := os.WriteFile(fresh, append(data, trailer...), 0o755); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		tag, err := EnsureImage(ctx, cli, fresh)
		if err != nil {
			b.Fatal(err)
		}
		cold += time.Since(start)
		cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	}
	n := float64(b.N)
	b.ReportMetric(ready.Seconds()/n, "s-to-ready-5-cached")
	b.ReportMetric(cold.Seconds()/n, "s-cold-build")
	b.ReportMetric(cold.Seconds()/ready.Seconds(), "x-cold-vs-ready")
}

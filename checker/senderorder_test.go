package checker

import (
	"context"
	"testing"

	"github.com/shardtest/shardtest/history"
)

func TestSenderOrder(t *testing.T) {
	const L = "log/l1"
	read := func(b *hb, tm int64, entries string) *hb {
		return b.inv(tm, 9, "read", L, "").ok(tm+1, 9, `{"entries":[`+entries+`]}`)
	}
	// via sets the accepting node incarnation of the last completion.
	via := func(b *hb, node, inc string) *hb {
		b.ops[len(b.ops)-1].Reply = &history.Reply{Node: node, Incarnation: inc}
		return b
	}
	tell := func(b *hb, tm int64, seq int, node, inc string) *hb {
		return via(b.inv(tm, 0, "tell", L, ap("w0", seq)).ok(tm+1, 0, `{"accepted":true}`), node, inc)
	}
	tests := []struct {
		name string
		h    func() *hb
		want Verdict
	}{
		{"empty", func() *hb { return &hb{} }, Unknown},
		{"single tell", func() *hb { return read(tell(&hb{}, 1, 1, "n1", "a"), 10, ap("w0", 1)) }, Valid},
		{"tells in order", func() *hb {
			b := tell(tell(tell(&hb{}, 1, 1, "n1", "a"), 3, 2, "n1", "a"), 5, 3, "n1", "a")
			return read(b, 10, ap("w0", 1)+","+ap("w0", 2)+","+ap("w0", 3))
		}, Valid},
		{"tells reordered through one region", func() *hb {
			b := tell(tell(&hb{}, 1, 1, "n1", "a"), 3, 2, "n1", "a")
			return read(b, 10, ap("w0", 2)+","+ap("w0", 1))
		}, Invalid},
		{"tell lost: allowed (at most once), the rest in order", func() *hb {
			b := tell(tell(tell(&hb{}, 1, 1, "n1", "a"), 3, 2, "n1", "a"), 5, 3, "n1", "a")
			return read(b, 10, ap("w0", 1)+","+ap("w0", 3))
		}, Valid},
		{"through different regions: no order promised", func() *hb {
			b := tell(tell(&hb{}, 1, 1, "n1", "a"), 3, 2, "n2", "b")
			return read(b, 10, ap("w0", 2)+","+ap("w0", 1))
		}, Valid},
		{"the region restarted in between: no order promised", func() *hb {
			b := tell(tell(&hb{}, 1, 1, "n1", "a"), 3, 2, "n1", "c")
			return read(b, 10, ap("w0", 2)+","+ap("w0", 1))
		}, Valid},
		{"append then tell reordered", func() *hb {
			b := via((&hb{}).inv(1, 0, "append", L, ap("w0", 1)).ok(2, 0, `{"length":1}`), "n1", "a")
			b = tell(b, 3, 2, "n1", "a")
			return read(b, 10, ap("w0", 2)+","+ap("w0", 1))
		}, Invalid},
		{"a tell may be overtaken by a later ask (an ask has its own sender)", func() *hb {
			b := tell(&hb{}, 1, 1, "n1", "a")
			b = via(b.inv(3, 0, "append", L, ap("w0", 2)).ok(4, 0, `{"length":1}`), "n1", "a")
			return read(b, 10, ap("w0", 2)+","+ap("w0", 1))
		}, Valid},
		{"unknown outcome constrains nothing", func() *hb {
			b := (&hb{}).inv(1, 0, "tell", L, ap("w0", 1)).info(2, 0)
			b = tell(b, 3, 2, "n1", "a")
			return read(b, 10, ap("w0", 2)+","+ap("w0", 1))
		}, Valid},
		{"crash mid-operation: an open tell", func() *hb {
			b := tell(&hb{}, 1, 1, "n1", "a")
			b = read(b, 10, ap("w0", 1))
			return b.inv(20, 0, "tell", L, ap("w0", 2))
		}, Valid},
		{"log never read", func() *hb { return tell(&hb{}, 1, 1, "n1", "a") }, Unknown},
		{"two senders interleaved, each in order", func() *hb {
			b := tell(&hb{}, 1, 1, "n1", "a")
			b = via(b.inv(2, 1, "tell", L, ap("w1", 1)).ok(3, 1, `{"accepted":true}`), "n1", "a")
			b = tell(b, 4, 2, "n1", "a")
			b = via(b.inv(5, 1, "tell", L, ap("w1", 2)).ok(6, 1, `{"accepted":true}`), "n1", "a")
			return read(b, 10, ap("w1", 1)+","+ap("w0", 1)+","+ap("w1", 2)+","+ap("w0", 2))
		}, Valid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := SenderOrder{}.Check(context.Background(), tt.h().file(), Inputs{})
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %v", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
			if r.Verdict == Invalid && len(r.Evidence) == 0 {
				t.Error("invalid without evidence")
			}
		})
	}
}

// A history cut off by a harness crash still checks what it has.
func TestSenderOrderCutOff(t *testing.T) {
	b := (&hb{}).inv(1, 0, "tell", "log/l1", ap("w0", 1)).ok(2, 0, `{"accepted":true}`).
		inv(3, 0, "tell", "log/l1", ap("w0", 2)).ok(4, 0, `{"accepted":true}`).
		inv(10, 9, "read", "log/l1", "").ok(11, 9, `{"entries":[`+ap("w0", 2)+","+ap("w0", 1)+`]}`)
	f := b.file()
	f.Truncated = true
	if r := (SenderOrder{}).Check(context.Background(), f, Inputs{}); r.Verdict != Invalid {
		t.Fatalf("verdict %s: %s", r.Verdict, r.Summary)
	}
}

package checker

import (
	"context"
	"testing"
)

func snd(client string, seq int, dedup bool) string {
	d := "false"
	if dedup {
		d = "true"
	}
	return `{"to":"d1","client":"` + client + `","seq":` + itoa(seq) + `,"dedup":` + d + `}`
}

func TestDelivery(t *testing.T) {
	const S, L = "sender/w0-d1", "log/d1"
	flush := func(b *hb, tm int64, unconfirmed string) *hb {
		return b.inv(tm, 8, "flush", S, "").ok(tm+1, 8, `{"unconfirmed":`+unconfirmed+`}`)
	}
	read := func(b *hb, tm int64, entries string) *hb {
		return b.inv(tm, 9, "read", L, "").ok(tm+1, 9, `{"entries":[`+entries+`]}`)
	}
	sent := func(b *hb, tm int64, seq int, dedup bool) *hb {
		return b.inv(tm, 0, "send", S, snd("w0-d1", seq, dedup)).ok(tm+1, 0, `{"delivery_id":1}`)
	}
	tests := []struct {
		name string
		h    func() *hb
		want Verdict
	}{
		{"empty", func() *hb { return &hb{} }, Unknown},
		{"delivered once", func() *hb { return read(flush(sent(&hb{}, 1, 1, true), 5, "0"), 10, ap("w0-d1", 1)) }, Valid},
		{"at least once: duplicates allowed", func() *hb {
			return read(flush(sent(&hb{}, 1, 1, false), 5, "0"), 10, ap("w0-d1", 1)+","+ap("w0-d1", 1))
		}, Valid},
		{"effectively once: a duplicate is a violation", func() *hb {
			return read(flush(sent(&hb{}, 1, 1, true), 5, "0"), 10, ap("w0-d1", 1)+","+ap("w0-d1", 1))
		}, Invalid},
		{"lost after a settled flush", func() *hb {
			return read(flush(sent(sent(&hb{}, 1, 1, false), 3, 2, false), 5, "0"), 10, ap("w0-d1", 1))
		}, Invalid},
		{"missing, but the flush did not settle", func() *hb {
			return read(flush(sent(&hb{}, 1, 1, false), 5, "3"), 10, "")
		}, Unknown},
		{"missing, and the log was never read", func() *hb { return flush(sent(&hb{}, 1, 1, false), 5, "0") }, Unknown},
		{"a failed send delivered", func() *hb {
			b := (&hb{}).inv(1, 0, "send", S, snd("w0-d1", 1, false)).fail(2, 0)
			return read(flush(b, 5, "0"), 10, ap("w0-d1", 1))
		}, Invalid},
		{"an unknown send may or may not arrive", func() *hb {
			b := (&hb{}).inv(1, 0, "send", S, snd("w0-d1", 1, false)).info(2, 0)
			b = sent(b, 3, 2, false)
			return read(flush(b, 5, "0"), 10, ap("w0-d1", 2))
		}, Valid},
		{"never sent, yet in the log", func() *hb {
			return read(flush(sent(&hb{}, 1, 1, false), 5, "0"), 10, ap("w0-d1", 1)+","+ap("w9-d1", 4))
		}, Invalid},
		{"crash mid-send: an open invocation", func() *hb {
			b := sent(&hb{}, 1, 1, false).inv(3, 0, "send", S, snd("w0-d1", 2, false))
			return read(flush(b, 5, "0"), 10, ap("w0-d1", 1))
		}, Valid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Delivery{}.Check(context.Background(), tt.h().file(), Inputs{})
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %v", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
			if r.Verdict == Invalid && len(r.Evidence) == 0 {
				t.Error("invalid without evidence")
			}
		})
	}
}

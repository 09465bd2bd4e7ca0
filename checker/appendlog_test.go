package checker

import (
	"context"
	"testing"
)

func ap(c string, seq int) string { return `{"client":"` + c + `","seq":` + itoa(seq) + `}` }

func TestAppendLog(t *testing.T) {
	const L = "log/l1"
	read := func(b *hb, tm int64, entries string) *hb {
		return b.inv(tm, 9, "read", L, "").ok(tm+1, 9, `{"entries":[`+entries+`]}`)
	}
	tests := []struct {
		name string
		h    func() *hb
		want Verdict
	}{
		{"empty", func() *hb { return &hb{} }, Unknown},
		{"in order", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).ok(2, 0, `{"length":1}`).
				inv(3, 0, "append", L, ap("w0", 2)).ok(4, 0, `{"length":2}`)
			return read(b, 10, ap("w0", 1)+","+ap("w0", 2))
		}, Valid},
		{"lost acknowledged append", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).ok(2, 0, `{"length":1}`).
				inv(3, 0, "append", L, ap("w0", 2)).ok(4, 0, `{"length":2}`)
			return read(b, 10, ap("w0", 2))
		}, Invalid},
		{"duplicate", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).ok(2, 0, `{"length":1}`)
			return read(b, 10, ap("w0", 1)+","+ap("w0", 1))
		}, Invalid},
		{"real-time order broken", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).ok(2, 0, `{"length":1}`).
				inv(3, 1, "append", L, ap("w1", 1)).ok(4, 1, `{"length":2}`)
			return read(b, 10, ap("w1", 1)+","+ap("w0", 1))
		}, Invalid},
		{"concurrent appends in either order", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).inv(2, 1, "append", L, ap("w1", 1)).
				ok(3, 0, `{"length":1}`).ok(4, 1, `{"length":2}`)
			return read(b, 10, ap("w1", 1)+","+ap("w0", 1))
		}, Valid},
		{"unknown append may be missing or present", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).info(2, 0).
				inv(3, 1, "append", L, ap("w1", 1)).info(4, 1).
				inv(5, 2, "append", L, ap("w2", 1)).ok(6, 2, `{"length":1}`)
			return read(b, 10, ap("w1", 1)+","+ap("w2", 1))
		}, Valid},
		{"lost tell is allowed", func() *hb {
			b := (&hb{}).inv(1, 0, "tell", L, ap("w0", 1)).ok(2, 0, `{"accepted":true}`).
				inv(3, 0, "append", L, ap("w0", 2)).ok(4, 0, `{"length":1}`)
			return read(b, 10, ap("w0", 2))
		}, Valid},
		{"failed append ignored", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).fail(2, 0).
				inv(3, 0, "append", L, ap("w0", 2)).ok(4, 0, `{"length":1}`)
			return read(b, 10, ap("w0", 2))
		}, Valid},
		{"crashed mid-operation", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).ok(2, 0, `{"length":1}`).
				inv(3, 1, "append", L, ap("w1", 1))
			return read(b, 10, ap("w0", 1))
		}, Valid},
		{"no read of an acknowledged log", func() *hb {
			return (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).ok(2, 0, `{"length":1}`)
		}, Unknown},
		{"append acknowledged while the read ran may be missing", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1)).inv(2, 9, "read", L, "").
				ok(3, 0, `{"length":1}`)
			return b.ok(4, 9, `{"entries":[]}`)
		}, Valid},
		{"append acknowledged after the read started may be missing", func() *hb {
			b := (&hb{}).inv(1, 0, "append", L, ap("w0", 1))
			b = read(b, 2, "")
			return b.ok(20, 0, `{"length":1}`)
		}, Valid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := AppendLog{}.Check(context.Background(), tt.h().file(), Inputs{})
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %v", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
		})
	}
}

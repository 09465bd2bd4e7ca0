package packed

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Records read back as they were put, whatever the deltas (negative, huge,
// the extremes of int64) and with fields that only some records have.
func TestPackedRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type rec struct {
		a, b int64
		c    *int64 // only some records
	}
	extremes := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}
	var recs []rec
	for i := range 5000 {
		r := rec{a: int64(i) * 1000, b: rng.Int64N(1 << 40)}
		if i%7 == 0 {
			r.b = extremes[i%len(extremes)]
		}
		if i%3 == 0 {
			c := rng.Int64() - math.MaxInt64/2
			r.c = &c
		}
		recs = append(recs, r)
	}
	var p Log
	for _, r := range recs {
		p.Put(0, r.a)
		p.Put(1, r.b)
		if r.c != nil {
			p.Put(2, *r.c)
		}
		p.End()
	}
	if p.Len() != len(recs) {
		t.Fatalf("len %d, want %d", p.Len(), len(recs))
	}
	rd := p.Reader()
	for i, r := range recs {
		a, b := rd.Get(0), rd.Get(1)
		if a != r.a || b != r.b {
			t.Fatalf("record %d: %d %d, want %d %d", i, a, b, r.a, r.b)
		}
		if r.c != nil {
			if c := rd.Get(2); c != *r.c {
				t.Fatalf("record %d: c %d, want %d", i, c, *r.c)
			}
		}
	}
	if !rd.Done() {
		t.Fatalf("read %d bytes of %d", rd.pos, p.Size())
	}
}

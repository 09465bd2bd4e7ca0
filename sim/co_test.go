package sim

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestCoroutinesInterleaveAsTheSeedSays: coroutines that sleep in virtual
// time through Park run one at a time, in an order that depends on the
// seed only, and Stop ends the parked ones.
func TestCoroutinesInterleaveAsTheSeedSays(t *testing.T) {
	run := func(seed uint64) []string {
		w := New(seed)
		var log []string
		var cos []*Co
		for i := range 3 {
			var co *Co
			co = Go(func(co *Co) {
				for k := 0; ; k++ {
					log = append(log, fmt.Sprintf("%v c%d.%d", w.Now(), i, k))
					w.After(time.Duration(w.Rand().Int64N(int64(10*time.Millisecond))), co.Resume)
					if !co.Park() {
						return
					}
				}
			})
			cos = append(cos, co)
			w.At(0, co.Resume)
		}
		w.RunUntil(50 * time.Millisecond)
		for _, co := range cos {
			co.Stop()
			if !co.Done() {
				t.Fatal("a stopped coroutine did not return")
			}
		}
		return log
	}
	a, b := run(1), run(1)
	if !slices.Equal(a, b) || len(a) < 10 {
		t.Fatalf("the same seed ran differently or too little:\n%v\n%v", a, b)
	}
	if c := run(2); slices.Equal(a, c) {
		t.Fatalf("two seeds ran alike: %v", c)
	}
}

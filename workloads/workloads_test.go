package workloads

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The same seed gives every workload the same operations.
func TestGeneratorsAreDeterministic(t *testing.T) {
	o := Options{Entities: 10, Concurrency: 4, PerEntity: 2}
	for _, w := range All() {
		t.Run(w.Name(), func(t *testing.T) {
			take := func(seed int64) []Op {
				g := w.Generator(seed, 1, o)
				var ops []Op
				for range 50 {
					ops = append(ops, g())
				}
				return ops
			}
			if a, b := take(3), take(3); !reflect.DeepEqual(a, b) {
				t.Fatalf("seed 3 twice gave different operations")
			}
		})
	}
}

func TestDeliverFinal(t *testing.T) {
	got := Deliver{}.Final([]string{"sender/w1-d4", "sender/w0-d4", "sender/w2-d10", "log/d3", "register/r1"})
	var want []Op
	for _, s := range []string{"sender/w1-d4", "sender/w0-d4", "sender/w2-d10"} {
		want = append(want, Op{F: "flush", Entity: s})
	}
	want = append(want, Op{F: "read", Entity: "log/d10"}, Op{F: "read", Entity: "log/d4"})
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Final = %+v\nwant %+v", got, want)
	}
	// A sender sends numbered messages to its own log, with de-duplication
	// on odd workers only.
	g := Deliver{}.Generator(1, 3, Options{Entities: 5, Concurrency: 4, PerEntity: 2})
	op := g()
	var m struct {
		To, Client string
		Seq        int
		Dedup      bool
	}
	if err := json.Unmarshal(op.Value, &m); err != nil || op.F != "send" || op.Entity != "sender/"+m.Client || m.Client != "w3-"+m.To || m.Seq != 1 || !m.Dedup {
		t.Fatalf("first op %s %s %s", op.F, op.Entity, op.Value)
	}
}

package checker

import (
	"math"
	"testing"
)

// A register op packs and unpacks to itself, whichever of its fields are
// set, and the entity's ops come back in invocation order.
func TestRegOpPackRoundTrip(t *testing.T) {
	ops := []regOp{
		{call: 100, ret: 250, inv: 7, comp: 9, client: 3, op: opWrite, value: 42, flags: valueSet | resultOK},
		{call: 90, ret: never, inv: 5, comp: -1, client: 1, op: opCAS, expect: -5, value: math.MaxInt64, flags: valueSet | expectSet | resultUnknown},
		{call: 300, ret: 300, inv: 11, comp: 12, client: 0, op: opRead, result: math.MinInt64, flags: resultSet | resultHasValue | resultOK},
		{call: 95, ret: never, inv: 6, comp: 20, client: 1 << 30, op: opWrite, value: 0, flags: valueSet | resultUnknown},
	}
	var e entityOps
	for i := range ops {
		e.pack(&ops[i])
	}
	e.unpack()
	want := []regOp{ops[1], ops[3], ops[0], ops[2]} // by inv
	if len(e.ops) != len(want) {
		t.Fatalf("%d ops, want %d", len(e.ops), len(want))
	}
	for i := range want {
		if e.ops[i] != want[i] {
			t.Errorf("op %d: %+v, want %+v", i, e.ops[i], want[i])
		}
	}
	if e.packedOps.Len() != 0 || e.packedOps.Size() != 0 {
		t.Error("the packed form is kept after unpacking")
	}
}

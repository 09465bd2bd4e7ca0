package checker

import (
	"slices"
	"testing"
)

func TestCombine(t *testing.T) {
	r := func(vs ...Verdict) []Result {
		var rs []Result
		for _, v := range vs {
			rs = append(rs, Result{Verdict: v})
		}
		return rs
	}
	for _, c := range []struct {
		in   []Result
		want Verdict
	}{
		{nil, Unknown},
		{r(Valid), Valid},
		{r(Valid, Valid), Valid},
		{r(Valid, Unknown), Unknown},
		{r(Unknown, Invalid, Valid), Invalid},
		{r(Valid, "bogus"), Unknown},
	} {
		if got := Combine(c.in); got != c.want {
			t.Errorf("%v: got %s, want %s", c.in, got, c.want)
		}
	}
}

func TestForWorkload(t *testing.T) {
	for _, c := range []struct {
		workload string
		want     []string
	}{
		{"register", []string{"linearizable", "single-instance", "hand-off", "singleton-events", "liveness", "availability"}},
		{"idgen", []string{"unique-ids", "single-instance", "singleton-events", "liveness", "availability"}},
		{"append", []string{"append-log", "sender-order", "single-instance", "hand-off", "singleton-events", "liveness", "availability"}},
		{"deliver", []string{"delivery", "single-instance", "hand-off", "singleton-events", "liveness", "availability"}},
	} {
		var got []string
		for _, ch := range ForWorkload(c.workload) {
			got = append(got, ch.Name())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.workload, got, c.want)
		}
	}
}

// singleton-events judges only implementations with a singleton or a
// coordinator; where nothing says what the implementation declares (a run
// of an older harness), every checker applies.
func TestApplies(t *testing.T) {
	tests := []struct {
		c    string
		caps []string
		want bool
	}{
		{"singleton-events", []string{"membership", "sharding", "events"}, false},
		{"singleton-events", []string{"membership", "sharding", "coordinator"}, true},
		{"singleton-events", []string{"membership", "singleton"}, true},
		{"singleton-events", nil, true},
		{"hand-off", []string{"membership", "sharding"}, true},
		{"linearizable", []string{}, true},
	}
	for _, tt := range tests {
		e, _ := Lookup(tt.c)
		if got := e.Applies(tt.caps); got != tt.want {
			t.Errorf("%s with %v: applies %v, want %v", tt.c, tt.caps, got, tt.want)
		}
	}
}

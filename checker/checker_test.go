package checker

import (
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
	if c := ForWorkload("register"); len(c) != 1 || c[0].Name() != "linearizable" {
		t.Fatal(c)
	}
	if c := ForWorkload("idgen"); len(c) != 1 || c[0].Name() != "unique-ids" {
		t.Fatal(c)
	}
	if c := ForWorkload("append"); len(c) != 1 || c[0].Name() != "append-log" {
		t.Fatal(c)
	}
	if c := ForWorkload("bank"); c != nil {
		t.Fatal(c)
	}
}

package suite

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/harness/local"
)

// Workers' port ranges pass over those another program holds, and stop at
// a range that cannot be used at all.
func TestPickPortRanges(t *testing.T) {
	taken := func(ports ...int) func(int) error {
		return func(b int) error {
			if b >= 32600 {
				return errors.New("local: ports overlap this machine's ephemeral port range")
			}
			if slices.Contains(ports, b) {
				return fmt.Errorf("local: port %d is %w", b, local.ErrPortTaken)
			}
			return nil
		}
	}
	for _, tt := range []struct {
		name    string
		base, n int
		check   func(int) error
		want    []int
		wantErr string
	}{
		{"all free", 17400, 3, taken(), []int{17400, 17600, 17800}, ""},
		{"one held", 17400, 3, taken(17600), []int{17400, 17800, 18000}, ""},
		{"the first held", 17400, 1, taken(17400, 17600), []int{17800}, ""},
		{"held up to the ephemeral range", 32000, 2, taken(32000, 32200), nil, "port 32000 is taken"},
		{"a base port in the ephemeral range", 40000, 1, taken(), nil, "ephemeral"},
	} {
		got, err := pickPortRanges(tt.base, tt.n, tt.check)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: %v, %v; want an error with %q", tt.name, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

// Two suites started at the same moment from the same --base-port get
// ranges of their own: the first's reservations make the second pass
// over its ranges, though every port of them is free to a check; once
// the first releases them, they are free again.
func TestSuitesStartedTogetherTakeOtherRanges(t *testing.T) {
	base := 24400
	first, release, err := ReservePortRanges(base, 2)
	if err != nil {
		t.Fatal(err)
	}
	second, release2, err := ReservePortRanges(base, 2)
	if err != nil {
		release()
		t.Fatal(err)
	}
	for _, b := range second {
		if slices.Contains(first, b) {
			t.Errorf("both suites took the range from %d: %v and %v", b, first, second)
		}
	}
	release()
	release2()
	again, release3, err := ReservePortRanges(base, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer release3()
	if !slices.Equal(again, first) {
		t.Errorf("after release: %v, want the first suite's %v again", again, first)
	}
}

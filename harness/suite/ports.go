package suite

import (
	"errors"
	"fmt"

	"github.com/shardtest/shardtest/harness/local"
)

// ReservePortRanges picks n ranges of local ports from base
// (pickPortRanges) and reserves each (local.ReservePorts) until release:
// a range is taken only if its reservation succeeds and a cluster of the
// catalogue's largest size can start on it.
func ReservePortRanges(base, n int) (bases []int, release func(), err error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	bases, err = pickPortRanges(base, n, func(b int) error {
		r, err := local.ReservePorts(b)
		if err != nil {
			return err
		}
		if err := local.CheckPorts(b, maxLocalNodes); err != nil {
			r()
			return err
		}
		releases = append(releases, r)
		return nil
	})
	if err != nil {
		release()
		return nil, nil, err
	}
	return bases, release, nil
}

// PortStride separates the local port ranges of a suite's workers: a run
// uses its base port, base+1.. for its nodes' HTTP and base+101.. for
// their gossip, joins included.
const PortStride = 200

// pickPortRanges returns the base ports of n workers' ranges: the first n
// of base, base+PortStride, ... that check accepts. A range whose ports
// another program holds is passed over; the search ends at the first range
// that cannot be used at all (past the last port, or in the ephemeral
// range), with the first refusal as the error, so a bad --base-port still
// says what is wrong with it.
func pickPortRanges(base, n int, check func(base int) error) ([]int, error) {
	var bases []int
	var first error
	for b := base; len(bases) < n; b += PortStride {
		err := check(b)
		if err == nil {
			bases = append(bases, b)
			continue
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, local.ErrPortTaken) {
			return nil, fmt.Errorf("%d free port ranges from --base-port %d, found %d: %w", n, base, len(bases), first)
		}
	}
	return bases, nil
}

// maxLocalNodes is the most nodes a catalogue run starts on the local
// runtime (its nodes and the ones it joins), for the port check.
const maxLocalNodes = 12

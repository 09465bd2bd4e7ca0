package node

import (
	"net"
	"strconv"
	"strings"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/events"
	"github.com/shardtest/shardtest/impl/peer"
)

func splitHostPort(a string) (string, int, error) {
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || h == "" {
		return "", 0, &net.AddrError{Err: "bad port or host", Addr: a}
	}
	return h, port, nil
}

func eventsClockChanged(s clock.Skew) events.Event {
	return events.Event{Type: events.ClockChanged, Detail: "offset " + s.Offset.String() + " drift " + strconv.FormatFloat(s.Drift, 'g', -1, 64)}
}

func eventsFilterChanged(r peer.Rules) events.Event {
	return events.Event{Type: events.FilterChanged, Detail: "drop_in [" + strings.Join(r.DropIn, ",") + "] drop_out [" + strings.Join(r.DropOut, ",") + "]"}
}

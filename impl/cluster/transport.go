package cluster

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/peer"
)

// filteredTransport wraps memberlist's network transport with the node's
// in-process packet filter: datagrams are dropped per direction, and
// streams (dialled connections) need both directions. A dial to a cut peer
// waits out its timeout, as on a real network that drops packets.
type filteredTransport struct {
	*memberlist.NetTransport
	filter  *peer.Filter
	packets chan *memberlist.Packet
	done    chan struct{} // closed at Shutdown: stop forwarding
	drained chan struct{} // closed once the inner transport has shut down
	once    sync.Once
	wg      sync.WaitGroup
}

func newFilteredTransport(inner *memberlist.NetTransport, f *peer.Filter) *filteredTransport {
	t := &filteredTransport{
		NetTransport: inner,
		filter:       f,
		packets:      make(chan *memberlist.Packet),
		done:         make(chan struct{}),
		drained:      make(chan struct{}),
	}
	t.wg.Add(1)
	go t.forward()
	return t
}

// forward passes on the packets the filter lets in. It is owned by the
// transport; after Shutdown it keeps draining the inner transport, whose
// listeners block on an unread channel, until that has shut down too.
func (t *filteredTransport) forward() {
	defer t.wg.Done()
	in := t.NetTransport.PacketCh()
	for {
		select {
		case p := <-in:
			if !t.filter.AllowsFrom(p.From.String()) {
				continue
			}
			select {
			case t.packets <- p:
			case <-t.done:
			}
		case <-t.drained:
			return
		}
	}
}

func (t *filteredTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

func (t *filteredTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if !t.filter.AllowsTo(addr) {
		return clock.Machine{}.Now(), nil // sent, and lost on the way
	}
	return t.NetTransport.WriteTo(b, addr)
}

func (t *filteredTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

func (t *filteredTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if !t.filter.AllowsStream(addr) {
		timer := clock.Machine{}.NewTimer(timeout)
		defer timer.Stop()
		select {
		case <-timer.C():
		case <-t.done:
		}
		return nil, fmt.Errorf("dial %s: i/o timeout (cut by packet filter)", addr)
	}
	return t.NetTransport.DialTimeout(addr, timeout)
}

func (t *filteredTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

func (t *filteredTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.done)
		err = t.NetTransport.Shutdown()
		close(t.drained)
		t.wg.Wait()
	})
	return err
}

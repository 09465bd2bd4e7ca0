package cluster

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Transport carries membership's traffic between members: datagrams
// (heartbeats, down notices), full-state pushes over a stream, and the
// state exchange of a join. memberlist, over the node's packet filter, is
// the real one (Memberlist); a simulated network is another.
type Transport interface {
	// Join exchanges full state with each address (push-pull) and
	// reports how many answered.
	Join(addrs []string) (int, error)
	// Alive lists the gossip addresses the transport counts as live
	// members of its own view (for re-joining those it lost).
	Alive() []string
	// Send sends a datagram; it may be lost on the way.
	Send(addr string, msg []byte) error
	// SendReliable sends over a stream and returns once it was delivered
	// or failed.
	SendReliable(addr string, msg []byte) error
	// Leave tells the others this member leaves, waiting at most timeout.
	Leave(timeout time.Duration) error
	// Shutdown stops the transport; nothing is delivered after it.
	Shutdown() error
}

// Receiver is what a Transport calls back into. Calls may come under the
// transport's own locks: a receiver never calls back into the transport.
type Receiver interface {
	// Bound tells the address the transport is reached at; it comes first,
	// before any other call.
	Bound(addr string)
	// Meta is this member as others should learn it when they meet it.
	Meta() []byte
	// Message is a datagram or a pushed state.
	Message(msg []byte)
	// LocalState is the state to give a member exchanging state with
	// this one (join tells whether it joins).
	LocalState(join bool) []byte
	// MergeRemoteState takes the state another member gave.
	MergeRemoteState(state []byte, join bool)
	// Met tells of a member the transport has just met, by its Meta.
	Met(meta []byte)
}

// StartTransport starts one member's transport: name is the member's UID.
type StartTransport func(name string, r Receiver) (Transport, error)

// Memberlist is the real transport: hashicorp/memberlist on bind:port
// (port 0 picks a free one), advertising advertise (bind if empty),
// with the node's packet filter in front of it.
func Memberlist(cfg Config) StartTransport {
	return func(name string, r Receiver) (Transport, error) {
		log := newStdLogger(cfg.Logger.With("member", name))
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{cfg.BindAddr},
			BindPort:  cfg.BindPort,
			Logger:    log,
		})
		if err != nil {
			return nil, fmt.Errorf("cluster: gossip transport on %s:%d: %w", cfg.BindAddr, cfg.BindPort, err)
		}
		port := nt.GetAutoBindPort()
		adv := cfg.AdvertiseAddr
		if adv == "" {
			adv = cfg.BindAddr
		}
		tr := newFilteredTransport(nt, cfg.Filter)
		r.Bound(net.JoinHostPort(adv, strconv.Itoa(port)))

		mc := memberlist.DefaultLANConfig()
		mc.Name = name
		mc.Transport = tr
		mc.AdvertiseAddr = adv
		mc.AdvertisePort = port
		d := &mlDelegate{r: r}
		mc.Delegate = d
		mc.Events = d
		mc.Logger = log
		mc.TCPTimeout = time.Second
		mc.PushPullInterval = 5 * time.Second
		// memberlist compresses every message with LZW by default, and
		// each compression allocates a fresh 64 KB-class table: for the
		// heartbeat datagrams (about 150 bytes, one to every member five
		// times a second) that was a third of an idle node's CPU and most
		// of its garbage (a 15-node profile), for no saving worth having.
		// Receivers still read compressed messages, so a cluster may mix
		// builds.
		mc.EnableCompression = false
		ml, err := memberlist.Create(mc)
		if err != nil {
			tr.Shutdown()
			return nil, fmt.Errorf("cluster: start memberlist: %w", err)
		}
		return mlTransport{ml}, nil
	}
}

type mlTransport struct{ ml *memberlist.Memberlist }

func (t mlTransport) Join(addrs []string) (int, error) { return t.ml.Join(addrs) }

func (t mlTransport) Alive() []string {
	var addrs []string
	for _, n := range t.ml.Members() {
		addrs = append(addrs, n.Address())
	}
	return addrs
}

func (t mlTransport) Send(addr string, msg []byte) error {
	return t.ml.SendToAddress(memberlist.Address{Addr: addr}, msg)
}

func (t mlTransport) SendReliable(addr string, msg []byte) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("gossip address %s: %w", addr, err)
	}
	return t.ml.SendReliable(&memberlist.Node{Addr: net.ParseIP(host), Port: uint16(p)}, msg)
}

func (t mlTransport) Leave(timeout time.Duration) error { return t.ml.Leave(timeout) }
func (t mlTransport) Shutdown() error                   { return t.ml.Shutdown() }

// mlDelegate adapts a Receiver to memberlist's delegates.
type mlDelegate struct{ r Receiver }

func (d *mlDelegate) NodeMeta(limit int) []byte {
	if b := d.r.Meta(); len(b) <= limit {
		return b
	}
	return nil
}

func (d *mlDelegate) NotifyMsg(b []byte)                         { d.r.Message(b) }
func (d *mlDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *mlDelegate) LocalState(join bool) []byte                { return d.r.LocalState(join) }
func (d *mlDelegate) MergeRemoteState(buf []byte, join bool)     { d.r.MergeRemoteState(buf, join) }
func (d *mlDelegate) NotifyJoin(n *memberlist.Node)              { d.r.Met(n.Meta) }
func (d *mlDelegate) NotifyLeave(*memberlist.Node)               {}
func (d *mlDelegate) NotifyUpdate(*memberlist.Node)              {}

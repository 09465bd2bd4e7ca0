package nftables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"slices"

	nft "github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the name of the one table this package owns, in family inet.
const TableName = "shardtest"

// The chains of the table. Both are base chains with policy accept: only
// the rules drop.
const (
	inputChain  = "input"
	outputChain = "output"
)

// Offsets of the source and destination address in the IPv4 header.
const (
	saddrOffset = 12
	daddrOffset = 16
)

// lossModulus is the range of the random number a loss rule compares with
// its percentage: numgen random mod 100 yields 0..99.
const lossModulus = 100

// Table is the shardtest table of one network namespace. The zero value
// (and a nil *Table) works in the calling thread's network namespace, which
// for `docker exec` is the container's.
//
// There is no context.Context: each operation is one or two netlink
// requests to the local kernel, which answers synchronously; there is
// nothing to wait for and nothing to cancel.
type Table struct {
	opts []nft.ConnOption
}

// New returns the table reached through a netlink connection made with
// opts, e.g. nftables.WithNetNSFd(fd) for another network namespace.
func New(opts ...nft.ConnOption) *Table {
	return &Table{opts: slices.Clone(opts)}
}

// Apply replaces the table in the current network namespace with one
// implementing r. See Table.Apply.
func Apply(r Rules) error { return (*Table)(nil).Apply(r) }

// Heal removes the table from the current network namespace. See Table.Heal.
func Heal() error { return (*Table)(nil).Heal() }

// Current reads back the rules installed in the current network namespace.
// See Table.Current.
func Current() (Rules, error) { return (*Table)(nil).Current() }

func (t *Table) conn() (*nft.Conn, error) {
	var opts []nft.ConnOption
	if t != nil {
		opts = t.opts
	}
	c, err := nft.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables: open netlink connection: %w", err)
	}
	return c, nil
}

// table is the nftables object of the one table this package touches.
func table() *nft.Table {
	return &nft.Table{Name: TableName, Family: nft.TableFamilyINet}
}

// Apply validates r and replaces the table atomically with one
// implementing it: the old rules and the new never both apply, and on
// error nothing has changed. Rules that drop nothing (r.IsZero()) remove
// the table instead, like Heal, so a healed node carries no trace of the
// nemesis.
func (t *Table) Apply(r Rules) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("nftables: invalid rules: %w", err)
	}
	if r.IsZero() {
		return t.Heal()
	}
	c, err := t.conn()
	if err != nil {
		return err
	}
	tbl := table()
	// One batch is one kernel transaction. Adding the table first makes the
	// delete succeed whether or not it existed; the second add starts it
	// afresh, so rules never stack up across Applies.
	c.AddTable(tbl)
	c.DelTable(tbl)
	c.AddTable(tbl)
	in := c.AddChain(baseChain(tbl, inputChain, nft.ChainHookInput))
	out := c.AddChain(baseChain(tbl, outputChain, nft.ChainHookOutput))
	add := func(ch *nft.Chain, exprs []expr.Any) {
		c.AddRule(&nft.Rule{Table: tbl, Chain: ch, Exprs: exprs})
	}
	for _, a := range r.DropIn {
		add(in, dropExprs(saddrOffset, a))
	}
	for _, a := range r.DropOut {
		add(out, dropExprs(daddrOffset, a))
	}
	for _, a := range r.LossPeers {
		add(in, lossExprs(saddrOffset, a, r.LossPercent))
		add(out, lossExprs(daddrOffset, a, r.LossPercent))
	}
	if err := c.Flush(); err != nil {
		return opError("replace table inet "+TableName, err)
	}
	return nil
}

// Heal removes the table; it is not an error if there is none.
func (t *Table) Heal() error {
	c, err := t.conn()
	if err != nil {
		return err
	}
	tbl := table()
	// The add makes the delete succeed when the table is absent, in the
	// same transaction, so there is no window for a list-then-delete race.
	c.AddTable(tbl)
	c.DelTable(tbl)
	if err := c.Flush(); err != nil {
		return opError("delete table inet "+TableName, err)
	}
	return nil
}

// Current reads the table back from the kernel, so a caller sees what is
// really installed rather than what was asked for. No table means the zero
// Rules (with nil lists). A table holding anything Apply would not have
// written (another chain, a chain that does not accept by default, a rule
// of another shape) is an error rather than a guess.
func (t *Table) Current() (Rules, error) {
	c, err := t.conn()
	if err != nil {
		return Rules{}, err
	}
	chains, err := c.ListChainsOfTableFamily(nft.TableFamilyINet)
	if err != nil {
		return Rules{}, opError("list chains of family inet", err)
	}
	var r Rules
	var lossIn, lossOut []netip.Addr
	percent := 0
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != TableName {
			continue
		}
		if err := checkChain(ch); err != nil {
			return Rules{}, err
		}
		rules, err := c.GetRules(table(), ch)
		if err != nil {
			return Rules{}, opError(fmt.Sprintf("list rules of chain inet %s %s", TableName, ch.Name), err)
		}
		off := uint32(saddrOffset)
		drop, loss := &r.DropIn, &lossIn
		if ch.Name == outputChain {
			off = daddrOffset
			drop, loss = &r.DropOut, &lossOut
		}
		for _, rule := range rules {
			addr, p, err := decodeRule(off, rule)
			if err != nil {
				return Rules{}, fmt.Errorf("nftables: chain inet %s %s: %w", TableName, ch.Name, err)
			}
			if p == 0 {
				*drop = append(*drop, addr)
				continue
			}
			if percent != 0 && p != percent {
				return Rules{}, fmt.Errorf("nftables: table inet %s: loss rules disagree: %d%% and %d%%", TableName, percent, p)
			}
			percent = p
			*loss = append(*loss, addr)
		}
	}
	// Apply writes each loss peer into both chains, in the same order.
	if !slices.Equal(lossIn, lossOut) {
		return Rules{}, fmt.Errorf("nftables: table inet %s: loss peers differ between input (%s) and output (%s)",
			TableName, joinAddrs(lossIn), joinAddrs(lossOut))
	}
	if len(lossIn) > 0 {
		r.LossPercent, r.LossPeers = percent, lossIn
	}
	return r, nil
}

// baseChain is one of the table's two chains.
func baseChain(tbl *nft.Table, name string, hook *nft.ChainHook) *nft.Chain {
	accept := nft.ChainPolicyAccept
	return &nft.Chain{
		Name:     name,
		Table:    tbl,
		Type:     nft.ChainTypeFilter,
		Hooknum:  hook,
		Priority: nft.ChainPriorityFilter,
		Policy:   &accept,
	}
}

// checkChain refuses a chain of the table that Apply would not have made:
// Current could not describe what it does.
func checkChain(ch *nft.Chain) error {
	var hook *nft.ChainHook
	switch ch.Name {
	case inputChain:
		hook = nft.ChainHookInput
	case outputChain:
		hook = nft.ChainHookOutput
	default:
		return fmt.Errorf("nftables: table inet %s has a chain %q that shardtest does not install (edited by hand?)", TableName, ch.Name)
	}
	switch {
	case ch.Hooknum == nil || *ch.Hooknum != *hook:
		return fmt.Errorf("nftables: chain inet %s %s is not on the %s hook", TableName, ch.Name, ch.Name)
	case ch.Policy == nil || *ch.Policy != nft.ChainPolicyAccept:
		return fmt.Errorf("nftables: chain inet %s %s does not have policy accept: it may drop everything", TableName, ch.Name)
	}
	return nil
}

// matchExprs matches IPv4 packets whose address at off in the network
// header (saddrOffset or daddrOffset) is a. The nfproto check comes first
// because an inet chain also sees IPv6 packets, where those bytes are
// something else.
func matchExprs(off uint32, a netip.Addr) []expr.Any {
	ip := a.As4()
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip[:]},
	}
}

// dropExprs is `ip saddr|daddr A drop`.
func dropExprs(off uint32, a netip.Addr) []expr.Any {
	return append(matchExprs(off, a), &expr.Verdict{Kind: expr.VerdictDrop})
}

// lossExprs is `ip saddr|daddr A numgen random mod 100 < percent drop`.
//
// numgen leaves a host-order number in the register and cmp lt compares
// bytes (memcmp). nft(8) turns the number to network order first with a
// byteorder expression, but google/nftables cannot read byteorder back (it
// silently leaves it out of a listed rule), so Current could not check the
// rule. Instead the percentage is written in host order too: with both
// numbers below 256 all bytes but one are zero, and memcmp orders them
// correctly on either byte order. nft(8) lists the rule as written here.
func lossExprs(off uint32, a netip.Addr, percent int) []expr.Any {
	return append(matchExprs(off, a),
		&expr.Numgen{Register: 1, Modulus: lossModulus, Type: unix.NFT_NG_RANDOM},
		&expr.Cmp{Op: expr.CmpOpLt, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, uint32(percent))},
		&expr.Verdict{Kind: expr.VerdictDrop},
	)
}

// decodeRule reads a rule Apply wrote into a chain matching the address at
// off: the address, and the loss percentage (0 for a plain drop). The rule
// must be exactly what dropExprs or lossExprs build, so anything else,
// however similar, is reported instead of misread. (One blind spot:
// google/nftables leaves expressions it cannot parse, such as byteorder,
// out of a listed rule, so a hand-made rule that differs only by one of
// those passes.)
func decodeRule(off uint32, r *nft.Rule) (netip.Addr, int, error) {
	unknown := fmt.Errorf("rule handle %d is not one shardtest installs (edited by hand?)", r.Handle)
	var addr netip.Addr
	if len(r.Exprs) > 3 {
		if c, ok := r.Exprs[3].(*expr.Cmp); ok && len(c.Data) == 4 {
			addr = netip.AddrFrom4([4]byte(c.Data))
		}
	}
	if !addr.IsValid() {
		return netip.Addr{}, 0, unknown
	}
	want, percent := dropExprs(off, addr), 0
	if len(r.Exprs) == len(lossExprs(off, addr, 1)) {
		if c, ok := r.Exprs[5].(*expr.Cmp); ok && len(c.Data) == 4 {
			p := binary.NativeEndian.Uint32(c.Data)
			if p < 1 || p > lossModulus {
				return netip.Addr{}, 0, fmt.Errorf("rule handle %d: loss of %d%%, want 1..100", r.Handle, p)
			}
			percent = int(p)
			want = lossExprs(off, addr, percent)
		}
	}
	if !reflect.DeepEqual(r.Exprs, want) {
		return netip.Addr{}, 0, unknown
	}
	return addr, percent, nil
}

// opError wraps a netlink failure, with a hint when it is a missing
// privilege, the one failure a caller can do something about.
func opError(op string, err error) error {
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("nftables: %s: %w (needs CAP_NET_ADMIN in this network namespace)", op, err)
	}
	return fmt.Errorf("nftables: %s: %w", op, err)
}

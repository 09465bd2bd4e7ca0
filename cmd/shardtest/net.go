package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/nemesis/nftables"
)

func newNetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Install, show and remove a node's packet drops (run inside the node's network namespace)",
		Long: `Install, show and remove the packet drops of the partition and loss
nemeses, in the network namespace this command runs in.

The harness runs it inside a node's network namespace, with docker exec
(or from a sidecar container sharing the namespace); it needs CAP_NET_ADMIN
there. It is pure Go: no nft or iptables binary is needed in the image.

Everything lives in one nftables table, inet ` + nftables.TableName + `, with an input and an
output chain. apply replaces the whole table in one kernel transaction, so
faults never stack and a failed apply changes nothing; heal deletes it. No
other table is touched (Docker's own rules stay as they are).

Rules name peers by IPv4 address. The harness reaches a node from the
Docker bridge gateway, which the rules never name, so the harness's own
path is never cut. Established connections are cut too: there is no
"accept established" rule.

  shardtest net apply --drop-in 10.0.0.3,10.0.0.4 --drop-out 10.0.0.3
  shardtest net apply --loss 20 --loss-peers 10.0.0.3,10.0.0.4
  shardtest net show
  shardtest net heal
  shardtest net dial 10.0.0.3:7000 --timeout 500ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newNetApplyCmd(), newNetHealCmd(), newNetShowCmd(), newNetDialCmd())
	return cmd
}

func newNetApplyCmd() *cobra.Command {
	var dropIn, dropOut, lossPeers []string
	var loss int
	cmd := &cobra.Command{
		Use:   "apply [--drop-in IP,IP] [--drop-out IP,IP] [--loss PCT --loss-peers IP,IP]",
		Short: "Replace this namespace's packet drops with the ones given",
		Long: `Replace the packet drops of this network namespace with exactly the ones
given: rules from an earlier apply do not remain. With no flags every rule
is removed, like heal.

Flags:
  --drop-in     IPv4 addresses whose packets to this node are all dropped.
  --drop-out    IPv4 addresses this node's packets to are all dropped.
  --loss        Percentage (1..100) of the packets to and from --loss-peers
                dropped, each packet independently at random.
  --loss-peers  IPv4 addresses --loss applies to.

Lists are comma-separated, or the flag is repeated. Input is checked before
anything is changed: IPv6, duplicates, a percentage outside 0..100, --loss
without --loss-peers or the reverse are refused. On success it prints one
line with the rules read back from the kernel.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var r nftables.Rules
			var errs []error
			var err error
			r.DropIn, err = parseAddrs("--drop-in", dropIn)
			errs = append(errs, err)
			r.DropOut, err = parseAddrs("--drop-out", dropOut)
			errs = append(errs, err)
			r.LossPeers, err = parseAddrs("--loss-peers", lossPeers)
			errs = append(errs, err)
			r.LossPercent = loss
			if err := errors.Join(errs...); err != nil {
				return fmt.Errorf("net apply: nothing changed: %w", err)
			}
			if err := r.Validate(); err != nil {
				return fmt.Errorf("net apply: nothing changed: %w", err)
			}
			if err := nftables.Apply(r); err != nil {
				return fmt.Errorf("net apply: %w", err)
			}
			// Report what the kernel holds, not what was asked: the
			// harness logs this line as proof of the fault.
			cur, err := nftables.Current()
			if err != nil {
				return fmt.Errorf("net apply: applied, but reading it back failed: %w", err)
			}
			if !cur.Equal(r) {
				return fmt.Errorf("net apply: the kernel holds %q, not the %q asked for", cur, r)
			}
			if cur.IsZero() {
				fmt.Fprintf(cmd.OutOrStdout(), "table inet %s removed: nothing dropped\n", nftables.TableName)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "table inet %s: %s\n", nftables.TableName, cur)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&dropIn, "drop-in", nil, "drop every packet from these IPv4 addresses (comma-separated)")
	f.StringSliceVar(&dropOut, "drop-out", nil, "drop every packet to these IPv4 addresses (comma-separated)")
	f.IntVar(&loss, "loss", 0, "drop this percentage (1..100) of the packets to and from --loss-peers, at random")
	f.StringSliceVar(&lossPeers, "loss-peers", nil, "IPv4 addresses --loss applies to (comma-separated)")
	return cmd
}

// parseAddrs parses one list flag of net apply.
func parseAddrs(flag string, ss []string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	var errs []error
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if s == "" {
			errs = append(errs, fmt.Errorf("%s: empty address in the list", flag))
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: not an IP address", flag, s))
			continue
		}
		addrs = append(addrs, a)
	}
	return addrs, errors.Join(errs...)
}

func newNetHealCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "heal",
		Short: "Remove this namespace's packet drops",
		Long: `Delete the table inet ` + nftables.TableName + ` from this network namespace, so nothing
is dropped. It is not an error if there is none. Takes no flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := nftables.Heal(); err != nil {
				return fmt.Errorf("net heal: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "table inet %s removed: nothing dropped\n", nftables.TableName)
			return nil
		},
	}
}

// netShowJSON is the output of net show. Lists are never null.
type netShowJSON struct {
	DropIn      []netip.Addr `json:"drop_in"`
	DropOut     []netip.Addr `json:"drop_out"`
	LossPercent int          `json:"loss_percent"`
	LossPeers   []netip.Addr `json:"loss_peers"`
}

func newNetShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Print this namespace's packet drops, read back from the kernel, as JSON",
		Long: `Print the packet drops installed in this network namespace, as read back
from the kernel, on one line of JSON:

  {"drop_in":["10.0.0.3"],"drop_out":[],"loss_percent":0,"loss_peers":[]}

A table inet ` + nftables.TableName + ` that apply would not have written (edited by
hand) is an error rather than a guess. Takes no flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := nftables.Current()
			if err != nil {
				return fmt.Errorf("net show: %w", err)
			}
			nonNil := func(a []netip.Addr) []netip.Addr {
				if a == nil {
					return []netip.Addr{}
				}
				return a
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(netShowJSON{
				DropIn:      nonNil(r.DropIn),
				DropOut:     nonNil(r.DropOut),
				LossPercent: r.LossPercent,
				LossPeers:   nonNil(r.LossPeers),
			})
		},
	}
}

func newNetDialCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "dial ADDR",
		Short: "Open a TCP connection to ADDR (host:port) to prove a path is open or cut",
		Long: `Open a TCP connection to ADDR (host:port) from this network namespace and
close it again. Prints "connected" and exits 0 on success; otherwise exits
non-zero with the error. End-to-end tests use it to prove a cut is real.

Flags:
  --timeout  How long to wait for the connection. Default 2s.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr := args[0]
			if timeout <= 0 {
				return fmt.Errorf("net dial: --timeout %s: want a positive duration", timeout)
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return fmt.Errorf("net dial: %q is not host:port: %w", addr, err)
			}
			d := net.Dialer{Timeout: timeout}
			c, err := d.DialContext(cmd.Context(), "tcp", addr)
			if err != nil {
				return fmt.Errorf("net dial: %w", err)
			}
			_ = c.Close()
			fmt.Fprintln(cmd.OutOrStdout(), "connected")
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long to wait for the connection")
	return cmd
}

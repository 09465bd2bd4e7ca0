package conform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/protocol"
)

// The probes are what a hostile client, a careless operator or a stale
// member does to a running cluster (issue 31's probes, kept as a suite):
// forged requests, bad bodies, a slow client, a connection flood. Each
// says what it sends and what the node must answer, and after each the
// cluster must still work: ids increase through every node, and a write
// reads back through every node. `shardtest conform --probe` starts the
// cluster and runs them.

// Applies says which implementations a probe is for.
type Applies string

// What a probe applies to.
const (
	// AnyImplementation: the public port, which every implementation
	// serves.
	AnyImplementation Applies = "any"
	// ReferenceNode: the reference node's own node-to-node routes on its
	// peer port, which another implementation does not have. They are
	// reached as a stranger or a member would, so they need the members'
	// address and the cluster's secret (PeerAccess): the local runtime.
	ReferenceNode Applies = "reference node"
)

// Probe is one hostile or careless act and what must hold.
type Probe struct {
	Name string
	// Sends says what the probe does.
	Sends string
	// Expect is what the node must answer, and what must hold after.
	Expect  string
	Applies Applies
	// Needs are the capabilities it applies to (all must be declared).
	Needs []string
	// MinNodes is how many nodes it needs (0: one).
	MinNodes int
	// Hold is how long ids must keep coming on every node afterwards: a
	// forged hand-over stopped the id generator a moment later, not at
	// once.
	Hold time.Duration
	// run does it; it returns what the node answered (the evidence), or
	// why that is wrong.
	run func(ctx context.Context, p *prober) (string, error)
}

// PeerAccess is what the reference node's peer-port probes need: the
// cluster's secret, and (by being given at all) that the harness runs at
// the members' address, so a request it forges passes for a member's.
type PeerAccess struct {
	Secret string
}

// ProbeOptions configure a probe run.
type ProbeOptions struct {
	// Only are the probes to run (nil: all; SelectProbes checks names).
	Only []string
	// Peer: nil skips the peer-port probes, saying why.
	Peer *PeerAccess
	// SlowClientLimit is how long a client sending a header byte a second
	// may stay connected (0: DefaultSlowClientLimit).
	SlowClientLimit time.Duration
	// FloodConnections is how many idle connections the flood opens (0:
	// DefaultFloodConnections).
	FloodConnections int
}

// Defaults of ProbeOptions.
const (
	// DefaultSlowClientLimit: the reference node (and the kit) cut a
	// request header that has not arrived in 10 s.
	DefaultSlowClientLimit = 15 * time.Second
	// DefaultFloodConnections is issue 31's flood.
	DefaultFloodConnections = 2000
	// HealthLimit is how soon GET /v1/health must answer while a probe
	// holds connections ("at once").
	HealthLimit = 2 * time.Second
)

// ProbeResult is a probe's outcome with its evidence.
type ProbeResult struct {
	Probe   string  `json:"probe"`
	Sends   string  `json:"sends"`
	Expect  string  `json:"expect"`
	Applies Applies `json:"applies"`
	Verdict Verdict `json:"verdict"`
	// Evidence is what the node answered; After what held afterwards.
	Evidence string `json:"evidence,omitempty"`
	After    string `json:"after,omitempty"`
	// Detail is what was wrong, or why the probe was skipped.
	Detail string        `json:"detail,omitempty"`
	Took   time.Duration `json:"took_ns"`
}

// ProbeReport is a probe run.
type ProbeReport struct {
	Implementation string   `json:"implementation"`
	Capabilities   []string `json:"capabilities"`
	Nodes          int      `json:"nodes"`
	// Reference: the nodes are reference nodes whose peer ports were
	// found (their status names them).
	Reference bool          `json:"reference"`
	Results   []ProbeResult `json:"results"`
	Tally
}

// SelectProbes returns the probes named (all for none), or an error
// naming an unknown one and the known ones.
func SelectProbes(names []string) ([]Probe, error) {
	all := Probes()
	if len(names) == 0 {
		return all, nil
	}
	var out []Probe
	for _, n := range names {
		i := slices.IndexFunc(all, func(p Probe) bool { return p.Name == n })
		if i < 0 {
			known := make([]string, len(all))
			for k, p := range all {
				known[k] = p.Name
			}
			return nil, fmt.Errorf("no probe %q (probes: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// afterExpect is what must hold after every probe.
const afterExpect = "ids increase through every node; a register write reads back through every node"

// prober is what the probes share: the rules' session (a client per node,
// the capabilities), the options, the reference node's peer ports.
type prober struct {
	*session
	opts ProbeOptions
	// peers are the nodes' members with their peer ports (reference
	// nodes only), oldest is the uid node 0 names oldest.
	peers  []peerNode
	oldest string
	// lastID is the highest id seen: ids increase across the whole run.
	lastID int64
}

// RunProbes runs the probes (ProbeOptions.Only, else all) against the
// cluster of nodes: first a baseline (the cluster works before any probe),
// then each probe and what must hold after it. It never stops at a failed
// probe.
func RunProbes(ctx context.Context, nodes []Node, o ProbeOptions) ProbeReport {
	start := time.Now()
	if o.SlowClientLimit <= 0 {
		o.SlowClientLimit = DefaultSlowClientLimit
	}
	if o.FloodConnections <= 0 {
		o.FloodConnections = DefaultFloodConnections
	}
	rep := ProbeReport{Nodes: len(nodes)}
	probes, err := SelectProbes(o.Only)
	if err != nil || len(nodes) == 0 {
		if err == nil {
			err = errors.New("no node given")
		}
		rep.add(ProbeResult{Probe: "baseline", Verdict: Fail, Detail: err.Error()})
		return rep
	}
	p := &prober{session: newSession(nodes), opts: o}
	rep.Implementation, rep.Capabilities = p.readCapabilities(ctx)
	base := ProbeResult{Probe: "baseline", Sends: "nothing: before any probe", Applies: AnyImplementation,
		Expect: "every node ready and listing every node up; " + afterExpect}
	bstart := time.Now()
	err = checkConverged(ctx, p.session)
	if err == nil {
		base.After, err = p.after(ctx, 0)
	}
	base.Took = time.Since(bstart)
	if err != nil {
		base.Verdict, base.Detail = Fail, err.Error()
	} else {
		base.Verdict = Pass
	}
	rep.add(base)
	p.findPeers(ctx)
	rep.Reference = len(p.peers) > 0
	for _, pr := range probes {
		res := ProbeResult{Probe: pr.Name, Sends: pr.Sends, Expect: pr.Expect, Applies: pr.Applies}
		if base.Verdict != Pass {
			res.Verdict, res.Detail = Skip, "the cluster did not work before any probe (baseline)"
		} else {
			p.run(ctx, pr, &res)
		}
		rep.add(res)
	}
	rep.Took = time.Since(start)
	return rep
}

func (r *ProbeReport) add(res ProbeResult) {
	r.count(res.Verdict)
	r.Results = append(r.Results, res)
}

// run runs one probe, if it applies, and the check after it.
func (p *prober) run(ctx context.Context, pr Probe, res *ProbeResult) {
	start := time.Now()
	defer func() { res.Took = time.Since(start) }()
	if why := p.skips(pr); why != "" {
		res.Verdict, res.Detail = Skip, why
		return
	}
	if ctx.Err() != nil {
		res.Verdict, res.Detail = Fail, "stopped: "+ctx.Err().Error()
		return
	}
	evidence, err := pr.run(ctx, p)
	if isSkip(err) {
		res.Verdict, res.Detail = Skip, err.Error()
		return
	}
	res.Evidence = evidence
	after, aerr := p.after(ctx, pr.Hold)
	res.After = after
	var errs []string
	if err != nil {
		errs = append(errs, err.Error())
	}
	if aerr != nil {
		errs = append(errs, "afterwards: "+aerr.Error())
	}
	if len(errs) > 0 {
		res.Verdict, res.Detail = Fail, strings.Join(errs, "; ")
		return
	}
	res.Verdict = Pass
}

// skips says why pr does not apply to this cluster ("": it does).
func (p *prober) skips(pr Probe) string {
	var missing []string
	for _, c := range pr.Needs {
		if !p.caps.Has(c) {
			missing = append(missing, c)
		}
	}
	switch {
	case pr.Applies == ReferenceNode && len(p.peers) == 0:
		return fmt.Sprintf("the reference node's own node-to-node routes: %q is not the reference node (or its status names no peer port)", p.caps.Implementation)
	case pr.Applies == ReferenceNode && p.opts.Peer == nil:
		return "the peer port is reached as a member would, from the members' address with the cluster's secret: run with --runtime local"
	case len(missing) > 0:
		return "capability " + strings.Join(missing, ", ") + " not declared"
	case len(p.nodes) < max(pr.MinNodes, 1):
		return fmt.Sprintf("needs %d nodes, the cluster has %d", pr.MinNodes, len(p.nodes))
	}
	return ""
}

// after checks what must hold after every probe: ids increase through
// every node (on and on for hold) above every id before, and a register
// write reads back through every node. It says what held.
func (p *prober) after(ctx context.Context, hold time.Duration) (string, error) {
	var said, errs []string
	if p.caps.HasSingleton(protocol.IDGenerator) {
		n, last, err := p.idsIncrease(ctx, p.lastID, 2, hold)
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			what := fmt.Sprintf("%d ids increasing through %d nodes, up to %d", n, len(p.nodes), last)
			if hold > 0 {
				what += fmt.Sprintf(" over %v", hold)
			}
			said = append(said, what)
		}
		p.lastID = max(p.lastID, last)
	}
	if p.caps.Has(protocol.CapSharding) && p.caps.HasEntityType(protocol.TypeRegister) {
		p.written = ""
		err := checkEntityAsk(ctx, p.session)
		if err == nil {
			err = checkReadBack(ctx, p.session)
		}
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			said = append(said, fmt.Sprintf("register %s written through %s read back through every node", p.written, p.nodes[0].Name))
		}
	}
	if len(said)+len(errs) == 0 {
		said = append(said, "nothing to check: neither the id-generator singleton nor the register entity type is declared")
	}
	return strings.Join(said, "; "), joined(errs)
}

// Print lists every probe's verdict, what it sent, what was expected, the
// evidence, what held after, and the tally.
func (r ProbeReport) Print(w io.Writer) {
	impl := r.Implementation
	if impl == "" {
		impl = "(capabilities unreadable)"
	}
	ref := "not the reference node: its peer-port probes skip"
	if r.Reference {
		ref = "the reference node: its peer-port probes apply"
	}
	fmt.Fprintf(w, "probe: %s on %d nodes (%s)\n", impl, r.Nodes, ref)
	for _, res := range r.Results {
		fmt.Fprintf(w, "  %-4s %-28s %s\n", strings.ToUpper(string(res.Verdict)), res.Probe, res.Sends)
		if res.Verdict == Skip {
			fmt.Fprintf(w, "       skipped: %s\n", res.Detail)
			continue
		}
		fmt.Fprintf(w, "       expected: %s\n", res.Expect)
		for _, l := range []struct{ k, v string }{{"answered", res.Evidence}, {"after", res.After}, {"wrong", res.Detail}} {
			if l.v != "" {
				fmt.Fprintf(w, "       %s: %s\n", l.k, l.v)
			}
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped (%v)\n", r.Passed, r.Failed, r.Skipped, r.Took.Round(100*time.Millisecond))
}

// Cases are the report's JUnit cases: a failed probe is a failure, a
// skipped one skipped.
func (r ProbeReport) Cases() []report.Case {
	var cases []report.Case
	for _, res := range r.Results {
		c := report.Case{Name: res.Probe, Out: fmt.Sprintf("%s (applies to: %s)\nexpected: %s\nanswered: %s\nafter: %s", res.Sends, res.Applies, res.Expect, res.Evidence, res.After)}
		switch res.Verdict {
		case Fail:
			c.Failure, c.Text = res.Detail, res.Detail
		case Skip:
			c.Skipped = res.Detail
		}
		cases = append(cases, c)
	}
	return cases
}

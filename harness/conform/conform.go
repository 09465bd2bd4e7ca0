// Package conform checks, rule by rule, that a running cluster of an
// implementation serves shardtest/1 the way the harness relies on
// (docs/protocol.md): the fields of every capability it declares, members
// and ages, served_by on every reply, error bodies and their outcomes,
// strict request decoding, the event log, entity replies and state read
// back through every node. Each rule has a name, a one-line explanation
// and the section of docs/protocol.md it comes from; a rule that needs a
// capability the implementation does not declare is skipped. `shardtest
// conform` starts the cluster and runs them.
package conform

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// Node is a node of the cluster under test.
type Node struct {
	Name string
	// Addr is its shardtest/1 address (host:port) from the harness.
	Addr string
}

// Verdict is a rule's outcome.
type Verdict string

// Verdicts.
const (
	Pass Verdict = "pass"
	Fail Verdict = "fail"
	// Skip: the rule does not apply (a capability not declared).
	Skip Verdict = "skip"
)

// Rule is one thing the harness relies on.
type Rule struct {
	Name string
	// Doc says what the rule demands, in one line.
	Doc string
	// Section is the heading of docs/protocol.md it comes from.
	Section string
	// Needs are the capabilities it applies to (all must be declared).
	Needs []string
	// Since is the revision of shardtest/1 (protocol.Revisions) that
	// introduced what the rule demands now.
	Since int
	check func(ctx context.Context, s *session) error
}

// Result is a rule's outcome with what was wrong (or why it was skipped).
type Result struct {
	Rule    string  `json:"rule"`
	Doc     string  `json:"doc"`
	Section string  `json:"section"`
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail,omitempty"`
	// Since is the revision that introduced the rule's demand; New marks
	// a failed rule that arrived after the revision the implementation
	// says it was written for (still a failure).
	Since int  `json:"since"`
	New   bool `json:"new_since_your_revision,omitempty"`
}

// Report is a conform run.
type Report struct {
	Implementation string   `json:"implementation"`
	Capabilities   []string `json:"capabilities"`
	// Revision is the revision the implementation says it was written
	// for (0: not said); Current is the harness's.
	Revision int      `json:"revision,omitempty"`
	Current  int      `json:"current_revision"`
	Nodes    int      `json:"nodes"`
	Results  []Result `json:"results"`
	Tally
}

// Tally counts the verdicts of a run of rules or probes.
type Tally struct {
	Passed  int           `json:"passed"`
	Failed  int           `json:"failed"`
	Skipped int           `json:"skipped"`
	Took    time.Duration `json:"took_ns"`
}

// OK reports whether every rule (probe) that applies passed.
func (t Tally) OK() bool { return t.Failed == 0 && t.Passed > 0 }

func (t *Tally) count(v Verdict) {
	switch v {
	case Pass:
		t.Passed++
	case Fail:
		t.Failed++
	default:
		t.Skipped++
	}
}

// skipError makes a rule skip at run time (an entity type it needs is not
// declared).
type skipError struct{ why string }

func (e skipError) Error() string { return e.why }

func skip(format string, args ...any) error { return skipError{fmt.Sprintf(format, args...)} }

// AnswerLimit is how long a node may take to answer any request conform
// sends (a long poll: its wait more): the protocol has every request
// answered in bounded time, with unknown-outcome if need be.
const AnswerLimit = 10 * time.Second

// Run checks every rule against the cluster of nodes (at least one; the
// first is asked first). It never stops at a failed rule: the report has
// them all.
func Run(ctx context.Context, nodes []Node) Report {
	start := time.Now()
	s := newSession(nodes)
	rep := Report{Nodes: len(nodes), Current: protocol.Revision}
	if len(nodes) == 0 {
		rep.Results = append(rep.Results, Result{Rule: "nodes", Doc: "a cluster to check", Verdict: Fail, Detail: "no node given"})
		rep.Failed = 1
		return rep
	}
	rep.Implementation, rep.Capabilities = s.readCapabilities(ctx)
	rep.Revision = s.caps.Revision
	for _, r := range Rules() {
		res := Result{Rule: r.Name, Doc: r.Doc, Section: r.Section, Since: r.Since}
		var missing []string
		for _, c := range r.Needs {
			if !s.caps.Has(c) {
				missing = append(missing, c)
			}
		}
		switch {
		case ctx.Err() != nil:
			res.Verdict, res.Detail = Fail, "stopped: "+ctx.Err().Error()
		case len(missing) > 0:
			res.Verdict, res.Detail = Skip, "capability "+strings.Join(missing, ", ")+" not declared"
		default:
			switch err := r.check(ctx, s); {
			case err == nil:
				res.Verdict = Pass
			case isSkip(err):
				res.Verdict, res.Detail = Skip, err.Error()
			default:
				res.Verdict, res.Detail = Fail, err.Error()
			}
		}
		res.New = res.Verdict == Fail && newSince(r.Since, rep.Revision)
		rep.count(res.Verdict)
		rep.Results = append(rep.Results, res)
	}
	rep.Took = time.Since(start)
	return rep
}

// newSince reports whether a rule introduced in revision since is newer
// than the revision an implementation says it was written for (0: not
// said, so nothing is labelled new).
func newSince(since, yours int) bool { return yours > 0 && since > yours }

// NewFailed counts the failed rules that are new since the
// implementation's revision.
func (r Report) NewFailed() int {
	n := 0
	for _, res := range r.Results {
		if res.New {
			n++
		}
	}
	return n
}

// readCapabilities asks the first node what it declares, for the rules
// (probes) to read in s.caps; unreadable, nothing is declared.
func (s *session) readCapabilities(ctx context.Context) (implementation string, capabilities []string) {
	cctx, cancel := context.WithTimeout(ctx, AnswerLimit)
	caps, err := s.clients[0].Capabilities(cctx)
	cancel()
	if err != nil {
		return "", nil
	}
	s.caps = caps
	return caps.Implementation, caps.Capabilities
}

func isSkip(err error) bool { _, ok := err.(skipError); return ok }

// session is what the rules share: a client per node whose every reply is
// recorded (for the rules about every reply), and what the node declares.
type session struct {
	nodes   []Node
	clients []*client.Client
	caps    protocol.Capabilities
	rec     *recorder
	// wrote is what the entity rules wrote: register id → value, and the
	// reply that served it.
	written      string
	writtenValue int64
	writtenReply protocol.EntityReply
}

func newSession(nodes []Node) *session {
	s := &session{nodes: nodes, rec: &recorder{}}
	for _, n := range nodes {
		hc := &http.Client{Transport: &recordingTransport{node: n.Name, rec: s.rec, next: http.DefaultTransport}, Timeout: 45 * time.Second}
		s.clients = append(s.clients, client.New(n.Addr, hc))
	}
	return s
}

// reply is one reply a node gave.
type reply struct {
	node, method, path string
	status             int
	header             http.Header
	body               []byte
	took               time.Duration
	longPoll           time.Duration // the wait a long poll asked for
	err                error         // no reply
}

type recorder struct {
	mu      sync.Mutex
	replies []reply
}

func (r *recorder) all() []reply {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.replies)
}

// recordingTransport records every reply (and every request that got
// none), body included, and hands the body on unread.
type recordingTransport struct {
	node string
	rec  *recorder
	next http.RoundTripper
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	rp := reply{node: t.node, method: req.Method, path: req.URL.Path}
	if w := req.URL.Query().Get("wait_ms"); w != "" {
		var ms int
		fmt.Sscanf(w, "%d", &ms)
		rp.longPoll = time.Duration(ms) * time.Millisecond
	}
	res, err := t.next.RoundTrip(req)
	if err != nil {
		rp.err, rp.took = err, time.Since(start)
		t.add(rp)
		return nil, err
	}
	body, rerr := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	res.Body.Close()
	rp.took, rp.status, rp.header, rp.body = time.Since(start), res.StatusCode, res.Header.Clone(), body
	if rerr != nil {
		rp.err = rerr
	}
	t.add(rp)
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

func (t *recordingTransport) add(r reply) {
	t.rec.mu.Lock()
	t.rec.replies = append(t.rec.replies, r)
	t.rec.mu.Unlock()
}

package conform

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

// Probes lists every probe, in the order they run: the public port's
// (any implementation), the slow ones, then the reference node's peer
// port.
func Probes() []Probe {
	return []Probe{
		{Name: "internal-routes-404", Applies: AnyImplementation,
			Sends:  "node-to-node routes on the public port of every node: /internal/... (hand-over-to-me from a ghost, host-shard, deliver, the stream upgrade), also through //, /v1/../ and /v1/%2e%2e/",
			Expect: "404 not-found with the error body (outcome fail) for each: no public route reaches a node-to-node one",
			run:    probeInternalRoutes},
		{Name: "bad-bodies", Applies: AnyImplementation,
			Sends:  "to every POST endpoint of the declared capabilities: truncated and binary garbage, a 100,000-deep array, fields of the wrong type",
			Expect: "400 bad-request with the error body (outcome fail) for each",
			run:    probeBadBodies},
		{Name: "huge-id", Applies: AnyImplementation, Needs: []string{protocol.CapSharding},
			Sends:  "an entity read whose id is 1 MiB long",
			Expect: "400 bad-request (outcome fail)",
			run:    probeHugeID},
		{Name: "invalid-utf8", Applies: AnyImplementation, Needs: []string{protocol.CapSharding},
			Sends:  "a register write whose id ends in the byte 0xff (not UTF-8)",
			Expect: "400 bad-request (outcome fail), and the id with U+FFFD in its place holds no value (the bytes were not replaced and stored)",
			run:    probeInvalidUTF8},
		{Name: "lone-surrogates", Applies: AnyImplementation, Needs: []string{protocol.CapSharding},
			Sends:  `register writes whose ids end in the JSON escapes \ud800 and \udfff (lone surrogates: no character, which encoding/json decodes to U+FFFD)`,
			Expect: "400 bad-request (outcome fail) for each, and the id with U+FFFD in their place holds no value (they did not alias one entity)",
			run:    probeLoneSurrogates},
		// Issue 31 item 8 (connection slots: a member's request answered
		// while strangers hold thousands of silent connections) is tested
		// in impl/node (TestSilentConnectionsLeaveRoom): from one address,
		// as a probe must send, a flood only evicts itself.
		// The one slow probe: it waits out the node's header timeout.
		{Name: "slow-client", Applies: AnyImplementation,
			Sends:  "a request header, one byte a second, that never ends (this probe waits out the node's header timeout)",
			Expect: "the node closes the connection within the limit (default 15 s; the reference node's header timeout is 10 s), and GET /v1/health answers at once meanwhile",
			run:    probeSlowClient},
		{Name: "connection-flood", Applies: AnyImplementation,
			Sends:  "2,000 connections to one node's public port that send nothing",
			Expect: fmt.Sprintf("while they are open, GET /v1/health on a new connection answers within %v", HealthLimit),
			run:    probeFlood},
		{Name: "peer-port-needs-secret", Applies: ReferenceNode,
			Sends:  "to every node's peer port, every node-to-node route (and a public one, and one that does not exist) as a real member, but with no, an empty or a wrong X-Shardtest-Secret",
			Expect: "403 peer-refused (outcome fail) for each",
			run:    probePeerNeedsSecret},
		{Name: "stream-upgrade-needs-secret", Applies: ReferenceNode,
			Sends:  "a stream upgrade (GET " + peer.StreamPath + ", Upgrade: " + peer.StreamProtocol + ") to every node's peer port as a real member, with no or a wrong secret, and with the secret as a made-up member",
			Expect: "403 peer-refused, never 101 Switching Protocols",
			run:    probeStreamUpgrade},
		{Name: "forged-hand-over", Applies: ReferenceNode, Needs: []string{protocol.CapSingleton}, MinNodes: 2, Hold: 5 * time.Second,
			Sends:  "hand-over-to-me to the oldest, with the secret, from the next oldest's address: naming a ghost (ghost@000000000000) as from; and from a third member naming the next oldest, and naming itself",
			Expect: "refused: 403 peer-refused (from is not the sender), 409 not-next-oldest (the sender is not next in line); ids keep coming on every node for 5 s",
			run:    probeForgedHandOver},
		{Name: "forged-host-shard", Applies: ReferenceNode, Needs: []string{protocol.CapSharding, protocol.CapCoordinator}, MinNodes: 2,
			Sends:  "with the secret: host-shard for an entity's shard to the coordinator's member from its home (not the coordinator); host-shard for a shard out of range from the coordinator's member; a delivery to a member that does not host the shard",
			Expect: "409 not-coordinator, 400 bad-request, 503 shard-not-here; the entity keeps its one incarnation, read through every node",
			run:    probeForgedHostShard},
	}
}

// rawReply is a reply to a request sent byte for byte.
type rawReply struct {
	status int
	header http.Header
	body   []byte
}

// raw sends a request exactly as given, on a new connection: a path a
// client library would clean, an upgrade, a member's headers or none. A
// 101 reply is returned at once (the connection is closed).
func raw(ctx context.Context, addr, method, path string, h http.Header, body string) (rawReply, error) {
	ctx, cancel := short(ctx)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return rawReply{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, addr)
	if h.Get("Connection") == "" {
		b.WriteString("Connection: close\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return rawReply{}, fmt.Errorf("send: %w", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return rawReply{}, fmt.Errorf("read the reply: %w", err)
	}
	defer res.Body.Close()
	out := rawReply{status: res.StatusCode, header: res.Header}
	if res.StatusCode == http.StatusSwitchingProtocols {
		return out, nil
	}
	out.body, err = io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return out, fmt.Errorf("read the reply: %w", err)
	}
	return out, nil
}

// allRefused is a probe's answer when it sent many requests that must
// each be refused: the summary when all were, else the first that were
// not (they are the evidence).
func allRefused(summary string, errs []string) (string, error) {
	if len(errs) > 0 {
		return "", joinedFirst(errs, 0)
	}
	return summary, nil
}

// rawRefused sends a request with raw and checks it is refused with
// status and code (the error body, outcome fail).
func rawRefused(ctx context.Context, addr, method, path string, h http.Header, body string, status int, code string) error {
	what := fmt.Sprintf("%s %s on %s", method, path, addr)
	r, err := raw(ctx, addr, method, path, h, body)
	if err != nil {
		return fmt.Errorf("%s: no reply: %w", what, err)
	}
	return refused(what, r.status, r.body, status, code)
}

func probeInternalRoutes(ctx context.Context, p *prober) (string, error) {
	handOver := "/internal/v1/singleton/" + protocol.IDGenerator + "/hand-over-to-me"
	ghost := `{"from":"ghost@000000000000"}`
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {peer.StreamProtocol}}
	routes := []struct {
		method, path, body string
		h                  http.Header
	}{
		{http.MethodPost, handOver, ghost, nil},
		{http.MethodPost, "/internal/v1/singleton/" + protocol.IDGenerator + "/request", `{"op":"next-id"}`, nil},
		{http.MethodPost, "/internal/v1/sharding/" + protocol.TypeRegister + "/host-shard", `{"shard":"0"}`, nil},
		{http.MethodPost, "/internal/v1/sharding/" + protocol.TypeRegister + "/deliver", `{"entity_id":"k","op":"read"}`, nil},
		{http.MethodGet, peer.StreamPath, "", upgrade},
		{http.MethodPost, "/" + handOver, ghost, nil},
		{http.MethodPost, "/v1/.." + handOver, ghost, nil},
		{http.MethodPost, "/v1/%2e%2e" + handOver, ghost, nil},
	}
	var errs []string
	for _, n := range p.nodes {
		for _, r := range routes {
			if err := rawRefused(ctx, n.Addr, r.method, r.path, r.h, r.body, http.StatusNotFound, protocol.CodeNotFound); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	return allRefused(fmt.Sprintf("%d routes on %d nodes: each 404 not-found", len(routes), len(p.nodes)), errs)
}

func probeBadBodies(ctx context.Context, p *prober) (string, error) {
	garbage := []string{`{"`, "\x00\x01\xfe\xff", "not json", `{"a":` + strings.Repeat("[", 100_000)}
	typ := p.entityType()
	wrongTypes := map[string][]string{
		"/v1/singleton/next-id": {`{"id":true}`},
		"/v1/entity": {`{"type":"` + typ + `","id":7,"op":"read"}`, `{"type":["` + typ + `"],"id":"k","op":"read"}`,
			`{"type":"` + typ + `","id":"k","op":{}}`},
		"/v1/admin/clock":  {`{"offset_ms":"1s"}`, `{"drift":[]}`},
		"/v1/admin/filter": {`{"drop_in":"x"}`, `{"drop_out":[1]}`},
	}
	if typ == protocol.TypeRegister {
		wrongTypes["/v1/entity"] = append(wrongTypes["/v1/entity"],
			`{"type":"register","id":"k","op":"write","payload":{"value":"x"}}`,
			`{"type":"register","id":"k","op":"write","payload":{"value":1.5}}`,
			`{"type":"register","id":"k","op":"write","payload":{"value":1e30}}`)
	}
	var errs []string
	n, eps := 0, postEndpoints(p.session)
	for _, e := range eps {
		for _, body := range append(garbage, wrongTypes[e.path]...) {
			n++
			if err := p.expectError(ctx, 0, http.MethodPost, e.path, body, http.StatusBadRequest, protocol.CodeBadRequest); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(eps) == 0 {
		return "", skip("no declared endpoint takes a body")
	}
	return allRefused(fmt.Sprintf("%d bodies to %d endpoints: each 400 bad-request, outcome fail", n, len(eps)), errs)
}

// entityRefused sends body to /v1/entity on node 0 and checks it is 400
// bad-request; it returns the error message as evidence.
func (p *prober) entityRefused(ctx context.Context, body string) (string, error) {
	status, data, err := p.rawCall(ctx, 0, http.MethodPost, "/v1/entity", []byte(body))
	if err != nil {
		return "", fmt.Errorf("no reply: %w", err)
	}
	if err := refused(fmt.Sprintf("POST /v1/entity %.60q", body), status, data, http.StatusBadRequest, protocol.CodeBadRequest); err != nil {
		return "", err
	}
	var eb protocol.ErrorBody
	json.Unmarshal(data, &eb)
	return fmt.Sprintf("400 bad-request: %.120s", eb.Error), nil
}

func probeHugeID(ctx context.Context, p *prober) (string, error) {
	return p.entityRefused(ctx, `{"type":"`+p.entityType()+`","id":"`+strings.Repeat("a", 1<<20)+`","op":"read"}`)
}

func probeInvalidUTF8(ctx context.Context, p *prober) (string, error) {
	if !p.caps.HasEntityType(protocol.TypeRegister) {
		return "", skip("entity type register is not declared")
	}
	id := fmt.Sprintf("probe-utf8-%d", rand.Int64())
	evidence, err := p.entityRefused(ctx, `{"type":"register","id":"`+id+"\xff"+`","op":"write","payload":{"value":7}}`)
	if err != nil {
		return "", err
	}
	rep, err := p.entity(ctx, 0, protocol.TypeRegister, id+"\ufffd", protocol.OpRead, nil)
	var res protocol.RegisterResult
	switch {
	case err != nil:
		return evidence, fmt.Errorf("read %s with U+FFFD: %w", id, err)
	case json.Unmarshal(rep.Result, &res) != nil:
		return evidence, fmt.Errorf("read %s with U+FFFD: result %s", id, rep.Result)
	case res.Value != nil:
		return evidence, fmt.Errorf("the refused write is stored under %s with U+FFFD (value %d): the byte was replaced, not refused", id, *res.Value)
	}
	return evidence + "; the U+FFFD id holds no value", nil
}

func probeLoneSurrogates(ctx context.Context, p *prober) (string, error) {
	if !p.caps.HasEntityType(protocol.TypeRegister) {
		return "", skip("entity type register is not declared")
	}
	id := fmt.Sprintf("probe-sur-%d", rand.Int64())
	var evidence []string
	for _, esc := range []string{`\ud800`, `\udfff`} {
		e, err := p.entityRefused(ctx, `{"type":"register","id":"`+id+esc+`","op":"write","payload":{"value":7}}`)
		if err != nil {
			return strings.Join(evidence, "; "), fmt.Errorf("id ending in %s: %w", esc, err)
		}
		evidence = append(evidence, esc+": "+e)
	}
	rep, err := p.entity(ctx, 0, protocol.TypeRegister, id+"\ufffd", protocol.OpRead, nil)
	var res protocol.RegisterResult
	switch {
	case err != nil:
		return strings.Join(evidence, "; "), fmt.Errorf("read %s with U+FFFD: %w", id, err)
	case json.Unmarshal(rep.Result, &res) != nil:
		return strings.Join(evidence, "; "), fmt.Errorf("read %s with U+FFFD: result %s", id, rep.Result)
	case res.Value != nil:
		return strings.Join(evidence, "; "), fmt.Errorf("a refused write is stored under %s with U+FFFD (value %d): the escape was decoded, not refused", id, *res.Value)
	}
	return strings.Join(evidence, "; ") + "; the U+FFFD id holds no value", nil
}

func probeSlowClient(ctx context.Context, p *prober) (string, error) {
	limit := p.opts.SlowClientLimit
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", p.nodes[0].Addr)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	// Never a whole header: longer than the limit has seconds.
	msg := "GET /v1/health HTTP/1.1\r\nHost: probe\r\nX-Shardtest-Probe: " + strings.Repeat("s", int(limit/time.Second)+10)
	start := time.Now()
	health := ""
	buf := make([]byte, 512)
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if time.Since(start) > limit || i >= len(msg) {
			return health, fmt.Errorf("still connected after %v, %d header bytes sent", time.Since(start).Round(100*time.Millisecond), i)
		}
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write([]byte{msg[i]}); err != nil {
			return fmt.Sprintf("cut after %v (%d bytes sent: %v)%s", time.Since(start).Round(100*time.Millisecond), i, err, health), nil
		}
		// A second of listening is the second between two bytes.
		conn.SetReadDeadline(time.Now().Add(time.Second))
		n, err := conn.Read(buf)
		switch {
		case n > 0:
			line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
			return fmt.Sprintf("answered %q after %v (%d bytes sent)%s", line, time.Since(start).Round(100*time.Millisecond), i+1, health), nil
		case isTimeout(err):
		case err != nil:
			return fmt.Sprintf("closed after %v (%d bytes sent)%s", time.Since(start).Round(100*time.Millisecond), i+1, health), nil
		}
		if i == 2 {
			took, err := p.healthTook(ctx, 0)
			if err != nil {
				return "", fmt.Errorf("GET /v1/health while a client dribbles: %w", err)
			}
			health = fmt.Sprintf("; GET /v1/health meanwhile answered in %v", took.Round(time.Millisecond))
		}
	}
}

// healthTook asks node i's health on a new connection, and says how long
// the answer took (an error if more than HealthLimit).
func (p *prober) healthTook(ctx context.Context, i int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, HealthLimit)
	defer cancel()
	start := time.Now()
	r, err := raw(ctx, p.nodes[i].Addr, http.MethodGet, "/v1/health", nil, "")
	took := time.Since(start)
	switch {
	case err != nil:
		return took, fmt.Errorf("no answer within %v: %w", HealthLimit, err)
	case r.status != http.StatusOK:
		return took, fmt.Errorf("%d: %.200s", r.status, r.body)
	}
	return took, nil
}

func probeFlood(ctx context.Context, p *prober) (string, error) {
	want := p.opts.FloodConnections
	conns := make([]net.Conn, 0, want)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	d := net.Dialer{Timeout: 2 * time.Second}
	var dialErr error
	for len(conns) < want && ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", p.nodes[0].Addr)
		if err != nil {
			dialErr = err
			break
		}
		conns = append(conns, c)
	}
	if errors.Is(dialErr, syscall.EMFILE) || errors.Is(dialErr, syscall.ENFILE) {
		return "", skip("this machine let the probe open only %d connections (%v): raise ulimit -n", len(conns), dialErr)
	}
	took, err := p.healthTook(ctx, 0)
	// How many of them the node has closed by now (making room is
	// allowed; answering health is what must hold).
	closed := 0
	one := make([]byte, 1)
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, rerr := c.Read(one); !isTimeout(rerr) {
			closed++
		}
	}
	opened := fmt.Sprintf("%d idle connections opened", len(conns))
	if dialErr != nil {
		opened += fmt.Sprintf(" (the next refused: %v)", dialErr)
	}
	if closed > 0 {
		opened += fmt.Sprintf(", %d of them closed by the node", closed)
	}
	if err != nil {
		return opened, fmt.Errorf("GET /v1/health with %d idle connections open: %w", len(conns), err)
	}
	return fmt.Sprintf("%s; GET /v1/health answered in %v", opened, took.Round(time.Millisecond)), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

package conform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// Sections of docs/protocol.md.
const (
	secConventions  = "Conventions"
	secCapabilities = "Capabilities"
	secStatus       = "Membership and status"
	secSingleton    = "Singleton"
	secEntities     = "Entities (sharding)"
	secEvents       = "Events"
	secAdmin        = "Admin"
	secErrors       = "Error codes"
)

// Rules lists every rule, in the order they run: the ones that read first,
// those that write state after, and those about every reply last.
func Rules() []Rule {
	return []Rule{
		{Name: "capabilities", Since: 1, Section: secCapabilities,
			Doc:   "GET /v1/capabilities names protocol shardtest/1, a revision this harness knows if any, and only capabilities it defines, declares membership, lists entity types with sharding and singletons with singleton, and every node declares the same",
			check: checkCapabilities},
		{Name: "health", Since: 1, Section: secStatus, Doc: `GET /v1/health answers 200 {"ok": true} with ready and status`, check: checkHealth},
		{Name: "converged", Since: 1, Section: secStatus,
			Doc:   "within 60 s every node is ready and lists every node's member as up and reachable (traffic starts once each node says ready; views may still disagree before this)",
			check: checkConverged},
		{Name: "status-fields", Since: 1, Section: secStatus,
			Doc:   "every status names self (uid = name@incarnation, the node's name, the incarnation its replies carry), a known member status, ready exactly when up or leaving, members that include self and are not final, unreachable among the members",
			check: checkStatusFields},
		{Name: "members-oldest-first", Since: 2, Section: secStatus, Needs: []string{protocol.CapAge},
			Doc:   "members are listed oldest first with unique positive up_numbers, every node gives a member the same age, and all name the same oldest, an up member",
			check: checkAges},
		{Name: "no-age-without-capability", Since: 2, Section: secStatus,
			Doc:   "without the age capability no member carries an up_number and no oldest is named (the harness would trust them otherwise)",
			check: checkNoAge},
		{Name: "errors-are-definite", Since: 1, Section: secErrors,
			Doc:   "an unknown endpoint is 404, a wrong method 405, malformed JSON 400, each with the error body (error, code, outcome fail, served_by)",
			check: checkErrorBodies},
		{Name: "unknown-fields-refused", Since: 1, Section: secConventions,
			Doc:   "a request body with a field the protocol does not define is 400 bad-request, outcome fail",
			check: checkUnknownFields},
		{Name: "non-object-bodies-refused", Since: 2, Section: secConventions,
			Doc:   "a body that is null, an array, a string or a number is 400 bad-request, outcome fail",
			check: checkNonObjects},
		{Name: "undeclared-capabilities-404", Since: 1, Section: secCapabilities,
			Doc:   "every endpoint of a capability not declared answers 404 with the error body (outcome fail)",
			check: checkUndeclared},
		{Name: "events-consecutive", Since: 1, Section: secEvents, Needs: []string{protocol.CapEvents},
			Doc:   "events come oldest first with consecutive sequence numbers, each with an incarnation and a type; last is the newest; limit and after are honoured",
			check: checkEvents},
		{Name: "events-long-poll", Since: 2, Section: secEvents, Needs: []string{protocol.CapEvents},
			Doc:   "with wait_ms and no newer event, GET /v1/events waits (about wait_ms) before answering an empty list; a bad query is 400",
			check: checkLongPoll},
		{Name: "entity-ask", Since: 1, Section: secEntities, Needs: []string{protocol.CapSharding},
			Doc:   "a register write is answered with its result, the type and id asked, the member hosting the entity (a uid of the cluster) and a non-empty entity_incarnation",
			check: checkEntityAsk},
		{Name: "read-back-everywhere", Since: 1, Section: secEntities, Needs: []string{protocol.CapSharding},
			Doc:   "a value written through one node reads back through every node, and cas succeeds exactly when it expects the current value",
			check: checkReadBack},
		{Name: "entity-bad-requests", Since: 3, Section: secEntities, Needs: []string{protocol.CapSharding},
			Doc:   "an unknown entity type, an unknown op, a malformed payload and an empty id are 400 bad-request, outcome fail (never unknown)",
			check: checkEntityBadRequests},
		{Name: "lone-surrogates-refused", Since: 3, Section: secConventions, Needs: []string{protocol.CapSharding},
			Doc:   `an entity id with a lone surrogate escape ("\ud800", "\udfff") is 400 bad-request, outcome fail (decoded it is U+FFFD, and distinct ids would be one entity); a surrogate pair is accepted`,
			check: checkLoneSurrogates},
		{Name: "status-lists-entities", Since: 1, Section: secStatus, Needs: []string{protocol.CapSharding},
			Doc:   "the status of the member that served an entity lists it in sharding[].region.shards[].entities[] with the entity_incarnation its replies carry",
			check: checkStatusListsEntity},
		{Name: "tell-accepted", Since: 1, Section: secEntities, Needs: []string{protocol.CapSharding, protocol.CapTell},
			Doc:   `a tell is accepted at once (202 {"accepted": true}) and, to a log entity, arrives`,
			check: checkTell},
		{Name: "next-id", Since: 1, Section: secSingleton, Needs: []string{protocol.CapSingleton},
			Doc:   "next-id through every node answers positive ids that increase call after call, each naming its singleton instance (node, incarnation, instance from 1)",
			check: checkNextID},
		{Name: "one-singleton-running", Since: 1, Section: secStatus, Needs: []string{protocol.CapSingleton},
			Doc:   "exactly one node's status says the id-generator runs there, the node the next-id replies name",
			check: checkSingletonRunning},
		{Name: "one-coordinator-running", Since: 2, Section: secStatus, Needs: []string{protocol.CapSharding, protocol.CapCoordinator},
			Doc:   "for every entity type exactly one node's status says coordinator_running",
			check: checkCoordinatorRunning},
		{Name: "clock", Since: 1, Section: secAdmin, Needs: []string{protocol.CapClock},
			Doc:   "POST /v1/admin/clock sets the skew GET then shows, {} resets it, and an offset out of range is 400",
			check: checkClock},
		{Name: "filter", Since: 1, Section: secAdmin, Needs: []string{protocol.CapFilter},
			Doc:   "POST /v1/admin/filter sets the rules GET then shows, {} heals, and an address that is not host:port is 400",
			check: checkFilter},
		{Name: "served-by-everywhere", Since: 1, Section: secConventions,
			Doc:   "every reply conform got (errors and 404s included) carries X-Shardtest-Node and X-Shardtest-Incarnation and a JSON body whose served_by says the same, naming the node asked",
			check: checkServedBy},
		{Name: "outcomes-match-codes", Since: 1, Section: secErrors,
			Doc:   "every error body's outcome is fail or unknown, and a code shardtest/1 defines comes with its table's outcome",
			check: checkOutcomes},
		{Name: "answers-in-time", Since: 1, Section: secConventions,
			Doc:   fmt.Sprintf("every request conform sent was answered within %v (a long poll: its wait more): a node that cannot finish one answers unknown-outcome", AnswerLimit),
			check: checkAnswersInTime},
	}
}

// short is a context for one request.
func short(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, AnswerLimit+5*time.Second)
}

func checkCapabilities(ctx context.Context, s *session) error {
	var errs []string
	known := protocol.AllCapabilities()
	var first *protocol.Capabilities
	for i, c := range s.clients {
		rctx, cancel := short(ctx)
		caps, err := c.Capabilities(rctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", s.nodes[i].Name, err))
			continue
		}
		if caps.Protocol != protocol.Version {
			errs = append(errs, fmt.Sprintf("%s: protocol %q, want %q", s.nodes[i].Name, caps.Protocol, protocol.Version))
		}
		if caps.Revision < 0 || caps.Revision > protocol.Revision {
			errs = append(errs, fmt.Sprintf("%s: revision %d, but this harness knows revisions 1 to %d of %s (0 or absent: not said)", s.nodes[i].Name, caps.Revision, protocol.Revision, protocol.Version))
		}
		if !caps.Has(protocol.CapMembership) {
			errs = append(errs, fmt.Sprintf("%s: membership is not declared (every implementation needs it)", s.nodes[i].Name))
		}
		for _, x := range caps.Capabilities {
			if !slices.Contains(known, x) {
				errs = append(errs, fmt.Sprintf("%s: declares %q, which shardtest/1 does not define (%s)", s.nodes[i].Name, x, strings.Join(known, ", ")))
			}
		}
		if caps.Has(protocol.CapSharding) && len(caps.EntityTypes) == 0 {
			errs = append(errs, fmt.Sprintf("%s: declares sharding but no entity_types", s.nodes[i].Name))
		}
		if caps.Has(protocol.CapSingleton) && len(caps.Singletons) == 0 {
			errs = append(errs, fmt.Sprintf("%s: declares singleton but no singletons", s.nodes[i].Name))
		}
		if first == nil {
			first = &caps
		} else if !slices.Equal(sorted(first.Capabilities), sorted(caps.Capabilities)) || !slices.Equal(sorted(first.EntityTypes), sorted(caps.EntityTypes)) {
			errs = append(errs, fmt.Sprintf("%s declares %v with entity types %v, but %s %v with %v", s.nodes[i].Name, caps.Capabilities, caps.EntityTypes, s.nodes[0].Name, first.Capabilities, first.EntityTypes))
		}
	}
	return joined(errs)
}

func checkHealth(ctx context.Context, s *session) error {
	var errs []string
	for i, c := range s.clients {
		rctx, cancel := short(ctx)
		h, err := c.Health(rctx)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", s.nodes[i].Name, err))
		case !h.OK || h.Status == "":
			errs = append(errs, fmt.Sprintf("%s: %+v, want ok true and a status", s.nodes[i].Name, h))
		}
	}
	return joined(errs)
}

// statuses reads every node's status.
func (s *session) statuses(ctx context.Context) ([]protocol.Status, error) {
	out := make([]protocol.Status, len(s.clients))
	for i, c := range s.clients {
		rctx, cancel := short(ctx)
		st, err := c.Status(rctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.nodes[i].Name, err)
		}
		out[i] = st
	}
	return out, nil
}

func checkConverged(ctx context.Context, s *session) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		why := ""
		sts, err := s.statuses(ctx)
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Status >= 400 && pe.Status < 500 {
			return err // refused, not yet ready: waiting will not help
		}
		if err != nil {
			why = err.Error()
		} else {
		nodes:
			for i, st := range sts {
				if !st.Ready {
					why = fmt.Sprintf("%s is not ready (%s)", s.nodes[i].Name, st.Self.Status)
					break
				}
				for _, n := range s.nodes {
					if !slices.ContainsFunc(st.Members, func(m protocol.Member) bool {
						return m.Name == n.Name && m.Status == protocol.StatusUp && m.Reachable
					}) {
						why = fmt.Sprintf("%s does not list %s as up and reachable (members %s)", s.nodes[i].Name, n.Name, memberList(st.Members))
						break nodes
					}
				}
			}
		}
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("not after 60 s: " + why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func memberList(ms []protocol.Member) string {
	var out []string
	for _, m := range ms {
		out = append(out, fmt.Sprintf("%s %s reachable=%v", m.UID, m.Status, m.Reachable))
	}
	return "[" + strings.Join(out, "; ") + "]"
}

func checkStatusFields(ctx context.Context, s *session) error {
	sts, err := s.statuses(ctx)
	if err != nil {
		return err
	}
	statuses := []string{protocol.StatusJoining, protocol.StatusUp, protocol.StatusLeaving, protocol.StatusDown, protocol.StatusRemoved}
	var errs []string
	for i, st := range sts {
		name := s.nodes[i].Name
		bad := func(format string, args ...any) { errs = append(errs, name+": "+fmt.Sprintf(format, args...)) }
		if st.Protocol != protocol.Version {
			bad("protocol %q, want %q", st.Protocol, protocol.Version)
		}
		self := st.Self
		if self.Name != name {
			bad("self.name %q, want the node's name %q", self.Name, name)
		}
		if self.Incarnation == "" || self.UID != protocol.UID(self.Name, self.Incarnation) {
			bad("self.uid %q is not self.name@self.incarnation (%q, %q)", self.UID, self.Name, self.Incarnation)
		}
		if self.Incarnation != st.ServedBy.Incarnation {
			bad("self.incarnation %q but served_by.incarnation %q", self.Incarnation, st.ServedBy.Incarnation)
		}
		if !slices.Contains(statuses, self.Status) {
			bad("self.status %q is not one of %v", self.Status, statuses)
		}
		if st.Ready != protocol.ReadyStatus(self.Status) {
			bad("ready %v with status %q (ready means up or leaving)", st.Ready, self.Status)
		}
		uids := map[string]bool{}
		for _, m := range st.Members {
			uids[m.UID] = true
			if m.Incarnation == "" || m.UID != protocol.UID(m.Name, m.Incarnation) {
				bad("member uid %q is not name@incarnation (%q, %q)", m.UID, m.Name, m.Incarnation)
			}
			if !slices.Contains(statuses, m.Status) || protocol.FinalStatus(m.Status) {
				bad("member %s has status %q (members are those not yet down or removed)", m.UID, m.Status)
			}
		}
		if st.Ready && !uids[self.UID] {
			bad("members %s do not include self %s", memberList(st.Members), self.UID)
		}
		for _, u := range st.Unreachable {
			if !uids[u] {
				bad("unreachable %s is not one of the members", u)
			}
		}
	}
	return joined(errs)
}

func checkAges(ctx context.Context, s *session) error {
	sts, err := s.statuses(ctx)
	if err != nil {
		return err
	}
	var errs []string
	age := map[string]int64{}
	oldest := map[string][]string{}
	for i, st := range sts {
		name := s.nodes[i].Name
		seen := map[int64]string{}
		for k, m := range st.Members {
			if m.UpNumber <= 0 {
				errs = append(errs, fmt.Sprintf("%s: member %s has up_number %d (ages are positive)", name, m.UID, m.UpNumber))
			}
			if other, dup := seen[m.UpNumber]; dup {
				errs = append(errs, fmt.Sprintf("%s: members %s and %s share up_number %d", name, other, m.UID, m.UpNumber))
			}
			seen[m.UpNumber] = m.UID
			if k > 0 && st.Members[k-1].UpNumber > m.UpNumber {
				errs = append(errs, fmt.Sprintf("%s: members are not oldest first: %s", name, memberList(st.Members)))
			}
			if a, ok := age[m.UID]; ok && a != m.UpNumber {
				errs = append(errs, fmt.Sprintf("%s gives %s up_number %d, another node %d", name, m.UID, m.UpNumber, a))
			}
			age[m.UID] = m.UpNumber
		}
		if !slices.ContainsFunc(st.Members, func(m protocol.Member) bool { return m.UID == st.Oldest && m.Status == protocol.StatusUp }) {
			errs = append(errs, fmt.Sprintf("%s: oldest %q is not an up member", name, st.Oldest))
		}
		oldest[st.Oldest] = append(oldest[st.Oldest], name)
	}
	if len(oldest) > 1 {
		errs = append(errs, fmt.Sprintf("the nodes name different oldest members: %v", oldest))
	}
	return joined(errs)
}

func checkNoAge(ctx context.Context, s *session) error {
	if s.caps.Has(protocol.CapAge) {
		return skip("the age capability is declared (members-oldest-first checks the ages)")
	}
	sts, err := s.statuses(ctx)
	if err != nil {
		return err
	}
	var errs []string
	for i, st := range sts {
		if st.Oldest != "" {
			errs = append(errs, fmt.Sprintf("%s names an oldest member (%s) without declaring age", s.nodes[i].Name, st.Oldest))
		}
		for _, m := range st.Members {
			if m.UpNumber != 0 {
				errs = append(errs, fmt.Sprintf("%s gives %s up_number %d without declaring age", s.nodes[i].Name, m.UID, m.UpNumber))
				break
			}
		}
	}
	return joined(errs)
}

// rawCall sends body (nil: none) and returns the reply's status and body,
// whatever it is.
func (s *session) rawCall(ctx context.Context, i int, method, path string, body []byte) (int, []byte, error) {
	rctx, cancel := short(ctx)
	defer cancel()
	_, data, err := s.clients[i].DoRaw(rctx, method, path, body)
	var pe *protocol.Error
	switch {
	case err == nil:
		return http.StatusOK, data, nil
	case errors.As(err, &pe) && pe.Status != 0:
		return pe.Status, data, nil
	}
	return 0, nil, err
}

// expectError checks that a request is refused with status and the error
// body, outcome fail; code is checked when not empty.
func (s *session) expectError(ctx context.Context, i int, method, path, body string, status int, code string) error {
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	got, data, err := s.rawCall(ctx, i, method, path, b)
	what := fmt.Sprintf("%s %s %.60q", method, path, body)
	if err != nil {
		return fmt.Errorf("%s: no reply: %v", what, err)
	}
	return refused(what, got, data, status, code)
}

// refused checks that a reply (status got, body data) to the request what
// is a refusal with status and the error body, outcome fail; code is
// checked when not empty.
func refused(what string, got int, data []byte, status int, code string) error {
	if got < 300 {
		return fmt.Errorf("%s: accepted (%d: %.200s), want %d", what, got, bytes.TrimSpace(data), status)
	}
	var eb protocol.ErrorBody
	if err := json.Unmarshal(data, &eb); err != nil {
		return fmt.Errorf("%s: %d with a body that is not the error body: %.200q", what, got, data)
	}
	switch {
	case got != status:
		return fmt.Errorf("%s: %d %s, want %d", what, got, eb.Code, status)
	case code != "" && eb.Code != code:
		return fmt.Errorf("%s: code %q, want %q", what, eb.Code, code)
	case eb.Code == "" || eb.Error == "":
		return fmt.Errorf("%s: error body without code or error: %.200s", what, data)
	case eb.Outcome != protocol.Fail:
		return fmt.Errorf("%s: outcome %q, want fail (the request certainly had no effect)", what, eb.Outcome)
	}
	return nil
}

// postEndpoints are the POST endpoints of the declared capabilities that
// take a body, with a body they must refuse as bad (never acted on), and
// the capability each needs. Leave and down are left out: a node that
// wrongly accepted one would leave or down a member.
func postEndpoints(s *session) []struct{ path, valid string } {
	var out []struct{ path, valid string }
	if s.caps.Has(protocol.CapSingleton) {
		out = append(out, struct{ path, valid string }{"/v1/singleton/next-id", `{}`})
	}
	if s.caps.Has(protocol.CapSharding) {
		out = append(out, struct{ path, valid string }{"/v1/entity", `{"type":"` + s.entityType() + `","id":"conform-bad","op":"read"}`})
	}
	if s.caps.Has(protocol.CapClock) {
		out = append(out, struct{ path, valid string }{"/v1/admin/clock", `{"offset_ms":0,"drift":0}`})
	}
	if s.caps.Has(protocol.CapFilter) {
		out = append(out, struct{ path, valid string }{"/v1/admin/filter", `{"drop_in":[],"drop_out":[]}`})
	}
	return out
}

// entityType is the register type if declared, else the first declared.
func (s *session) entityType() string {
	if s.caps.HasEntityType(protocol.TypeRegister) || len(s.caps.EntityTypes) == 0 {
		return protocol.TypeRegister
	}
	return s.caps.EntityTypes[0]
}

func checkErrorBodies(ctx context.Context, s *session) error {
	var errs []string
	add := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	add(s.expectError(ctx, 0, http.MethodGet, "/v1/no-such-endpoint", "", http.StatusNotFound, protocol.CodeNotFound))
	add(s.expectError(ctx, 0, http.MethodPost, "/v1/status", "{}", http.StatusMethodNotAllowed, protocol.CodeMethodNotAllowed))
	add(s.expectError(ctx, 0, http.MethodDelete, "/v1/capabilities", "", http.StatusMethodNotAllowed, protocol.CodeMethodNotAllowed))
	for _, e := range postEndpoints(s) {
		add(s.expectError(ctx, 0, http.MethodPost, e.path, `{"`, http.StatusBadRequest, protocol.CodeBadRequest))
	}
	return joined(errs)
}

func checkUnknownFields(ctx context.Context, s *session) error {
	var errs []string
	for _, e := range postEndpoints(s) {
		body := strings.TrimSuffix(e.valid, "}")
		if body != "{" {
			body += ","
		}
		body += `"conform_unknown_field":1}`
		if err := s.expectError(ctx, 0, http.MethodPost, e.path, body, http.StatusBadRequest, protocol.CodeBadRequest); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) == 0 && len(postEndpoints(s)) == 0 {
		return skip("no declared endpoint takes a body conform may send")
	}
	return joined(errs)
}

func checkNonObjects(ctx context.Context, s *session) error {
	var errs []string
	for _, e := range postEndpoints(s) {
		for _, body := range []string{"null", "[]", `"x"`, "1"} {
			if err := s.expectError(ctx, 0, http.MethodPost, e.path, body, http.StatusBadRequest, protocol.CodeBadRequest); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) == 0 && len(postEndpoints(s)) == 0 {
		return skip("no declared endpoint takes a body conform may send")
	}
	return joined(errs)
}

func checkUndeclared(ctx context.Context, s *session) error {
	var errs []string
	n := 0
	for _, ep := range protocol.Endpoints() {
		if ep.Capability == "" || s.caps.Has(ep.Capability) {
			continue
		}
		for _, method := range ep.Methods {
			if method == http.MethodHead {
				continue // no body to tell a 404 by
			}
			n++
			// A body a node that did serve it would refuse, should it.
			if err := s.expectError(ctx, 0, method, ep.Path, `{"conform_unknown_field":1}`, http.StatusNotFound, ""); err != nil {
				errs = append(errs, "capability "+ep.Capability+" not declared: "+err.Error())
			}
		}
	}
	if n == 0 {
		return skip("every capability with endpoints is declared")
	}
	return joined(errs)
}

func checkEvents(ctx context.Context, s *session) error {
	var errs []string
	for i, c := range s.clients {
		name := s.nodes[i].Name
		rctx, cancel := short(ctx)
		r, err := c.Events(rctx, 0, protocol.EventsMaxLimit, 0)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if len(r.Events) == 0 {
			errs = append(errs, fmt.Sprintf("%s: no event at all (a node that joined logs at least that)", name))
			continue
		}
		for k, e := range r.Events {
			if k > 0 && e.Seq != r.Events[k-1].Seq+1 {
				errs = append(errs, fmt.Sprintf("%s: event seq %d follows %d (want consecutive, oldest first)", name, e.Seq, r.Events[k-1].Seq))
				break
			}
			if e.Incarnation == "" || e.Type == "" {
				errs = append(errs, fmt.Sprintf("%s: event %d has no incarnation or type: %+v", name, e.Seq, e))
				break
			}
		}
		lastSeq := r.Events[len(r.Events)-1].Seq
		if r.Last < lastSeq {
			errs = append(errs, fmt.Sprintf("%s: last %d, yet it sent event %d", name, r.Last, lastSeq))
		}
		rctx, cancel = short(ctx)
		one, err := c.Events(rctx, r.Events[0].Seq-1, 1, 0)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: limit 1: %v", name, err))
		case len(one.Events) != 1 || one.Events[0].Seq != r.Events[0].Seq:
			errs = append(errs, fmt.Sprintf("%s: after=%d limit=1 gave %d events (first %v), want event %d alone", name, r.Events[0].Seq-1, len(one.Events), firstSeq(one.Events), r.Events[0].Seq))
		}
		rctx, cancel = short(ctx)
		none, err := c.Events(rctx, r.Last+1000, 10, 0)
		cancel()
		if err == nil && len(none.Events) > 0 {
			errs = append(errs, fmt.Sprintf("%s: after=%d (beyond last %d) gave %d events", name, r.Last+1000, r.Last, len(none.Events)))
		}
	}
	return joined(errs)
}

func firstSeq(evs []protocol.Event) any {
	if len(evs) == 0 {
		return "none"
	}
	return evs[0].Seq
}

func checkLongPoll(ctx context.Context, s *session) error {
	const wait = 2 * time.Second
	c := s.clients[0]
	rctx, cancel := short(ctx)
	r, err := c.Events(rctx, 0, 1, 0)
	cancel()
	if err != nil {
		return err
	}
	after := r.Last
	start := time.Now()
	rctx, cancel = context.WithTimeout(ctx, wait+AnswerLimit)
	r2, err := c.Events(rctx, after, 10, wait)
	cancel()
	took := time.Since(start)
	switch {
	case err != nil:
		return fmt.Errorf("after=%d wait_ms=%d: %v", after, wait.Milliseconds(), err)
	case len(r2.Events) == 0 && took < wait/2:
		return fmt.Errorf("after=%d wait_ms=%d answered no event after %v: the wait was not honoured", after, wait.Milliseconds(), took.Round(time.Millisecond))
	case len(r2.Events) > 0 && r2.Events[0].Seq <= after:
		return fmt.Errorf("after=%d answered event %d", after, r2.Events[0].Seq)
	}
	var errs []string
	for _, q := range []string{"limit=0", "limit=x", "after=-1", "wait_ms=999999", "nonsense=1"} {
		if err := s.expectError(ctx, 0, http.MethodGet, "/v1/events?"+q, "", http.StatusBadRequest, protocol.CodeBadRequest); err != nil {
			errs = append(errs, err.Error())
		}
	}
	return joined(errs)
}

// entity sends an ask to node i.
func (s *session) entity(ctx context.Context, i int, typ, id, op string, payload any) (protocol.EntityReply, error) {
	var raw json.RawMessage
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			return protocol.EntityReply{}, err
		}
		raw = b
	}
	rctx, cancel := short(ctx)
	defer cancel()
	return s.clients[i].Entity(rctx, protocol.EntityRequest{Type: typ, ID: id, Op: op, Payload: raw})
}

// memberUIDs are the uids every node lists.
func (s *session) memberUIDs(ctx context.Context) map[string]bool {
	out := map[string]bool{}
	sts, _ := s.statuses(ctx)
	for _, st := range sts {
		for _, m := range st.Members {
			out[m.UID] = true
		}
	}
	return out
}

func checkEntityAsk(ctx context.Context, s *session) error {
	if !s.caps.HasEntityType(protocol.TypeRegister) {
		return skip("entity type register is not declared")
	}
	id := fmt.Sprintf("conform-%d", rand.Int64())
	v := rand.Int64N(1_000_000) + 1
	rep, err := s.entity(ctx, 0, protocol.TypeRegister, id, protocol.OpWrite, protocol.RegisterWrite{Value: v})
	if err != nil {
		return fmt.Errorf("write %d to %s through %s: %v", v, id, s.nodes[0].Name, err)
	}
	var errs []string
	var res protocol.RegisterResult
	if err := json.Unmarshal(rep.Result, &res); err != nil || res.Value == nil || *res.Value != v {
		errs = append(errs, fmt.Sprintf(`result %s, want {"value": %d}`, rep.Result, v))
	}
	if rep.Type != protocol.TypeRegister || rep.ID != id {
		errs = append(errs, fmt.Sprintf("reply names %s/%s, want %s/%s", rep.Type, rep.ID, protocol.TypeRegister, id))
	}
	if rep.EntityIncarnation == "" {
		errs = append(errs, "no entity_incarnation: checkers cannot tell incarnations apart")
	}
	if uids := s.memberUIDs(ctx); !uids[rep.Node] {
		errs = append(errs, fmt.Sprintf("node %q is not a member uid of the cluster (%v)", rep.Node, slices.Sorted(maps.Keys(uids))))
	}
	if len(errs) == 0 {
		s.written, s.writtenValue, s.writtenReply = id, v, rep
	}
	return joined(errs)
}

func checkReadBack(ctx context.Context, s *session) error {
	if s.written == "" {
		return skip("entity-ask wrote nothing to read back")
	}
	var errs []string
	read := func(i int) (protocol.RegisterResult, error) {
		rep, err := s.entity(ctx, i, protocol.TypeRegister, s.written, protocol.OpRead, nil)
		if err != nil {
			return protocol.RegisterResult{}, err
		}
		var res protocol.RegisterResult
		if err := json.Unmarshal(rep.Result, &res); err != nil {
			return res, fmt.Errorf("result %s: %v", rep.Result, err)
		}
		return res, nil
	}
	for i := range s.clients {
		res, err := read(i)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("read through %s: %v", s.nodes[i].Name, err))
		case res.Value == nil || *res.Value != s.writtenValue:
			errs = append(errs, fmt.Sprintf("read through %s: %v, want %d (written through %s)", s.nodes[i].Name, valueString(res.Value), s.writtenValue, s.nodes[0].Name))
		}
	}
	last := len(s.clients) - 1
	next := s.writtenValue + 1
	rep, err := s.entity(ctx, last, protocol.TypeRegister, s.written, protocol.OpCAS, protocol.RegisterCAS{Expect: &s.writtenValue, Value: next})
	var res protocol.RegisterResult
	switch {
	case err != nil:
		errs = append(errs, fmt.Sprintf("cas %d→%d through %s: %v", s.writtenValue, next, s.nodes[last].Name, err))
	case json.Unmarshal(rep.Result, &res) != nil || res.OK == nil || !*res.OK:
		errs = append(errs, fmt.Sprintf("cas %d→%d through %s: %s, want ok true", s.writtenValue, next, s.nodes[last].Name, rep.Result))
	default:
		wrong := next + 100
		rep, err := s.entity(ctx, 0, protocol.TypeRegister, s.written, protocol.OpCAS, protocol.RegisterCAS{Expect: &wrong, Value: 1})
		res = protocol.RegisterResult{}
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("cas expecting %d (not the value) through %s: %v", wrong, s.nodes[0].Name, err))
		case json.Unmarshal(rep.Result, &res) != nil || res.OK == nil || *res.OK || res.Value == nil || *res.Value != next:
			errs = append(errs, fmt.Sprintf("cas expecting %d (the value is %d) through %s: %s, want ok false with value %d", wrong, next, s.nodes[0].Name, rep.Result, next))
		}
	}
	return joined(errs)
}

func valueString(v *int64) string {
	if v == nil {
		return "null"
	}
	return strconv.FormatInt(*v, 10)
}

func checkEntityBadRequests(ctx context.Context, s *session) error {
	typ := s.entityType()
	var errs []string
	for _, body := range []string{
		`{"type":"conform-no-such-type","id":"k","op":"read"}`,
		`{"type":"` + typ + `","id":"k","op":"conform-no-such-op"}`,
		`{"type":"` + typ + `","id":"","op":"read"}`,
	} {
		if err := s.expectError(ctx, 0, http.MethodPost, "/v1/entity", body, http.StatusBadRequest, protocol.CodeBadRequest); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if typ == protocol.TypeRegister {
		if err := s.expectError(ctx, 0, http.MethodPost, "/v1/entity", `{"type":"register","id":"conform-bad-payload","op":"write","payload":{"value":"x"}}`,
			http.StatusBadRequest, protocol.CodeBadRequest); err != nil {
			errs = append(errs, err.Error())
		}
	}
	return joined(errs)
}

func checkLoneSurrogates(ctx context.Context, s *session) error {
	typ := s.entityType()
	var errs []string
	for _, id := range []string{`conform-sur\ud800`, `conform-sur\udfff`, `conform-sur\udbff\u0041`} {
		body := `{"type":"` + typ + `","id":"` + id + `","op":"read"}`
		if err := s.expectError(ctx, 0, http.MethodPost, "/v1/entity", body, http.StatusBadRequest, protocol.CodeBadRequest); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if typ == protocol.TypeRegister {
		// A pair is one character (U+1F600): refusing it is refusing
		// valid UTF-8.
		body := `{"type":"register","id":"conform-sur\ud83d\ude00","op":"read"}`
		if status, data, err := s.rawCall(ctx, 0, http.MethodPost, "/v1/entity", []byte(body)); err != nil || status != http.StatusOK {
			errs = append(errs, fmt.Sprintf("POST /v1/entity %s: %d %.200s %v, want 200 (a surrogate pair is a character)", body, status, data, err))
		}
	}
	return joined(errs)
}

func checkStatusListsEntity(ctx context.Context, s *session) error {
	if s.written == "" {
		return skip("entity-ask wrote nothing to look for")
	}
	// The entity may passivate; ask again and look at once.
	rep, err := s.entity(ctx, 0, protocol.TypeRegister, s.written, protocol.OpRead, nil)
	if err != nil {
		return fmt.Errorf("read %s: %v", s.written, err)
	}
	sts, err := s.statuses(ctx)
	if err != nil {
		return err
	}
	var found []string
	for i, st := range sts {
		for _, t := range st.Sharding {
			if t.Type != protocol.TypeRegister {
				continue
			}
			for _, sh := range t.Region.Shards {
				for _, e := range sh.Entities {
					if e.ID == s.written {
						found = append(found, fmt.Sprintf("%s (%s) lists incarnation %q", s.nodes[i].Name, st.Self.UID, e.Incarnation))
						if e.Incarnation == rep.EntityIncarnation && st.Self.UID == rep.Node {
							return nil
						}
					}
				}
			}
		}
	}
	return fmt.Errorf("the reply named %s on %s, but no status lists it so (found: %v): the checkers' status samples cannot see it",
		rep.EntityIncarnation, rep.Node, found)
}

func checkTell(ctx context.Context, s *session) error {
	typ := protocol.TypeLog
	if !s.caps.HasEntityType(typ) {
		typ = s.entityType()
	}
	id := fmt.Sprintf("conform-tell-%d", rand.Int64())
	payload, _ := json.Marshal(protocol.LogEntry{Client: "conform", Seq: 1})
	if typ != protocol.TypeLog {
		payload, _ = json.Marshal(protocol.RegisterWrite{Value: 1})
	}
	op := protocol.OpAppend
	if typ != protocol.TypeLog {
		op = protocol.OpWrite
	}
	rctx, cancel := short(ctx)
	_, err := s.clients[0].Tell(rctx, protocol.EntityRequest{Type: typ, ID: id, Op: op, Payload: payload, Sender: "conform"})
	cancel()
	if err != nil {
		return fmt.Errorf("tell %s/%s: %v", typ, id, err)
	}
	if typ != protocol.TypeLog {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rep, err := s.entity(ctx, 0, protocol.TypeLog, id, protocol.OpRead, nil)
		var res protocol.LogReadResult
		if err == nil && json.Unmarshal(rep.Result, &res) == nil && len(res.Entries) == 1 && res.Entries[0].Client == "conform" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the tell to log/%s was accepted but not in the log 10 s later (read: %s, %v)", id, rep.Result, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func checkNextID(ctx context.Context, s *session) error {
	if !s.caps.HasSingleton(protocol.IDGenerator) {
		return skip("singleton id-generator is not declared")
	}
	_, _, err := s.idsIncrease(ctx, 0, 2, 0)
	return err
}

// idsIncrease asks next-id through every node in turn, at least rounds
// rounds and until hold has passed: each id must be above prev and the
// ids before it, and name its instance. It returns how many ids it got
// and the highest.
func (s *session) idsIncrease(ctx context.Context, prev int64, rounds int, hold time.Duration) (int, int64, error) {
	var errs []string
	n := 0
	end := time.Now().Add(hold)
	for round := 0; round < rounds || time.Now().Before(end); round++ {
		if ctx.Err() != nil {
			errs = append(errs, "stopped: "+ctx.Err().Error())
			break
		}
		for i, c := range s.clients {
			rctx, cancel := short(ctx)
			r, err := c.NextID(rctx)
			cancel()
			switch {
			case err != nil:
				errs = append(errs, fmt.Sprintf("next-id through %s: %v", s.nodes[i].Name, err))
			case r.ID <= prev:
				errs = append(errs, fmt.Sprintf("next-id through %s (round %d) gave %d after %d: ids must increase", s.nodes[i].Name, round+1, r.ID, prev))
			case r.Singleton.Node == "" || r.Singleton.Incarnation == "" || r.Singleton.Instance < 1:
				errs = append(errs, fmt.Sprintf("next-id through %s names no instance: %+v", s.nodes[i].Name, r.Singleton))
			}
			if err == nil {
				n++
				prev = max(prev, r.ID)
			}
		}
		if hold > 0 {
			if len(errs) > 0 {
				break // a failing singleton fails every round: say it once
			}
			// Ids keep coming is the point, not how many: leave the
			// nodes (and the machine) room.
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return n, prev, joinedFirst(errs, 0)
}

func checkSingletonRunning(ctx context.Context, s *session) error {
	if !s.caps.HasSingleton(protocol.IDGenerator) {
		return skip("singleton id-generator is not declared")
	}
	rctx, cancel := short(ctx)
	r, err := s.clients[0].NextID(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("next-id: %v", err)
	}
	sts, err := s.statuses(ctx)
	if err != nil {
		return err
	}
	var running []string
	for i, st := range sts {
		if st.SingletonRunning(protocol.IDGenerator) {
			running = append(running, s.nodes[i].Name)
		}
	}
	switch {
	case len(running) != 1:
		return fmt.Errorf("%d nodes say the id-generator runs there (%v), want exactly one", len(running), running)
	case running[0] != r.Singleton.Node:
		return fmt.Errorf("%s says it runs the id-generator, but next-id replies name %s", running[0], r.Singleton.Node)
	}
	return nil
}

func checkCoordinatorRunning(ctx context.Context, s *session) error {
	sts, err := s.statuses(ctx)
	if err != nil {
		return err
	}
	var errs []string
	for _, typ := range s.caps.EntityTypes {
		var on []string
		for i, st := range sts {
			for _, t := range st.Sharding {
				if t.Type == typ && t.CoordinatorRunning {
					on = append(on, s.nodes[i].Name)
				}
			}
		}
		if len(on) != 1 {
			errs = append(errs, fmt.Sprintf("%s: %d nodes say its coordinator runs there (%v), want exactly one", typ, len(on), on))
		}
	}
	return joined(errs)
}

func checkClock(ctx context.Context, s *session) error {
	c := s.clients[len(s.clients)-1]
	rctx, cancel := short(ctx)
	defer cancel()
	if _, err := c.SetClock(rctx, 90*time.Second, 0); err != nil {
		return fmt.Errorf("set offset 90 s: %v", err)
	}
	got, err := c.GetClock(rctx)
	if err != nil || got.OffsetMS < 89_000 || got.OffsetMS > 91_000 {
		c.SetClock(rctx, 0, 0)
		return fmt.Errorf("after setting 90 s, GET says %+v (%v)", got.ClockState, err)
	}
	if _, err := c.SetClock(rctx, 0, 0); err != nil {
		return fmt.Errorf("reset: %v", err)
	}
	got, err = c.GetClock(rctx)
	if err != nil || got.OffsetMS < -1000 || got.OffsetMS > 1000 || got.Drift != 0 {
		return fmt.Errorf("after {}, GET says %+v (%v)", got.ClockState, err)
	}
	return s.expectError(ctx, len(s.clients)-1, http.MethodPost, "/v1/admin/clock", `{"offset_ms":1e12}`, http.StatusBadRequest, protocol.CodeBadRequest)
}

func checkFilter(ctx context.Context, s *session) error {
	c := s.clients[len(s.clients)-1]
	rctx, cancel := short(ctx)
	defer cancel()
	const peer = "192.0.2.1:7946" // TEST-NET-1: no member has it
	if _, err := c.SetFilter(rctx, protocol.Filter{DropIn: []string{peer}}); err != nil {
		return fmt.Errorf("set: %v", err)
	}
	st, err := c.Status(rctx)
	c.SetFilter(rctx, protocol.Filter{})
	if err != nil || st.Filter == nil || !slices.Equal(st.Filter.DropIn, []string{peer}) {
		return fmt.Errorf("after dropping %s, the status's filter is %+v (%v)", peer, st.Filter, err)
	}
	st, err = c.Status(rctx)
	if err != nil || st.Filter == nil || len(st.Filter.DropIn)+len(st.Filter.DropOut) != 0 {
		return fmt.Errorf("after {}, the filter is %+v (%v)", st.Filter, err)
	}
	return s.expectError(ctx, len(s.clients)-1, http.MethodPost, "/v1/admin/filter", `{"drop_in":["not-an-address"]}`, http.StatusBadRequest, protocol.CodeBadRequest)
}

func checkServedBy(_ context.Context, s *session) error {
	var errs []string
	n := 0
	for _, r := range s.rec.all() {
		if r.err != nil || r.status == 0 {
			continue
		}
		n++
		what := fmt.Sprintf("%s %s on %s (%d)", r.method, r.path, r.node, r.status)
		hn, hi := r.header.Get(protocol.NodeHeader), r.header.Get(protocol.IncarnationHeader)
		var body struct {
			ServedBy *protocol.ServedBy `json:"served_by"`
		}
		switch {
		case hn == "" || hi == "":
			errs = append(errs, what+": no X-Shardtest-Node / X-Shardtest-Incarnation header")
		case hn != r.node:
			errs = append(errs, fmt.Sprintf("%s: X-Shardtest-Node %q, want %q", what, hn, r.node))
		case json.Unmarshal(r.body, &body) != nil:
			errs = append(errs, fmt.Sprintf("%s: the body is not JSON: %.100q", what, r.body))
		case body.ServedBy == nil:
			errs = append(errs, what+": no served_by in the body")
		case body.ServedBy.Node != hn || body.ServedBy.Incarnation != hi:
			errs = append(errs, fmt.Sprintf("%s: served_by %+v, but the headers say %s/%s", what, *body.ServedBy, hn, hi))
		}
	}
	if n == 0 {
		return errors.New("no reply was recorded")
	}
	return joinedFirst(errs, n)
}

func checkOutcomes(_ context.Context, s *session) error {
	var errs []string
	for _, r := range s.rec.all() {
		if r.err != nil || r.status < 300 {
			continue
		}
		var eb protocol.ErrorBody
		what := fmt.Sprintf("%s %s on %s (%d)", r.method, r.path, r.node, r.status)
		if err := json.Unmarshal(r.body, &eb); err != nil {
			errs = append(errs, fmt.Sprintf("%s: not the error body: %.100q", what, r.body))
			continue
		}
		if eb.Outcome != protocol.Fail && eb.Outcome != protocol.Unknown {
			errs = append(errs, fmt.Sprintf("%s: outcome %q (want fail or unknown)", what, eb.Outcome))
			continue
		}
		if info, ok := protocol.Code(eb.Code); ok && info.Outcome != eb.Outcome {
			errs = append(errs, fmt.Sprintf("%s: code %s with outcome %s; shardtest/1 says %s", what, eb.Code, eb.Outcome, info.Outcome))
		}
	}
	return joinedFirst(errs, 0)
}

func checkAnswersInTime(_ context.Context, s *session) error {
	var errs []string
	for _, r := range s.rec.all() {
		limit := AnswerLimit + r.longPoll
		what := fmt.Sprintf("%s %s on %s", r.method, r.path, r.node)
		switch {
		case r.err != nil && r.status == 0:
			errs = append(errs, fmt.Sprintf("%s: no reply after %v: %v", what, r.took.Round(time.Millisecond), r.err))
		case r.took > limit:
			errs = append(errs, fmt.Sprintf("%s: answered after %v (more than %v)", what, r.took.Round(time.Millisecond), limit))
		}
	}
	return joinedFirst(errs, 0)
}

func joined(errs []string) error {
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// joinedFirst is joined for rules over every reply: the first few, and how
// many there were.
func joinedFirst(errs []string, of int) error {
	if len(errs) == 0 {
		return nil
	}
	const most = 5
	out := errs
	if len(out) > most {
		out = append(out[:most:most], fmt.Sprintf("and %d more", len(errs)-most))
	}
	if of > 0 {
		return fmt.Errorf("%d of %d replies: %s", len(errs), of, strings.Join(out, "; "))
	}
	return errors.New(strings.Join(out, "; "))
}

func sorted(xs []string) []string {
	out := slices.Clone(xs)
	sort.Strings(out)
	return out
}

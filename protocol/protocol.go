// Package protocol is shardtest/1, the contract between the shardtest
// harness and an implementation under test (docs/protocol.md): the wire
// types of every endpoint, the capabilities an implementation declares, the
// error codes with the outcome each one means, and the node events. Both
// sides use these types: the harness's client (package protocol/client)
// reads them, and the reference node and any Go implementation built on
// the kit (package protocol/kit) write them, so there is one definition of
// each.
//
// The types hold what the protocol defines. Anything else an implementation
// wants to show goes under Detail, which the harness stores and shows but
// never reads.
package protocol

import (
	"slices"
	"strings"
	"time"
)

// Version is the protocol version an implementation names in its status
// and capabilities.
const Version = "shardtest/1"

// Headers every reply carries: the member that served it.
const (
	NodeHeader        = "X-Shardtest-Node"
	IncarnationHeader = "X-Shardtest-Incarnation"
)

// ServedBy names the member that served a reply; every reply body has it
// too.
type ServedBy struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
}

// UID is a member's unique id: name@incarnation.
func UID(name, incarnation string) string { return name + "@" + incarnation }

// NodeName returns the node name of a member uid (name@incarnation).
func NodeName(uid string) string { name, _, _ := strings.Cut(uid, "@"); return name }

// Capabilities an implementation may declare (docs/protocol.md,
// Capabilities). Membership is required; every other one is optional, and
// the harness refuses (or, in a suite, skips) what needs one that is not
// declared.
const (
	// CapMembership: GET /v1/status with self, members and readiness.
	CapMembership = "membership"
	// CapAge: members carry an up_number (their age, not from a clock) and
	// the status names the oldest; faults aimed at the oldest need it.
	CapAge = "age"
	// CapSingleton: POST /v1/singleton/next-id.
	CapSingleton = "singleton"
	// CapSharding: POST /v1/entity (ask) for the declared entity types.
	CapSharding = "sharding"
	// CapTell: POST /v1/entity with mode "tell" (fire and forget).
	CapTell = "tell"
	// CapCoordinator: one member runs each entity type's shard
	// coordinator and says so in its status (coordinator_running); faults
	// aimed at the coordinator need it.
	CapCoordinator = "coordinator"
	// CapEvents: GET /v1/events.
	CapEvents = "events"
	// CapClock: POST/GET /v1/admin/clock (in-process clock skew).
	CapClock = "clock"
	// CapFilter: POST/GET /v1/admin/filter (in-process packet filter).
	CapFilter = "filter"
	// CapLeave: POST /v1/admin/leave (graceful leave).
	CapLeave = "leave"
	// CapDown: POST /v1/admin/down (an operator downs a member).
	CapDown = "down"
	// CapJournal: the implementation keeps state in the harness's journal
	// (SHARDTEST_JOURNAL), so faults on the journal (journal-cut,
	// kill:journal) can affect it; without it they are not drawn. No
	// endpoint of its own (revision 4).
	CapJournal = "journal"
)

// AllCapabilities lists every capability of shardtest/1, membership first.
func AllCapabilities() []string {
	return []string{CapMembership, CapAge, CapSingleton, CapSharding, CapTell, CapCoordinator,
		CapEvents, CapClock, CapFilter, CapLeave, CapDown, CapJournal}
}

// Capabilities is GET /v1/capabilities: what the implementation offers.
type Capabilities struct {
	ServedBy ServedBy `json:"served_by"`
	Protocol string   `json:"protocol"`
	// Revision, if given, is the revision of shardtest/1 the
	// implementation was written for (Revisions); conform then labels the
	// rules that arrived after it. 0: not said.
	Revision int `json:"revision,omitempty"`
	// Implementation names the implementation (for reports).
	Implementation string `json:"implementation"`
	// Capabilities the harness may use.
	Capabilities []string `json:"capabilities"`
	// Singletons are the singletons served (the harness uses
	// "id-generator").
	Singletons []string `json:"singletons"`
	// EntityTypes are the entity types POST /v1/entity serves.
	EntityTypes []string `json:"entity_types"`
	// Bugs are deliberate bugs SHARDTEST_BUGS can switch on (the reference
	// node's; empty for implementations under test).
	Bugs []string `json:"bugs"`
}

// Has reports whether the implementation declares capability c.
func (c Capabilities) Has(capability string) bool { return slices.Contains(c.Capabilities, capability) }

// HasEntityType reports whether the implementation serves entity type t.
func (c Capabilities) HasEntityType(t string) bool { return slices.Contains(c.EntityTypes, t) }

// HasSingleton reports whether the implementation serves singleton name.
func (c Capabilities) HasSingleton(name string) bool { return slices.Contains(c.Singletons, name) }

// IDGenerator is the test singleton's name.
const IDGenerator = "id-generator"

// Entity types the harness's workloads use (docs/protocol.md, Entity
// types).
const (
	TypeRegister = "register"
	TypeLog      = "log"
	TypeSender   = "sender"
)

// Health is GET /v1/health: 200 whenever the process serves HTTP.
type Health struct {
	ServedBy ServedBy `json:"served_by"`
	OK       bool     `json:"ok"`
	Ready    bool     `json:"ready"`
	Status   string   `json:"status"`
}

// Time formats a node-clock reading as the protocol writes times: RFC 3339
// with nanoseconds.
func Time(t time.Time) string { return t.Format(time.RFC3339Nano) }

// Endpoint is one endpoint of shardtest/1.
type Endpoint struct {
	Path string
	// Methods it answers (HEAD wherever GET: net/http drops the body).
	Methods []string
	// Capability it belongs to ("": every node serves it).
	Capability string
}

// Endpoints lists every endpoint of shardtest/1: the kit routes by it,
// conform checks the undeclared ones answer 404.
func Endpoints() []Endpoint {
	get, post, both := []string{"GET", "HEAD"}, []string{"POST"}, []string{"GET", "HEAD", "POST"}
	return []Endpoint{
		{"/v1/health", get, ""},
		{"/v1/status", get, CapMembership},
		{"/v1/capabilities", get, ""},
		{"/v1/events", get, CapEvents},
		{"/v1/singleton/next-id", post, CapSingleton},
		{"/v1/entity", post, CapSharding},
		{"/v1/admin/clock", both, CapClock},
		{"/v1/admin/filter", both, CapFilter},
		{"/v1/admin/leave", post, CapLeave},
		{"/v1/admin/down", post, CapDown},
	}
}

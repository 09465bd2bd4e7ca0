package protocol

import "encoding/json"

// Entity request modes.
const (
	// ModeAsk (the default) waits for the entity's reply.
	ModeAsk = "ask"
	// ModeTell (capability tell) is fire-and-forget: 202 at once, delivered
	// at most once, in the order the node accepted the sender's tells.
	ModeTell = "tell"
)

// Limits of an entity request.
const (
	MaxEntityIDBytes = 256
	MaxSenderBytes   = 256
)

// EntityRequest is POST /v1/entity (capability sharding): one message to
// one entity, routed to wherever it lives.
type EntityRequest struct {
	// Type is one of the node's entity_types; ID is 1–256 bytes of UTF-8.
	Type string `json:"type"`
	ID   string `json:"id"`
	// Op and Payload are the entity type's operation (the Register*,
	// Log* and Sender* types).
	Op      string          `json:"op"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Sender names the client (up to 256 bytes), for ordering and
	// de-duplication.
	Sender string `json:"sender,omitempty"`
	// Mode is ModeAsk (default) or ModeTell.
	Mode string `json:"mode,omitempty"`
}

// EntityReply answers an ask.
type EntityReply struct {
	ServedBy ServedBy `json:"served_by"`
	Type     string   `json:"type"`
	ID       string   `json:"id"`
	// Shard is the entity's shard ("" for an implementation without
	// shards).
	Shard string `json:"shard"`
	// Node is the uid of the member hosting the entity.
	Node string `json:"node"`
	// EntityIncarnation is unique per start of the entity, cluster-wide.
	EntityIncarnation string          `json:"entity_incarnation"`
	Result            json.RawMessage `json:"result"`
}

// TellReply answers an accepted tell (202).
type TellReply struct {
	ServedBy ServedBy `json:"served_by"`
	Accepted bool     `json:"accepted"`
}

// The entity types' operations (docs/protocol.md, Entity types): register
// read / write / cas, log append / read, sender send / pending / flush.
// Workloads write these payloads and histories record them as values.
const (
	OpRead    = "read"
	OpWrite   = "write"
	OpCAS     = "cas"
	OpAppend  = "append"
	OpSend    = "send"
	OpPending = "pending"
	OpFlush   = "flush"
)

// RegisterWrite is a register write's payload.
type RegisterWrite struct {
	Value int64 `json:"value"`
}

// RegisterCAS is a register cas's payload: set Value if the register
// holds Expect (nil: never written).
type RegisterCAS struct {
	Expect *int64 `json:"expect"`
	Value  int64  `json:"value"`
}

// RegisterResult is a register op's result: the value (nil: never
// written) and, for cas, whether it succeeded (on failure, Value is the
// current value).
type RegisterResult struct {
	OK    *bool  `json:"ok,omitempty"`
	Value *int64 `json:"value"`
}

// LogEntry is one entry of a log entity.
type LogEntry struct {
	Client string `json:"client"`
	Seq    int64  `json:"seq"`
}

// LogAppend is a log append's payload; with Dedup a (client, seq) already
// in the log is not appended again.
type LogAppend struct {
	LogEntry
	Dedup bool `json:"dedup"`
}

// LogAppendResult is an append's result.
type LogAppendResult struct {
	// Length is the number of entries after the append.
	Length    int  `json:"length"`
	Duplicate bool `json:"duplicate,omitempty"`
}

// LogReadResult is a log read's result: the entries in append order.
type LogReadResult struct {
	Entries []LogEntry `json:"entries"`
}

// SenderSend is an at-least-once sender's send payload: deliver
// (Client, Seq) to the log entity To.
type SenderSend struct {
	To     string `json:"to"`
	Client string `json:"client"`
	Seq    int64  `json:"seq"`
	Dedup  bool   `json:"dedup"`
}

// SenderSendResult is a send's result, once the message is stored.
type SenderSendResult struct {
	DeliveryID int64 `json:"delivery_id"`
}

// SenderPendingResult is the result of pending and flush.
type SenderPendingResult struct {
	Unconfirmed int `json:"unconfirmed"`
}

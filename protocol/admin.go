package protocol

// ClockRequest is POST /v1/admin/clock (capability clock): it replaces the
// skew. {} resets to real time.
type ClockRequest struct {
	// OffsetMS is added to real time, in milliseconds (±24 h at most).
	OffsetMS float64 `json:"offset_ms"`
	// Drift is the rate error (0.01: the clock gains 1 %; −0.5 … +0.5).
	Drift float64 `json:"drift"`
}

// ClockState is the node clock's skew.
type ClockState struct {
	// OffsetMS is the current offset, including accumulated drift.
	OffsetMS float64 `json:"offset_ms"`
	Drift    float64 `json:"drift"`
	// Now is the node clock's reading (RFC 3339, nanoseconds).
	Now string `json:"now"`
}

// ClockReply answers GET and POST /v1/admin/clock.
type ClockReply struct {
	ServedBy ServedBy `json:"served_by"`
	ClockState
}

// Filter is the node's in-process packet filter (capability filter):
// peers named by their gossip address.
type Filter struct {
	DropIn  []string `json:"drop_in"`
	DropOut []string `json:"drop_out"`
}

// FilterReply answers GET and POST /v1/admin/filter.
type FilterReply struct {
	ServedBy ServedBy `json:"served_by"`
	Filter
}

// LeaveReply answers POST /v1/admin/leave (capability leave).
type LeaveReply struct {
	ServedBy ServedBy `json:"served_by"`
	Status   string   `json:"status"`
}

// DownRequest is POST /v1/admin/down (capability down).
type DownRequest struct {
	// Member is a uid (name@incarnation) or, for its current member, a
	// node name.
	Member string `json:"member"`
}

// DownReply answers DownRequest.
type DownReply struct {
	ServedBy ServedBy `json:"served_by"`
	// Member is the uid downed.
	Member string `json:"member"`
	Status string `json:"status"`
}

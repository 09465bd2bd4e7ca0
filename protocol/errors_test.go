package protocol

import (
	"net/http"
	"slices"
	"testing"
)

// The table defines each code once per wire, and Codes is shardtest/1's
// alone, in the docs' order (conform and docs/protocol.md rely on it).
func TestCodeTable(t *testing.T) {
	seen := map[Scope]map[string]bool{}
	for _, c := range AllCodes() {
		if seen[c.Scope] == nil {
			seen[c.Scope] = map[string]bool{}
		}
		if seen[c.Scope][c.Code] {
			t.Errorf("%s %s: two rows", c.Scope, c.Code)
		}
		seen[c.Scope][c.Code] = true
		if c.Status < 400 || c.Outcome != Fail && c.Outcome != Unknown || c.When == "" {
			t.Errorf("%+v: want a 4xx or 5xx status, outcome fail or unknown, and when", c)
		}
		if got, ok := CodeIn(c.Scope, c.Code); !ok || got != c {
			t.Errorf("CodeIn(%s, %s) = %+v, %v", c.Scope, c.Code, got, ok)
		}
	}
	var public []string
	for _, c := range Codes() {
		public = append(public, c.Code)
	}
	want := []string{CodeBadRequest, CodeNotFound, CodeMethodNotAllowed, CodeCannotLeave, CodeUnknownMember, CodeNotReady,
		CodeDowned, CodeLeft, CodeDropped, CodeUnavailable, CodeEntityStale, CodeJournalUnavailable, CodeUnknownOutcome, CodeInternal}
	if !slices.Equal(public, want) {
		t.Errorf("Codes() = %v, want %v", public, want)
	}
	if _, ok := Code(CodeSeqConflict); ok {
		t.Error("Code knows a journal code: it is shardtest/1's alone")
	}
	if c, _ := CodeIn(ScopeJournal, CodeUnavailable); c.Outcome != Unknown {
		t.Errorf("the journal's unavailable is %s; an append may have been written", c.Outcome)
	}
}

// ErrorReply takes what the body leaves out from the table, and answers
// what nothing classifies as an unknown outcome.
func TestErrorReply(t *testing.T) {
	tests := []struct {
		name    string
		scope   Scope
		status  int
		b       ErrorBody
		want    int
		outcome Outcome
	}{
		{"the table's", ScopePeer, 0, ErrorBody{Code: CodeEntityRejected}, http.StatusConflict, Fail},
		{"a status of its own", ScopePeer, http.StatusRequestEntityTooLarge, ErrorBody{Code: CodeBadRequest}, http.StatusRequestEntityTooLarge, Fail},
		{"an outcome of its own", ScopeJournal, 0, ErrorBody{Code: CodeUnavailable, Outcome: Fail}, http.StatusServiceUnavailable, Fail},
		{"another wire's code", ScopeJournal, 0, ErrorBody{Code: CodeEntityRejected}, http.StatusGatewayTimeout, Unknown},
		{"a made-up outcome", ScopeNode, http.StatusConflict, ErrorBody{Code: "mine", Outcome: "maybe"}, http.StatusGatewayTimeout, Unknown},
	}
	for _, tt := range tests {
		status, b := ErrorReply(tt.scope, tt.status, tt.b)
		if status != tt.want || b.Outcome != tt.outcome || b.Code != tt.b.Code {
			t.Errorf("%s: %d %+v, want %d %s", tt.name, status, b, tt.want, tt.outcome)
		}
	}
}

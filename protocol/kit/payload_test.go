package kit

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/protocol"
)

// The protocol's payloads are read strictly: missing is not null, null is
// refused but for cas's expect, integers are integers, and an op without a
// payload takes none.
func TestParsePayloads(t *testing.T) {
	five := int64(5)
	long := strings.Repeat("c", protocol.MaxSenderBytes+1)
	tests := []struct {
		typ, op, payload string
		want             any // the parsed op; nil: refused
	}{
		{"register", "read", ``, RegisterOp{Op: "read"}},
		{"register", "read", `null`, RegisterOp{Op: "read"}},
		{"register", "read", ` {} `, RegisterOp{Op: "read"}},
		{"register", "read", `{"value":1}`, nil},
		{"register", "read", `[]`, nil},
		{"register", "write", `{"value":-7}`, RegisterOp{Op: "write", Value: -7}},
		{"register", "write", `{"value":0}`, RegisterOp{Op: "write"}},
		{"register", "write", `{"value":-9223372036854775808}`, RegisterOp{Op: "write", Value: -9223372036854775808}},
		{"register", "write", ``, nil},
		{"register", "write", `null`, nil},
		{"register", "write", `{}`, nil},
		{"register", "write", `{"value":null}`, nil},
		{"register", "write", `{"value":"1"}`, nil},
		{"register", "write", `{"value":1.5}`, nil},
		{"register", "write", `{"value":1.0}`, nil},
		{"register", "write", `{"value":1e30}`, nil},
		{"register", "write", `{"value":9223372036854775808}`, nil},
		{"register", "write", `{"value":1,"expect":2}`, nil},
		{"register", "write", `{"value":1} {}`, nil},
		{"register", "cas", `{"expect":5,"value":6}`, RegisterOp{Op: "cas", Value: 6, Expect: &five}},
		{"register", "cas", `{"expect":null,"value":6}`, RegisterOp{Op: "cas", Value: 6}},
		{"register", "cas", `{"value":6}`, nil}, // missing expect is not null
		{"register", "cas", `{"expect":5}`, nil},
		{"register", "cas", `{"expect":5,"value":null}`, nil},
		{"register", "cas", `{"expect":"5","value":6}`, nil},
		{"register", "delete", ``, nil},
		{"register", "", ``, nil},
		{"log", "append", `{"client":"c","seq":3}`, LogOp{Op: "append", Append: protocol.LogAppend{LogEntry: protocol.LogEntry{Client: "c", Seq: 3}}}},
		{"log", "append", `{"client":"c","seq":3,"dedup":true}`, LogOp{Op: "append", Append: protocol.LogAppend{LogEntry: protocol.LogEntry{Client: "c", Seq: 3}, Dedup: true}}},
		{"log", "append", `{"client":"c","seq":3,"dedup":null}`, nil},
		{"log", "append", `{"client":"c","seq":3,"dedup":1}`, nil},
		{"log", "append", `{"client":"c"}`, nil},
		{"log", "append", `{"client":"","seq":1}`, nil},
		{"log", "append", `{"client":1,"seq":1}`, nil},
		{"log", "append", `{"client":"` + long + `","seq":1}`, nil},
		{"log", "append", `{"client":"c\ud800","seq":1}`, nil},
		{"log", "append", `{}`, nil},
		{"log", "read", ``, LogOp{Op: "read"}},
		{"log", "read", `{"client":"c"}`, nil},
		{"log", "truncate", ``, nil},
		{"sender", "send", `{"to":"L","client":"c","seq":1}`, SenderOp{Op: "send", Send: protocol.SenderSend{To: "L", Client: "c", Seq: 1}}},
		{"sender", "send", `{"to":"L","client":"c","seq":1,"dedup":true}`, SenderOp{Op: "send", Send: protocol.SenderSend{To: "L", Client: "c", Seq: 1, Dedup: true}}},
		{"sender", "send", `{"client":"c","seq":1}`, nil},
		{"sender", "send", `{"to":null,"client":"c","seq":1}`, nil},
		{"sender", "send", `{"to":"` + strings.Repeat("L", protocol.MaxEntityIDBytes+1) + `","client":"c","seq":1}`, nil},
		{"sender", "send", `{"to":"L","client":"c","seq":null}`, nil},
		{"sender", "pending", ``, SenderOp{Op: "pending"}},
		{"sender", "flush", `{}`, SenderOp{Op: "flush"}},
		{"sender", "flush", `{"wait":1}`, nil},
		{"sender", "append", ``, nil},
	}
	for _, tt := range tests {
		t.Run(tt.typ+" "+tt.op+" "+tt.payload, func(t *testing.T) {
			var got any
			var err error
			switch tt.typ {
			case protocol.TypeRegister:
				got, err = ParseRegister(tt.op, json.RawMessage(tt.payload))
			case protocol.TypeLog:
				got, err = ParseLog(tt.op, json.RawMessage(tt.payload))
			case protocol.TypeSender:
				got, err = ParseSender(tt.op, json.RawMessage(tt.payload))
			}
			if check := CheckPayload(tt.typ, tt.op, json.RawMessage(tt.payload)); (check == nil) != (err == nil) {
				t.Fatalf("CheckPayload: %v, the parser: %v", check, err)
			}
			if tt.want == nil {
				if err == nil {
					t.Fatalf("accepted as %+v, want refused", got)
				}
				status, body := reply(err, protocol.ServedBy{})
				if status != http.StatusBadRequest || body.Code != protocol.CodeBadRequest || body.Outcome != protocol.Fail {
					t.Fatalf("refused as %d %+v, want 400 bad-request fail", status, body)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("%+v, want %+v", got, tt.want)
			}
		})
	}
	// A type of the implementation's own is its own to check.
	if err := CheckPayload("mine", "anything", json.RawMessage(`[1]`)); err != nil {
		t.Fatalf("CheckPayload of a type the protocol does not define: %v", err)
	}
}

// The refusal says which field and why, so an implementer (or a client)
// can tell missing from null from wrong.
func TestPayloadErrorsNameTheField(t *testing.T) {
	for payload, want := range map[string]string{
		`{"value":6}`:               `"expect" is missing`,
		`{"expect":1,"value":null}`: `"value" is null`,
		`{"expect":1,"value":"x"}`:  `"value" is "x"`,
	} {
		_, err := ParseRegister(protocol.OpCAS, json.RawMessage(payload))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %s", payload, err, want)
		}
	}
}

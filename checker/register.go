package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// regValue is a register value: an integer, or null (never written).
type regValue struct {
	Set bool
	V   int64
}

func (v regValue) String() string {
	if !v.Set {
		return "null"
	}
	return strconv.FormatInt(v.V, 10)
}

// Register operations.
const (
	opRead = iota
	opWrite
	opCAS
)

// regInput is an operation's arguments.
type regInput struct {
	Op     int
	Expect regValue // cas
	Value  regValue // write, cas
}

// regOutput is an operation's result. Unknown: the outcome is unknown
// (info, never completed), and the model accepts any result.
type regOutput struct {
	Unknown bool
	OK      bool     // cas succeeded
	Value   regValue // read: the value; cas failed: the current value
	// HasValue: a failed cas reported the current value.
	HasValue bool
}

// registerModel is the sequential specification of one register. The
// state is a regValue. An op with an unknown outcome may take effect at any
// point after its invocation, including never (after everything else): a
// write then sets the value, a cas sets it if it held the expected one.
var registerModel = porcupine.Model{
	Init: func() interface{} { return regValue{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s := state.(regValue)
		in := input.(regInput)
		out := output.(regOutput)
		switch in.Op {
		case opRead:
			return out.Unknown || out.Value == s, s
		case opWrite:
			return true, in.Value
		case opCAS:
			if out.Unknown {
				if s == in.Expect {
					return true, in.Value
				}
				return true, s
			}
			if out.OK {
				return s == in.Expect, in.Value
			}
			return s != in.Expect && (!out.HasValue || out.Value == s), s
		}
		return false, s
	},
	Equal: func(a, b interface{}) bool { return a.(regValue) == b.(regValue) },
	Hash: func(state interface{}) uint64 {
		s := state.(regValue)
		if !s.Set {
			return 0x9e3779b97f4a7c15
		}
		return uint64(s.V) * 0xff51afd7ed558ccd
	},
	DescribeOperation: func(input, output interface{}) string {
		return describeRegOp(input.(regInput), output.(regOutput))
	},
	DescribeState: func(state interface{}) string { return state.(regValue).String() },
	DescribeOperationMetadata: func(info interface{}) string {
		if s, ok := info.(string); ok {
			return s
		}
		return ""
	},
}

// describeRegOp renders an op like "cas(3, 5) -> ok".
func describeRegOp(in regInput, out regOutput) string {
	var s string
	switch in.Op {
	case opRead:
		s = "read()"
	case opWrite:
		s = fmt.Sprintf("write(%v)", in.Value)
	case opCAS:
		s = fmt.Sprintf("cas(%v, %v)", in.Expect, in.Value)
	}
	switch {
	case out.Unknown:
		return s + " -> ?"
	case in.Op == opRead:
		return s + " -> " + out.Value.String()
	case in.Op == opCAS && out.OK:
		return s + " -> ok"
	case in.Op == opCAS && out.HasValue:
		return s + " -> failed, was " + out.Value.String()
	case in.Op == opCAS:
		return s + " -> failed"
	}
	return s + " -> ok"
}

// regJSON is the union of the register's arguments and results.
type regJSON struct {
	OK     *bool           `json:"ok"`
	Expect json.RawMessage `json:"expect"`
	Value  json.RawMessage `json:"value"`
}

// regFields are a regJSON read: OK only if HasOK.
type regFields struct {
	OK, HasOK     bool
	Expect, Value json.RawMessage
}

// readRegJSON reads a register op's arguments or result exactly as
// encoding/json reads them into a regJSON. The compact objects the
// harness writes take a fast path (every register op has one, and
// encoding/json was a tenth of the pass); anything else goes to
// encoding/json (FuzzReadRegJSON holds the two equal).
func readRegJSON(b json.RawMessage) (regFields, error) {
	if f, ok := fastRegJSON(b); ok {
		return f, nil
	}
	return decodeRegJSON(b)
}

// decodeRegJSON reads with encoding/json only (the baseline's way).
func decodeRegJSON(b json.RawMessage) (regFields, error) {
	var j regJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return regFields{}, err
	}
	f := regFields{Expect: j.Expect, Value: j.Value}
	if j.OK != nil {
		f.OK, f.HasOK = *j.OK, true
	}
	return f, nil
}

// fastRegJSON reads an object of the keys "ok" (true or false), "expect"
// and "value" (null or an integer of at most 18 digits), each at most
// once, with no spaces; ok false for anything else.
func fastRegJSON(b []byte) (f regFields, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return f, false
	}
	b = b[1 : len(b)-1]
	for len(b) > 0 {
		var dst *json.RawMessage
		switch {
		case bytes.HasPrefix(b, []byte(`"ok":`)):
			b = b[len(`"ok":`):]
		case bytes.HasPrefix(b, []byte(`"expect":`)):
			b, dst = b[len(`"expect":`):], &f.Expect
		case bytes.HasPrefix(b, []byte(`"value":`)):
			b, dst = b[len(`"value":`):], &f.Value
		default:
			return f, false
		}
		v := b
		if i := bytes.IndexByte(b, ','); i >= 0 {
			v, b = b[:i], b[i+1:]
			if len(b) == 0 {
				return f, false // a trailing comma
			}
		} else {
			b = nil
		}
		switch {
		case dst == nil && !f.HasOK && (string(v) == "true" || string(v) == "false"):
			f.OK, f.HasOK = string(v) == "true", true
		case dst != nil && *dst == nil && (string(v) == "null" || isJSONInt(v)):
			*dst = v
		default:
			return f, false
		}
	}
	return f, true
}

// isJSONInt: b is a JSON integer (no leading zeros) of at most 18 digits.
func isJSONInt(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 || b[0] == '0' && len(b) > 1 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseRegValue reads an integer or null; absent is null when
// nullIfAbsent.
func parseRegValue(raw json.RawMessage, nullIfAbsent bool) (regValue, bool) {
	if raw == nil {
		return regValue{}, nullIfAbsent
	}
	if string(raw) == "null" {
		return regValue{}, true
	}
	if n, ok := parseInt(raw); ok {
		return regValue{Set: true, V: n}, true
	}
	var num json.Number
	if err := json.Unmarshal(raw, &num); err != nil {
		return regValue{}, false
	}
	n, err := num.Int64()
	return regValue{Set: true, V: n}, err == nil
}

// parseRegInput reads an invocation's arguments.
func parseRegInput(f string, args json.RawMessage) (regInput, error) {
	return parseRegInputWith(readRegJSON, f, args)
}

// parseRegInputWith is parseRegInput reading the JSON with read.
func parseRegInputWith(read func(json.RawMessage) (regFields, error), f string, args json.RawMessage) (regInput, error) {
	var in regInput
	switch f {
	case "read":
		return regInput{Op: opRead}, nil
	case "write":
		in.Op = opWrite
	case "cas":
		in.Op = opCAS
	default:
		return in, fmt.Errorf("unknown register operation %q", f)
	}
	j, err := read(args)
	if err != nil {
		return in, fmt.Errorf("%s arguments %s: %v", f, args, err)
	}
	var ok bool
	if in.Value, ok = parseRegValue(j.Value, false); !ok {
		return in, fmt.Errorf("%s arguments %s: value is not an integer or null", f, args)
	}
	if in.Op == opCAS {
		if in.Expect, ok = parseRegValue(j.Expect, true); !ok {
			return in, fmt.Errorf("cas arguments %s: expect is not an integer or null", args)
		}
	}
	return in, nil
}

// parseRegOutput reads an ok completion's result.
func parseRegOutput(in regInput, result json.RawMessage) (regOutput, error) {
	return parseRegOutputWith(readRegJSON, in, result)
}

// parseRegOutputWith is parseRegOutput reading the JSON with read.
func parseRegOutputWith(read func(json.RawMessage) (regFields, error), in regInput, result json.RawMessage) (regOutput, error) {
	var out regOutput
	if in.Op == opWrite {
		return out, nil // the written value says nothing more
	}
	j, err := read(result)
	if err != nil {
		return out, fmt.Errorf("result %s: %v", result, err)
	}
	var ok bool
	switch in.Op {
	case opRead:
		if j.Value == nil {
			return out, fmt.Errorf("read result %s has no value", result)
		}
		if out.Value, ok = parseRegValue(j.Value, false); !ok {
			return out, fmt.Errorf("read result %s: value is not an integer or null", result)
		}
	case opCAS:
		if !j.HasOK {
			return out, fmt.Errorf("cas result %s has no ok", result)
		}
		out.OK = j.OK
		if !out.OK && j.Value != nil {
			if out.Value, ok = parseRegValue(j.Value, false); !ok {
				return out, fmt.Errorf("cas result %s: value is not an integer or null", result)
			}
			out.HasValue = true
		}
	}
	return out, nil
}

package checker

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzReadRegJSON: a register op's arguments or result read by the fast
// path are what encoding/json reads, and what the fast path refuses still
// reads as encoding/json reads it.
func FuzzReadRegJSON(f *testing.F) {
	for _, s := range []string{
		`{"value":1}`, `{"value":null}`, `{"expect":null,"value":-2}`, `{"ok":true}`, `{"ok":false,"value":3}`,
		`{}`, `{"value":01}`, `{"value":1,}`, `{"Value":1}`, `{"value":1,"value":2}`, `{"ok":null}`, `{"ok":true,"ok":false}`,
		`{ "value":1}`, `{"value":"1"}`, `{"value":1e3}`, `{"value":-0}`, `{"value":1234567890123456789}`, `{"x":1}`, `null`, `[]`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readRegJSON(b)
		var j regJSON
		jerr := json.Unmarshal(b, &j)
		if (err != nil) != (jerr != nil) {
			t.Fatalf("%q: error %v, encoding/json %v", b, err, jerr)
		}
		if err != nil {
			return
		}
		want := regFields{Expect: j.Expect, Value: j.Value}
		if j.OK != nil {
			want.OK, want.HasOK = *j.OK, true
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: read %+v, encoding/json %+v", b, got, want)
		}
		if f, ok := fastRegJSON(b); ok && !reflect.DeepEqual(f, want) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", b, f, want)
		}
	})
}

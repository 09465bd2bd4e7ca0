package history

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// decodeCases are lines the Writer writes and lines it never does; each
// must decode exactly as encoding/json decodes it.
var decodeCases = []string{
	`{"index":0,"time":184305,"kind":"phase","process":-1,"f":"warm-up"}`,
	`{"index":7,"time":3237152862,"kind":"invoke","process":17,"f":"next-id","node":"n3"}`,
	`{"index":9,"time":5,"kind":"ok","process":3,"f":"read","entity":"register/r1","node":"n1","value":{"value":{"w":3,"v":12}},"reply":{"node":"n1","incarnation":"a1","shard":"17","host_node":"n2@x","entity_incarnation":"e9","singleton":"n1@a#1"}}`,
	`{"index":9,"time":5,"kind":"info","process":3,"f":"cas","entity":"register/r1","node":"n1","reply":{"status":503},"error":"unavailable: not ready"}`,
	`{"index":1,"time":2,"kind":"nemesis","process":-1,"f":"partition:asymmetric","value":{"action":"inject","targets":{"targets":["n1","n2"],"how":"oldest"},"s":"a,b}]\"c"}}`,
	`{ "index" : 1 , "time" : 2 , "kind" : "ok" , "value" : [1, 2.5e3, "x", true, false, {}] }`,
	`{}`,
	`{"index":1,"value":null}`,
	`{"index":1,"reply":null}`,
	`{"index":1,"f":null}`,
	`{"index":1,"f":"caf\u00e9"}`,
	`{"index":1,"f":"café"}`,
	`{"index":1,"f":"a\"b"}`,
	`{"Index":1,"KIND":"ok"}`,
	`{"index":1,"index":2}`,
	`{"index":1,"reply":{"node":"a","node":"b"}}`,
	`{"index":1,"unknown":{"x":[1,2]}}`,
	`{"index":01}`,
	`{"index":1.0}`,
	`{"index":1e3}`,
	`{"index":-0}`,
	`{"index":99999999999999999999}`,
	`{"process":9999999999}`,
	`{"index":"1"}`,
	`{"index":1,}`,
	`{"index":1} x`,
	`{"index":1`,
	`{"value":{"a":1}}`,
	`{"value":{"a":}}`,
	`{"value":[1,2}`,
	`{"value":tru}`,
	`{"value":"unterminated}`,
	`{"reply":{"status":503.5}}`,
	`{"reply":{"status":"x"}}`,
	`{"reply":[]}`,
	`[]`,
	`"x"`,
	``,
	`{"error":"line\nbreak"}`,
	"{\"f\":\"tab\there\"}",
}

// checkDecodeAs holds decode equal to encoding/json on line.
func checkDecodeAs[T any](t *testing.T, line string, decode func(d *decoder, line []byte, v *T) error) {
	t.Helper()
	var want T
	wantErr := json.Unmarshal([]byte(line), &want)
	var got T
	gotErr := decode(newDecoder(), []byte(line), &got)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: error %v, encoding/json's %v", line, gotErr, wantErr)
	}
	if wantErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", line, got, want)
	}
}

func checkDecode(t *testing.T, line string) { checkDecodeAs(t, line, (*decoder).op) }

func TestDecoderIsEncodingJSON(t *testing.T) {
	for _, line := range decodeCases {
		checkDecode(t, line)
	}
}

// TestDecoderTakesTheWritersLines: what the Writer writes goes through the
// fast path (else the speed-up is lost without any test noticing).
func TestDecoderTakesTheWritersLines(t *testing.T) {
	for _, line := range decodeCases[:5] {
		var op Op
		if !newDecoder().fastOp([]byte(line), &op) {
			t.Errorf("%q left to encoding/json", line)
		}
	}
}

// TestScanStopsOnTheCallersError: an error of fn ends the scan and is
// returned, even on a cut-off last line.
func TestScanStopsOnTheCallersError(t *testing.T) {
	hist := `{"format":"shardtest-history","version":1,"test":"t"}` + "\n" +
		`{"index":0,"time":1,"kind":"phase","process":-1,"f":"main"}` + "\n" + `{"index":1,"time":2,"kind":"phase","process":-1,"f":"end"}`
	n := 0
	_, truncated, err := Scan(strings.NewReader(hist), func(op *Op) error {
		if n++; op.Index == 1 {
			return errBoom
		}
		return nil
	})
	if err != errBoom || truncated || n != 2 {
		t.Fatalf("err %v, truncated %v, %d calls", err, truncated, n)
	}
}

var errBoom = errors.New("boom")

// TestReadLongLines: a line longer than the read buffer is read whole.
func TestReadLongLines(t *testing.T) {
	long := strings.Repeat("x", 3<<20)
	hist := `{"format":"shardtest-history","version":1,"test":"t"}` + "\n" +
		`{"index":0,"time":1,"kind":"ok","process":1,"value":"` + long + `"}` + "\n" +
		`{"index":1,"time":2,"kind":"phase","process":-1,"f":"end"}` + "\n"
	h, err := Read(strings.NewReader(hist))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Ops) != 2 || len(h.Ops[0].Value) != len(long)+2 || h.Ops[1].F != "end" {
		t.Fatalf("read %d ops", len(h.Ops))
	}
}

func FuzzDecoder(f *testing.F) {
	for _, line := range decodeCases {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line string) { checkDecode(t, line) })
}

// eventCases are node-event lines the EventsWriter writes (the first
// four: the fast path must take them; the fourth from before the node's
// time was kept) and lines it never does; each must decode exactly as
// encoding/json decodes it.
var eventCases = []string{
	`{"node":"n1","lo":1000,"hi":1010,"seq":1,"time":"2026-11-29T18:00:01.5Z","incarnation":"n1@a","type":"shard-started","entity_type":"register","shard":"17"}`,
	`{"node":"n2","lo":5,"hi":9,"seq":42,"time":"2026-11-29T18:00:01.123456789+01:00","incarnation":"n2@b","type":"singleton-started","member":"n2@b","singleton":"id-generator","detail":"hand-over from n1@a"}`,
	`{"node":"n3","lo":5,"hi":9,"seq":43,"time":"0001-01-01T00:00:00Z","incarnation":"n3@c","type":"entity-started","peer":"n1@a","entity":"register/r1","entity_incarnation":"e7"}`,
	`{"node":"n1","lo":1000,"hi":1010,"seq":1,"incarnation":"n1@a","type":"shard-started","entity_type":"register","shard":"17"}`,
	`{"node":"n1","seq":-1}`,
	`{"seq":-0}`,
	`{"seq": -0}`,
	`{"node":"n1","seq":18446744073709551615}`,
	`{"node":"n1","seq":1.5}`,
	`{"node":"n1","node":"n2"}`,
	`{"detail":"caf\u00e9"}`,
	`{"detail":null}`,
	`{"lo":"1"}`,
	`{"type":"x","other":[1,{"a":2}]}`,
	`{"node":"n1"} x`,
	`{"node":"n1"`,
	`[]`,
	``,
	`{"time":null}`,
	`{"time":1}`,
	`{"time":""}`,
	`{"time":"yesterday"}`,
	`{"time":"2026-11-29T18:00:01Z","time":"2026-11-29T18:00:02Z"}`,
	`{"time":"2026-11-29T18:00:01z"}`,
	`{"time":"2026-11-29 18:00:01Z"}`,
	`{"time":"2026-11-29T18:00:01.Z"}`,
	`{"time":"2026-11-29T24:00:00Z"}`,
	`{"time":"2026-11-29T18:00:01+24:00"}`,
	`{"time":"\u0032026-11-29T18:00:01Z"}`,
	`{"time": "2026-11-29T18:00:01-07:30" ,"seq":1}`,
	`{"time":"2026-11-29T18:00:01Z"`,
}

func checkDecodeEvent(t *testing.T, line string) { checkDecodeAs(t, line, (*decoder).event) }

func TestEventDecoderIsEncodingJSON(t *testing.T) {
	for _, line := range eventCases {
		checkDecodeEvent(t, line)
	}
	for _, line := range eventCases[:4] {
		var e NodeEvent
		if !newDecoder().fastEvent([]byte(line), &e) {
			t.Errorf("%q left to encoding/json", line)
		}
	}
}

func FuzzEventDecoder(f *testing.F) {
	for _, line := range eventCases {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line string) { checkDecodeEvent(t, line) })
}

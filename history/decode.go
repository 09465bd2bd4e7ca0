package history

import (
	"encoding/json"
	"strconv"
	"time"
)

// decoder turns history lines into Ops. Decoding dominates checking a long
// history, and encoding/json's reflection costs several times what the
// lines need: so a fast path reads the lines the Writer writes (compact
// JSON objects of Op's fields, ASCII strings without escapes, integers),
// and any other line — an escape, an unknown or repeated key, a null, a
// float, bad syntax — goes to encoding/json. Every line therefore decodes
// exactly as encoding/json decodes it (FuzzDecoder holds the two equal), and
// an error is always encoding/json's.
//
// The strings a history repeats (kinds, fs, nodes, entities, incarnations)
// are interned, so a million ops share a few thousand strings; errors are
// not (they carry messages, often all different).
type decoder struct {
	strs map[string]string
}

// maxInterned bounds the interned strings: a history with more distinct
// ones (a million entities) gets the rest allocated as usual.
const maxInterned = 1 << 20

func newDecoder() *decoder { return &decoder{strs: make(map[string]string)} }

// op decodes line into *op (overwriting all of it).
func (d *decoder) op(line []byte, op *Op) error {
	*op = Op{}
	if d.fastOp(line, op) {
		return nil
	}
	*op = Op{}
	return json.Unmarshal(line, op)
}

func (d *decoder) intern(b []byte) string {
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(d.strs) < maxInterned {
		d.strs[s] = s
	}
	return s
}

// scan is a cursor over one line.
type scan struct {
	b []byte
	i int
}

func (s *scan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c (after whitespace).
func (s *scan) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek is the next byte after whitespace (0 at the end).
func (s *scan) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str reads a string of printable ASCII without escapes, the only kind
// the fast path takes.
func (s *scan) str() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// int reads an integer as encoding/json would into an int64: no leading
// zeros, no fraction or exponent (those are errors there, or go there).
func (s *scan) int() (int64, bool) {
	s.space()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - digits
	if n == 0 || n > 1 && s.b[digits] == '0' || n > 18 {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case '.', 'e', 'E':
			return 0, false
		}
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return v, err == nil
}

// raw reads one JSON value and returns its bytes; encoding/json.Valid
// judges them, so the fast path accepts no value encoding/json would not.
func (s *scan) raw() ([]byte, bool) {
	s.space()
	start := s.i
	if !s.skip() {
		return nil, false
	}
	v := s.b[start:s.i]
	if len(v) == 0 || v[0] == 'n' || !json.Valid(v) {
		// null (a RawMessage gets "null"): left to encoding/json.
		return nil, false
	}
	return v, true
}

// skip moves past one value without judging it (json.Valid does).
func (s *scan) skip() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		for s.i++; s.i < len(s.b); s.i++ {
			switch s.b[s.i] {
			case '\\':
				s.i++
			case '"':
				s.i++
				return true
			}
		}
		return false
	case '{', '[':
		for depth := 0; s.i < len(s.b); {
			switch s.b[s.i] {
			case '"':
				if !s.skip() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default: // a number or a literal: up to the next delimiter
		for ; s.i < len(s.b); s.i++ {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return true
			}
		}
		return true
	}
}

// fields walks an object's keys, calling field for each (which reads the
// value); false when the object is not one the fast path takes.
func (s *scan) fields(field func(key []byte) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	for {
		key, ok := s.str()
		if !ok || !s.byte(':') || !field(key) {
			return false
		}
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// Bits of the keys seen, to send a repeated key to encoding/json.
const (
	kIndex = 1 << iota
	kTime
	kKind
	kProcess
	kF
	kEntity
	kNode
	kValue
	kReply
	kError
)

// fieldSet reads the fields of one object on the fast path, each at most
// once (a repeated key goes to encoding/json, which keeps the last).
type fieldSet struct {
	d    *decoder
	s    *scan
	seen int
}

func (f *fieldSet) once(bit int) bool {
	if f.seen&bit != 0 {
		return false
	}
	f.seen |= bit
	return true
}

// str reads a string field, interned or not.
func (f *fieldSet) str(bit int, dst *string, intern bool) bool {
	if !f.once(bit) {
		return false
	}
	b, ok := f.s.str()
	if !ok {
		return false
	}
	if intern {
		*dst = f.d.intern(b)
	} else {
		*dst = string(b)
	}
	return true
}

// int reads an integer field.
func (f *fieldSet) int(bit int, dst *int64) bool {
	v, ok := f.s.int()
	*dst = v
	return ok && f.once(bit)
}

// uint reads an unsigned integer field. encoding/json refuses any sign
// for an unsigned field, "-0" included, so the fast path takes no '-'.
func (f *fieldSet) uint(bit int, dst *uint64) bool {
	if f.s.peek() == '-' {
		return false
	}
	v, ok := f.s.int()
	*dst = uint64(v)
	return ok && f.once(bit)
}

// time reads a time field as encoding/json does: it hands the string's
// bytes, quotes included, to time.Time's UnmarshalJSON (which never
// unescapes: a string with an escape goes to encoding/json, which hands it
// over the same). An unparsable time goes to encoding/json, for its error.
func (f *fieldSet) time(bit int, dst *time.Time) bool {
	if !f.once(bit) {
		return false
	}
	f.s.space()
	start := f.s.i
	if _, ok := f.s.str(); !ok {
		return false
	}
	return dst.UnmarshalJSON(f.s.b[start:f.s.i]) == nil
}

// whole reports whether the object took the whole line.
func (s *scan) whole() bool {
	s.space()
	return s.i == len(s.b)
}

func (d *decoder) fastOp(line []byte, op *Op) bool {
	s := &scan{b: line}
	f := &fieldSet{d: d, s: s}
	ok := s.fields(func(key []byte) bool {
		switch string(key) {
		case "index":
			return f.int(kIndex, &op.Index)
		case "time":
			return f.int(kTime, &op.Time)
		case "process":
			var v int64
			ok := f.int(kProcess, &v)
			op.Process = int(v)
			return ok && int64(op.Process) == v
		case "kind":
			return f.str(kKind, &op.Kind, true)
		case "f":
			return f.str(kF, &op.F, true)
		case "entity":
			return f.str(kEntity, &op.Entity, true)
		case "node":
			return f.str(kNode, &op.Node, true)
		case "error":
			return f.str(kError, &op.Error, false)
		case "value":
			v, ok := s.raw()
			if !ok || !f.once(kValue) {
				return false
			}
			op.Value = append(json.RawMessage(nil), v...)
			return true
		case "reply":
			if !f.once(kReply) || s.peek() != '{' {
				return false
			}
			op.Reply = &Reply{}
			return d.fastReply(s, op.Reply)
		}
		return false
	})
	return ok && s.whole()
}

func (d *decoder) fastReply(s *scan, r *Reply) bool {
	seen := 0
	str := func(bit int, dst *string) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		b, ok := s.str()
		*dst = d.intern(b)
		return ok
	}
	return s.fields(func(key []byte) bool {
		switch string(key) {
		case "node":
			return str(1, &r.Node)
		case "incarnation":
			return str(2, &r.Incarnation)
		case "shard":
			return str(4, &r.Shard)
		case "host_node":
			return str(8, &r.HostNode)
		case "entity_incarnation":
			return str(16, &r.EntityIncarnation)
		case "singleton":
			return str(32, &r.Singleton)
		case "status":
			if seen&64 != 0 {
				return false
			}
			seen |= 64
			v, ok := s.int()
			r.Status = int(v)
			return ok && int64(r.Status) == v
		}
		return false
	})
}

// event decodes a node-event line into *e (overwriting all of it), by the
// fast path when it can, as encoding/json would.
func (d *decoder) event(line []byte, e *NodeEvent) error {
	*e = NodeEvent{}
	if d.fastEvent(line, e) {
		return nil
	}
	*e = NodeEvent{}
	return json.Unmarshal(line, e)
}

func (d *decoder) fastEvent(line []byte, e *NodeEvent) bool {
	s := &scan{b: line}
	f := &fieldSet{d: d, s: s}
	ok := s.fields(func(key []byte) bool {
		switch string(key) {
		case "node":
			return f.str(1<<0, &e.Node, true)
		case "lo":
			return f.int(1<<1, &e.Lo)
		case "hi":
			return f.int(1<<2, &e.Hi)
		case "seq":
			return f.uint(1<<3, &e.Seq)
		case "time":
			return f.time(1<<14, &e.Time)
		case "incarnation":
			return f.str(1<<4, &e.Incarnation, true)
		case "type":
			return f.str(1<<5, &e.Type, true)
		case "member":
			return f.str(1<<6, &e.Member, true)
		case "peer":
			return f.str(1<<7, &e.Peer, true)
		case "singleton":
			return f.str(1<<8, &e.Singleton, true)
		case "entity_type":
			return f.str(1<<9, &e.EntityType, true)
		case "shard":
			return f.str(1<<10, &e.Shard, true)
		case "entity":
			return f.str(1<<11, &e.Entity, true)
		case "entity_incarnation":
			return f.str(1<<12, &e.EntityIncarnation, true)
		case "detail":
			return f.str(1<<13, &e.Detail, false)
		}
		return false
	})
	return ok && s.whole()
}

package history

import (
	"encoding/json"
	"strconv"
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

func (d *decoder) fastOp(line []byte, op *Op) bool {
	s := &scan{b: line}
	seen := 0
	once := func(bit int) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	str := func(bit int, dst *string, intern bool) bool {
		if !once(bit) {
			return false
		}
		b, ok := s.str()
		if !ok {
			return false
		}
		if intern {
			*dst = d.intern(b)
		} else {
			*dst = string(b)
		}
		return true
	}
	ok := s.fields(func(key []byte) bool {
		switch string(key) {
		case "index":
			v, ok := s.int()
			op.Index = v
			return ok && once(kIndex)
		case "time":
			v, ok := s.int()
			op.Time = v
			return ok && once(kTime)
		case "process":
			v, ok := s.int()
			op.Process = int(v)
			return ok && once(kProcess) && int64(op.Process) == v
		case "kind":
			return str(kKind, &op.Kind, true)
		case "f":
			return str(kF, &op.F, true)
		case "entity":
			return str(kEntity, &op.Entity, true)
		case "node":
			return str(kNode, &op.Node, true)
		case "error":
			return str(kError, &op.Error, false)
		case "value":
			v, ok := s.raw()
			if !ok || !once(kValue) {
				return false
			}
			op.Value = append(json.RawMessage(nil), v...)
			return true
		case "reply":
			if !once(kReply) || s.peek() != '{' {
				return false
			}
			op.Reply = &Reply{}
			return d.fastReply(s, op.Reply)
		}
		return false
	})
	if !ok {
		return false
	}
	s.space()
	return s.i == len(s.b)
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

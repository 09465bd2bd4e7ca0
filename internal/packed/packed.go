// Package packed keeps long sequences of small records of int64 fields in
// a few bytes each: every field is stored as the zigzag varint of its
// difference from the same field of the record before. The checkers and
// the report keep what they need per operation of a long history in one:
// operations arrive nearly in time and index order, so a time or an index
// takes two to four bytes instead of eight, and a run of ten million
// operations stays within a few hundred megabytes (docs/performance.md).
//
// A record is written with Put, field by field in a fixed order, then End;
// it is read back the same way with a Reader. A field may be left out of a
// record as long as the reader can tell from fields read before it.
package packed

import "encoding/binary"

// MaxFields is the most fields a record has.
const MaxFields = 10

// Log is an append-only sequence of records. The zero Log is empty.
type Log struct {
	buf  []byte
	last [MaxFields]int64
	n    int
}

// Put appends field i of the record being written.
func (l *Log) Put(i int, v int64) {
	l.buf = binary.AppendVarint(l.buf, v-l.last[i])
	l.last[i] = v
}

// End closes the record being written.
func (l *Log) End() { l.n++ }

// Len is the number of records.
func (l *Log) Len() int { return l.n }

// Size is the bytes the records take.
func (l *Log) Size() int { return len(l.buf) }

// Reader reads the records from the first.
func (l *Log) Reader() Reader { return Reader{buf: l.buf} }

// Reader reads a Log's records back, field by field in the order they were
// put.
type Reader struct {
	buf  []byte
	pos  int
	last [MaxFields]int64
}

// Get reads field i of the current record.
func (r *Reader) Get(i int) int64 {
	d, n := binary.Varint(r.buf[r.pos:])
	if n <= 0 {
		// Only Put wrote this buffer: a bad varint is a bug here.
		panic("packed: corrupt record")
	}
	r.pos += n
	r.last[i] += d
	return r.last[i]
}

// Done reports whether every record has been read.
func (r *Reader) Done() bool { return r.pos == len(r.buf) }

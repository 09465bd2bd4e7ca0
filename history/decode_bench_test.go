package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// benchHistory is n register ops (invocations and completions) in the
// Writer's format.
func benchHistory(n int) []byte {
	var buf bytes.Buffer
	b, _ := json.Marshal(Header{Format: Format, Version: Version, Test: "bench"})
	buf.Write(append(b, '\n'))
	for i := range n {
		op := Op{Index: int64(i), Time: int64(i) * 1000, Process: i % 40, Entity: fmt.Sprintf("register/r%d", i%10000), Node: fmt.Sprintf("n%d", i%3+1)}
		if i%2 == 0 {
			op.Kind, op.F, op.Value = Invoke, "write", json.RawMessage(fmt.Sprintf(`{"value":%d}`, i))
		} else {
			op.Kind, op.F, op.Value = OK, "write", json.RawMessage(`{}`)
			op.Reply = &Reply{Node: op.Node, Incarnation: "abc123", Shard: fmt.Sprint(i % 100), HostNode: "n2@def456", EntityIncarnation: fmt.Sprintf("e%d", i%777)}
		}
		b, _ := json.Marshal(op)
		buf.Write(append(b, '\n'))
	}
	return buf.Bytes()
}

// BenchmarkRead: Read against decoding every line with encoding/json
// (x-json: Read's time over encoding/json's).
func BenchmarkRead(b *testing.B) {
	data := benchHistory(200_000)
	jsonOnly := func() {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		var ops []Op
		for sc.Scan() {
			var op Op
			if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
				b.Fatal(err)
			}
			ops = append(ops, op)
		}
	}
	b.Run("encoding-json", func(b *testing.B) {
		for range b.N {
			jsonOnly()
		}
	})
	b.Run("read", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := Read(bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

package checker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/history"
)

// hb builds a history by hand. Times are whatever the test says; a
// completion copies f and entity from its process's last invocation.
type hb struct {
	ops  []history.Op
	last map[int]history.Op
}

func (b *hb) add(op history.Op) *hb {
	op.Index = int64(len(b.ops))
	b.ops = append(b.ops, op)
	return b
}

// inv invokes f on entity with args (a JSON string, or "").
func (b *hb) inv(t int64, p int, f, entity, args string) *hb {
	op := history.Op{Time: t, Kind: history.Invoke, Process: p, F: f, Entity: entity, Node: fmt.Sprintf("n%d", p%3+1)}
	if args != "" {
		op.Value = json.RawMessage(args)
	}
	if b.last == nil {
		b.last = map[int]history.Op{}
	}
	b.last[p] = op
	return b.add(op)
}

func (b *hb) done(t int64, p int, kind, result string) *hb {
	l := b.last[p]
	op := history.Op{Time: t, Kind: kind, Process: p, F: l.F, Entity: l.Entity, Node: l.Node, Reply: &history.Reply{Node: l.Node}}
	if result != "" {
		op.Value = json.RawMessage(result)
	}
	if kind != history.OK {
		op.Error = "unknown-outcome: timeout"
	}
	return b.add(op)
}

func (b *hb) ok(t int64, p int, result string) *hb { return b.done(t, p, history.OK, result) }
func (b *hb) fail(t int64, p int) *hb              { return b.done(t, p, history.Fail, "") }
func (b *hb) info(t int64, p int) *hb              { return b.done(t, p, history.Info, "") }

// ended marks the run's end (its final read-back was over).
func (b *hb) ended() *hb {
	t := int64(0)
	if n := len(b.ops); n > 0 {
		t = b.ops[n-1].Time + 1
	}
	return b.add(history.Op{Time: t, Kind: history.Phase, Process: -1, F: history.PhaseEnd})
}

// answered makes the last completion an error reply from the node with
// HTTP status (a 504 unknown-outcome, say), not silence.
func (b *hb) answered(status int) *hb {
	b.ops[len(b.ops)-1].Reply.Status = status
	return b
}

func (b *hb) file() *history.File {
	return &history.File{Header: history.Header{Format: history.Format, Version: history.Version, Test: "t"}, Ops: b.ops}
}

// encode writes a history as JSON lines, as the harness does.
func encode(t testing.TB, f *history.File) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(f.Header); err != nil {
		t.Fatal(err)
	}
	for _, op := range f.Ops {
		if err := enc.Encode(op); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// simOptions shape a simulated run.
type simOptions struct {
	seed              uint64
	clients, entities int
	ops               int     // invocations
	infoRate          float64 // completions that are info (half of them took effect)
	failRate          float64 // completions that are fail (did not take effect)
	leaveOpen         bool    // leave the last in-flight ops without completion
}

// simRegister simulates clients on correct (linearizable) registers: each
// op takes effect at one instant between its invocation and completion.
func simRegister(o simOptions) *history.File {
	rng := rand.New(rand.NewPCG(o.seed, 1))
	b := &hb{}
	type client struct {
		phase  int // 0 idle, 1 invoked, 2 took effect
		f, ent string
		val    int
		expect *int
		result string
	}
	cs := make([]client, o.clients)
	state := map[string]*int{}
	t, n, seq := int64(0), 0, 0
	for n < o.ops || anyBusy(len(cs), func(i int) bool { return cs[i].phase != 0 }) {
		t += 1 + int64(rng.IntN(10))
		p := rng.IntN(o.clients)
		c := &cs[p]
		switch c.phase {
		case 0:
			if n >= o.ops {
				continue
			}
			n++
			seq++
			c.ent = fmt.Sprintf("register/r%d", rng.IntN(o.entities))
			c.val = p*1_000_000 + seq
			switch r := rng.IntN(10); {
			case r < 5:
				c.f = "read"
				b.inv(t, p, "read", c.ent, "")
			case r < 8:
				c.f = "write"
				b.inv(t, p, "write", c.ent, fmt.Sprintf(`{"value":%d}`, c.val))
			default:
				c.f = "cas"
				c.expect = nil
				if cur := state[c.ent]; cur != nil && rng.IntN(2) == 0 {
					e := *cur
					c.expect = &e
				} else if rng.IntN(3) == 0 {
					e := c.val - 1
					c.expect = &e
				}
				b.inv(t, p, "cas", c.ent, fmt.Sprintf(`{"expect":%s,"value":%d}`, jsonInt(c.expect), c.val))
			}
			c.phase = 1
		case 1:
			r := rng.Float64()
			if r < o.failRate {
				b.fail(t, p)
				c.phase = 0
				continue
			}
			if r < o.failRate+o.infoRate {
				if rng.IntN(2) == 0 {
					apply(state, c.f, c.ent, c.val, c.expect)
				}
				b.info(t, p)
				c.phase = 0
				continue
			}
			c.result = apply(state, c.f, c.ent, c.val, c.expect)
			c.phase = 2
		case 2:
			b.ok(t, p, c.result)
			c.phase = 0
		}
		if n >= o.ops && o.leaveOpen {
			break
		}
	}
	return b.file()
}

func anyBusy(n int, busy func(int) bool) bool {
	for i := range n {
		if busy(i) {
			return true
		}
	}
	return false
}

func jsonInt(v *int) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprint(*v)
}

// apply performs an op on the simulated registers and returns its result.
func apply(state map[string]*int, f, ent string, val int, expect *int) string {
	cur := state[ent]
	switch f {
	case "read":
		return fmt.Sprintf(`{"value":%s}`, jsonInt(cur))
	case "write":
		v := val
		state[ent] = &v
		return fmt.Sprintf(`{"value":%d}`, val)
	default:
		if (cur == nil) == (expect == nil) && (cur == nil || *cur == *expect) {
			v := val
			state[ent] = &v
			return fmt.Sprintf(`{"ok":true,"value":%d}`, val)
		}
		return fmt.Sprintf(`{"ok":false,"value":%s}`, jsonInt(cur))
	}
}

// simIDGen simulates clients of a correct id generator.
func simIDGen(seed uint64, clients, ops int) *history.File {
	rng := rand.New(rand.NewPCG(seed, 2))
	b := &hb{}
	phase := make([]int, clients)
	ids := make([]int64, clients)
	next := int64(1)
	t, n := int64(0), 0
	for n < ops || anyBusy(clients, func(i int) bool { return phase[i] != 0 }) {
		t += 1 + int64(rng.IntN(10))
		p := rng.IntN(clients)
		switch phase[p] {
		case 0:
			if n >= ops {
				continue
			}
			n++
			b.inv(t, p, "next-id", "", "")
			phase[p] = 1
		case 1:
			if rng.IntN(100) == 0 {
				next++ // lost reply
				b.info(t, p)
				phase[p] = 0
				continue
			}
			ids[p] = next
			next += 1 + int64(rng.IntN(3))
			phase[p] = 2
		case 2:
			b.done(t, p, history.OK, fmt.Sprintf(`{"id":%d}`, ids[p]))
			b.ops[len(b.ops)-1].Reply.Singleton = "n1@abc#1"
			phase[p] = 0
		}
	}
	return b.file()
}

func contains(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

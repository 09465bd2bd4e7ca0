package checker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/anishathalye/porcupine"

	"github.com/shardtest/shardtest/history"
)

// BaselineRegister is the yardstick shardtest bench check measures the
// checkers against: the least any linearizability check of a register
// history must do, and nothing more — decode every line with encoding/json
// (the operations' values too: decodeRegJSON, not the checkers' fast path),
// pair each invocation with its process's completion, and run porcupine on
// each entity's operations once the history is read. It returns how many
// entities were linearizable and how many not (an entity porcupine gave up
// on counts as neither).
func BaselineRegister(ctx context.Context, r io.Reader) (ok, illegal int, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	type open struct {
		entity string
		op     porcupine.Operation
	}
	inFlight := map[int]open{}
	perEntity := map[string][]porcupine.Operation{}
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		var op history.Op
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			return 0, 0, fmt.Errorf("baseline: line %d: %w", op.Index+2, err)
		}
		switch {
		case op.Kind == history.Invoke && op.Entity != "":
			in, err := parseRegInputWith(decodeRegJSON, op.F, op.Value)
			if err != nil {
				return 0, 0, fmt.Errorf("baseline: #%d: %w", op.Index, err)
			}
			inFlight[op.Process] = open{op.Entity, porcupine.Operation{ClientId: op.Process, Input: in, Call: op.Time, Return: math.MaxInt64, Output: regOutput{Unknown: true}}}
		case op.Completion():
			o, found := inFlight[op.Process]
			if !found {
				continue
			}
			delete(inFlight, op.Process)
			switch op.Kind {
			case history.Fail:
				continue
			case history.OK:
				out, err := parseRegOutputWith(decodeRegJSON, o.op.Input.(regInput), op.Value)
				if err != nil {
					return 0, 0, fmt.Errorf("baseline: #%d: %w", op.Index, err)
				}
				o.op.Output, o.op.Return = out, op.Time
			}
			perEntity[o.entity] = append(perEntity[o.entity], o.op)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("baseline: %w", err)
	}
	for _, o := range inFlight {
		perEntity[o.entity] = append(perEntity[o.entity], o.op)
	}
	for _, ops := range perEntity {
		if ctx.Err() != nil {
			return ok, illegal, ctx.Err()
		}
		switch porcupine.CheckOperationsTimeout(registerModel, ops, 0) {
		case porcupine.Ok:
			ok++
		case porcupine.Illegal:
			illegal++
		}
	}
	return ok, illegal, nil
}

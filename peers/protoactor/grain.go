package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"
)

// journalTimeout bounds one journal call of a grain (the client's own
// retries included), so a grain whose journal is gone answers instead of
// holding its mailbox.
const journalTimeout = 5 * time.Second

// grainDeps are what every register grain of this member shares.
type grainDeps struct {
	// ctx is the member's life: a grain's journal calls end with it.
	ctx     context.Context
	journal *journal.Client
	acts    *activations
	node    string // this member's uid
	log     *slog.Logger
}

// grain is one activation of a register: a protoactor virtual actor whose
// state is event-sourced in the journal under "register/<id>". It replays
// on activation, appends each change (expected_seq = the last seq it saw)
// before replying, and on a conflict or an append of unknown outcome
// re-reads before acting again. Its mailbox serialises its requests.
type grain struct {
	deps   *grainDeps
	id     string
	inc    string // entity incarnation
	ctx    context.Context
	cancel context.CancelFunc
	state  registerState
	// loaded: the journal has been replayed; dirty: it must be read again
	// before the next request (a conflict, or an append of unknown outcome).
	loaded, dirty bool
	asked         bool // a request has come
	stopped       bool
}

// senderAddress is the member address a request came from (a request
// future lives on the member that asked).
func senderAddress(c actor.Context) string {
	if s := c.Sender(); s != nil {
		return s.GetAddress()
	}
	return ""
}

func newGrain(deps *grainDeps) actor.Actor { return &grain{deps: deps} }

// Receive implements actor.Actor.
func (g *grain) Receive(c actor.Context) {
	switch msg := c.Message().(type) {
	case *actor.Started:
		g.id = cluster.GetClusterIdentity(c).Identity
		g.ctx, g.cancel = context.WithCancel(g.deps.ctx)
		g.inc = g.deps.acts.start(g.id)
		g.deps.log.Info("grain activated", "entity", g.id, "entity_incarnation", g.inc, "pid", c.Self().String())
	case *cluster.ClusterInit:
		if err := g.sync(); err != nil {
			g.deps.log.Warn("grain could not replay its journal on activation; it will retry on its next request", "entity", g.id, "entity_incarnation", g.inc, "err", err)
		}
	case *wrapperspb.BytesValue:
		if !g.asked {
			// Who asked first is who had this activation made: the
			// evidence of which member's view placed it here.
			g.asked = true
			g.deps.log.Info("grain's first request", "entity", g.id, "entity_incarnation", g.inc, "from", senderAddress(c))
		}
		c.Respond(g.handle(msg))
	case *actor.Stopping:
		g.cancel()
	case *actor.Stopped:
		g.stop("stopped")
	case *actor.Restarting:
		g.stop("restarting after a failure")
	}
}

// stop ends this activation's life as the status and events show it.
func (g *grain) stop(why string) {
	if g.stopped || g.inc == "" {
		return
	}
	g.stopped = true
	g.cancel()
	g.deps.acts.stop(g.id, g.inc, why)
	g.deps.log.Info("grain deactivated", "entity", g.id, "entity_incarnation", g.inc, "why", why)
}

func (g *grain) pid() string { return "register/" + g.id }

// handle serves one request and returns the reply to send.
func (g *grain) handle(msg *wrapperspb.BytesValue) *wrapperspb.BytesValue {
	var req grainRequest
	res, err := protocol.RegisterResult{}, decode(msg, &req)
	if err != nil {
		err = kit.Errorf(protocol.CodeBadRequest, "%v", err)
	} else {
		res, err = g.serve(req)
	}
	rep := grainReply{Node: g.deps.node, Incarnation: g.inc}
	var ke *kit.Error
	switch {
	case err == nil:
		rep.Result, err = json.Marshal(res)
		if err != nil {
			rep.Code, rep.Error = protocol.CodeInternal, err.Error()
		}
	case errors.As(err, &ke):
		rep.Code, rep.Error = ke.Code, ke.Message
	default:
		rep.Code, rep.Error = protocol.CodeUnknownOutcome, err.Error()
	}
	out, err := encode(rep)
	if err != nil {
		// Only a bug gets here: grainReply always encodes.
		g.deps.log.Error("encode a grain reply", "err", err)
		return wrapperspb.Bytes(nil)
	}
	return out
}

// serve applies one register request.
func (g *grain) serve(req grainRequest) (protocol.RegisterResult, error) {
	var none protocol.RegisterResult
	c, err := kit.ParseRegister(req.Op, req.Payload)
	if err != nil {
		return none, err
	}
	if err := g.sync(); err != nil {
		return none, kit.Errorf(protocol.CodeJournalUnavailable, "register %s could not read its journal before acting: %w", g.id, err)
	}
	if res, ok := g.state.answered(req.Request, c); ok {
		g.deps.log.Info("grain answered a retried request with its first attempt's effect", "entity", g.id, "entity_incarnation", g.inc, "request", req.Request)
		return res, nil
	}
	res, ev := g.state.decide(req.Request, c)
	if ev == nil {
		return res, nil
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return none, kit.Errorf(protocol.CodeInternal, "encode the event: %w", err)
	}
	ctx, cancel := context.WithTimeout(g.ctx, journalTimeout)
	defer cancel()
	expected := g.state.seq
	seq, err := g.deps.journal.Append(ctx, g.pid(), expected, journal.NoEpoch, [][]byte{data})
	switch {
	case err == nil:
		g.state.apply(seq, *ev)
		return res, nil
	case errors.Is(err, journal.ErrSeqConflict):
		g.dirty = true
		g.deps.log.Warn("grain's append conflicted: another activation of this register wrote after the seq it had seen",
			"entity", g.id, "entity_incarnation", g.inc, "expected_seq", expected, "err", err)
		if serr := g.sync(); serr != nil {
			g.deps.log.Warn("grain could not re-read after the conflict; it will on its next request", "entity", g.id, "err", serr)
		}
		return none, kit.Errorf(protocol.CodeEntityStale, "register %s: another activation appended after seq %d first; nothing was written: %w", g.id, expected, err)
	case journal.IsDefinite(err):
		g.dirty = true
		return none, kit.Errorf(protocol.CodeInternal, "the journal refused the append: %w", err)
	default:
		// journal.ErrUnavailable or the deadline: it may have been written.
		g.dirty = true
		g.deps.log.Warn("grain's append has an unknown outcome; it re-reads before its next request", "entity", g.id, "entity_incarnation", g.inc, "err", err)
		return none, kit.Errorf(protocol.CodeUnknownOutcome, "register %s: append of unknown outcome: %w", g.id, err)
	}
}

// sync replays the journal from the last seq applied, if the state was
// never loaded or must be read again.
func (g *grain) sync() error {
	if g.loaded && !g.dirty {
		return nil
	}
	ctx, cancel := context.WithTimeout(g.ctx, journalTimeout)
	defer cancel()
	evs, err := g.deps.journal.Replay(ctx, g.pid(), g.state.seq+1, 0)
	if err != nil {
		return fmt.Errorf("replay %s from %d: %w", g.pid(), g.state.seq+1, err)
	}
	for _, e := range evs {
		if e.Seq != g.state.seq+1 {
			return fmt.Errorf("replay %s: event %d after %d", g.pid(), e.Seq, g.state.seq)
		}
		if err := g.state.applyData(e.Seq, e.Data); err != nil {
			return err
		}
	}
	g.loaded, g.dirty = true, false
	return nil
}

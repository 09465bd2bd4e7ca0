package entities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/sharding"
)

// The at-least-once sender (protocol.TypeSender) is a persistent entity
// that stores each message before sending it to a log entity, redelivers on
// a timer until the log confirms it, and after a crash (in its next
// incarnation) replays and resends what was not confirmed — the seeds'
// AtLeastOnceDelivery. Its ops (kit.ParseSender reads them):
//
//	send    {"to": log id, "client": c, "seq": n, "dedup": bool} → {"delivery_id": d}
//	pending —                                                  → {"unconfirmed": k}
//	flush   —  (waits until nothing is unconfirmed, or the request times out)
//	                                                           → {"unconfirmed": k}
//
// The log receives append {"client": c, "seq": n, "dedup": dedup}: without
// dedup a redelivery can append twice (at-least-once); with dedup the log
// drops duplicates (effectively-once). A sender resumes redelivery when it
// next starts, i.e. when it is next addressed: a workload's final phase
// sends every sender "flush".

// Send delivers a message to an entity of a type through the local region.
type Send func(ctx context.Context, typeName string, msg sharding.Message) (sharding.Reply, error)

// SenderOptions configure senders.
type SenderOptions struct {
	Options
	// RedeliverInterval between delivery attempts of an unconfirmed
	// message (default 1s).
	RedeliverInterval time.Duration
}

// SenderEvent is a sender's journal event.
type SenderEvent struct {
	Kind       string `json:"k"` // "sent" or "confirmed"
	DeliveryID int64  `json:"d"`
	To         string `json:"to,omitempty"`
	Client     string `json:"c,omitempty"`
	Seq        int64  `json:"s,omitempty"`
	Dedup      bool   `json:"dd,omitempty"`
}

// The kinds of SenderEvent.
const (
	senderSent      = "sent"
	senderConfirmed = "confirmed"
)

// SenderState is a sender's decisions, free of I/O and of time: the
// delivery id a send gets, what is unconfirmed, and what a redelivery
// round sends, in which order. The node's sender drives it from a
// goroutine and a ticker; the simulation (sim/nodes) from its scheduler.
type SenderState struct {
	next        int64
	unconfirmed map[int64]SenderEvent
}

// NewSenderState is the state of a sender that has sent nothing.
func NewSenderState() *SenderState {
	return &SenderState{unconfirmed: map[int64]SenderEvent{}}
}

// Sent is the event that stores a send of req: the next delivery id.
func (s *SenderState) Sent(req protocol.SenderSend) SenderEvent {
	return SenderEvent{Kind: senderSent, DeliveryID: s.next + 1, To: req.To, Client: req.Client, Seq: req.Seq, Dedup: req.Dedup}
}

// Confirmed is the event that stores the log's confirmation of a delivery.
func Confirmed(deliveryID int64) SenderEvent {
	return SenderEvent{Kind: senderConfirmed, DeliveryID: deliveryID}
}

// Apply applies a stored (or replayed) event.
func (s *SenderState) Apply(e SenderEvent) error {
	switch e.Kind {
	case senderSent:
		s.unconfirmed[e.DeliveryID] = e
		s.next = max(s.next, e.DeliveryID)
	case senderConfirmed:
		delete(s.unconfirmed, e.DeliveryID)
	default:
		return fmt.Errorf("unknown sender event %q", e.Kind)
	}
	return nil
}

// Pending is how many sends are unconfirmed.
func (s *SenderState) Pending() int { return len(s.unconfirmed) }

// Round is what a redelivery round sends: every unconfirmed message,
// oldest first. A round stops at the first that is not confirmed, to keep
// the order.
func (s *SenderState) Round() []SenderEvent {
	batch := make([]SenderEvent, 0, len(s.unconfirmed))
	for _, e := range s.unconfirmed {
		batch = append(batch, e)
	}
	sort.Slice(batch, func(i, j int) bool { return batch[i].DeliveryID < batch[j].DeliveryID })
	return batch
}

// Delivery is the log append that delivers e, to an entity of
// protocol.TypeLog.
func Delivery(e SenderEvent) sharding.Message {
	payload, _ := json.Marshal(protocol.LogAppend{LogEntry: protocol.LogEntry{Client: e.Client, Seq: e.Seq}, Dedup: e.Dedup})
	return sharding.Message{EntityID: e.To, Op: protocol.OpAppend, Payload: payload, Sender: "sender"}
}

// DeliveryTimeout bounds one delivery attempt.
const DeliveryTimeout = 5 * time.Second

// SenderJournal is a sender's state behind its journal: every change is
// stored (fenced, as every entity's) before it is applied. Its caller
// serializes its calls.
type SenderJournal struct {
	j     journaled
	state *SenderState
}

// OpenSender fences the sender ec's journal id and replays its events.
func OpenSender(ctx context.Context, ec sharding.EntityContext, opts Options) (*SenderJournal, error) {
	sj := &SenderJournal{state: NewSenderState(), j: newJournaled(ec, protocol.TypeSender)}
	if err := sj.j.recover(ctx, opts, sj.apply); err != nil {
		return nil, err
	}
	return sj, nil
}

// apply applies a replayed event.
func (sj *SenderJournal) apply(data []byte) error {
	var e SenderEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return err
	}
	return sj.state.Apply(e)
}

// State is the sender's state, as stored.
func (sj *SenderJournal) State() *SenderState { return sj.state }

// store stores e and applies it.
func (sj *SenderJournal) store(ctx context.Context, e SenderEvent) error {
	if err := sj.j.sync(ctx, sj.apply); err != nil {
		return err
	}
	if err := sj.j.persist(ctx, e); err != nil {
		return err
	}
	return sj.state.Apply(e)
}

// Confirm stores the confirmation of a delivery. ErrStale: a newer
// incarnation holds the sender (this one must stop delivering).
func (sj *SenderJournal) Confirm(ctx context.Context, deliveryID int64) error {
	return sj.store(ctx, Confirmed(deliveryID))
}

// Handle serves send (stored before the reply) and pending. flush, which
// waits for the redeliveries, is its driver's: for it Handle reports
// flush and does nothing.
func (sj *SenderJournal) Handle(ctx context.Context, msg sharding.Message) (res json.RawMessage, flush bool, err error) {
	op, err := kit.ParseSender(msg.Op, msg.Payload)
	if err != nil {
		return nil, false, parsed(err)
	}
	switch op.Op {
	case protocol.OpSend:
		e := sj.state.Sent(op.Send)
		if err := sj.store(ctx, e); err != nil {
			return nil, false, err
		}
		res, err := json.Marshal(protocol.SenderSendResult{DeliveryID: e.DeliveryID})
		return res, false, err
	case protocol.OpPending:
		return PendingResult(sj.state.Pending()), false, nil
	case protocol.OpFlush:
		return nil, true, nil
	}
	return nil, false, fmt.Errorf("%w: unknown sender op %q", ErrBadRequest, msg.Op) // ParseSender knows no other
}

// PendingResult is the reply of pending and flush: k unconfirmed.
func PendingResult(k int) json.RawMessage {
	res, _ := json.Marshal(protocol.SenderPendingResult{Unconfirmed: k})
	return res
}

// sender is the node's sender entity: a SenderJournal, a goroutine that
// redelivers on a ticker and when woken, and flushes that wait on a
// channel.
type sender struct {
	send     Send
	clock    clock.Clock
	interval time.Duration

	mu      sync.Mutex // the journal and state, shared with the redeliverer
	sj      *SenderJournal
	changed chan struct{} // closed when a confirmation is stored

	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// NewSender returns the factory of sender entities; send reaches the log
// entities.
func NewSender(opts SenderOptions, send Send) sharding.EntityFactory {
	if opts.RedeliverInterval <= 0 {
		opts.RedeliverInterval = time.Second
	}
	return func(ctx context.Context, ec sharding.EntityContext) (sharding.Entity, error) {
		sj, err := OpenSender(ctx, ec, opts.Options)
		if err != nil {
			return nil, err
		}
		s := &sender{
			send: send, clock: sj.j.clock, interval: opts.RedeliverInterval, sj: sj,
			changed: make(chan struct{}), wake: make(chan struct{}, 1), done: make(chan struct{}),
		}
		rctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		go s.redeliver(rctx)
		s.kick()
		return s, nil
	}
}

func (s *sender) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) Handle(ctx context.Context, msg sharding.Message) (json.RawMessage, error) {
	s.mu.Lock()
	res, flush, err := s.sj.Handle(ctx, msg)
	s.mu.Unlock()
	if err != nil || !flush {
		if err == nil && msg.Op == protocol.OpSend {
			s.kick()
		}
		return res, err
	}
	for {
		s.mu.Lock()
		n, ch := s.sj.state.Pending(), s.changed
		s.mu.Unlock()
		if n == 0 {
			return PendingResult(0), nil
		}
		s.kick()
		select {
		case <-ch:
		case <-ctx.Done():
			return PendingResult(n), nil
		}
	}
}

// redeliver sends every unconfirmed message, oldest first, until confirmed;
// it runs until Stop.
func (s *sender) redeliver(ctx context.Context) {
	defer close(s.done)
	t := s.clock.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-s.wake:
		}
		s.mu.Lock()
		batch := s.sj.state.Round()
		s.mu.Unlock()
		for _, e := range batch {
			if ctx.Err() != nil {
				return
			}
			dctx, cancel := clock.WithTimeout(ctx, s.clock, DeliveryTimeout)
			_, err := s.send(dctx, protocol.TypeLog, Delivery(e))
			cancel()
			if err != nil {
				// Not confirmed (lost, unknown, or refused): try again on the
				// next tick. Stop at the first failure to keep order.
				break
			}
			s.mu.Lock()
			cerr := s.sj.Confirm(ctx, e.DeliveryID)
			if cerr == nil {
				close(s.changed)
				s.changed = make(chan struct{})
			}
			s.mu.Unlock()
			if errors.Is(cerr, ErrStale) {
				return // a newer incarnation took over
			}
			if cerr != nil {
				break
			}
		}
	}
}

func (s *sender) Stop(context.Context) error {
	s.cancel()
	<-s.done
	return nil
}

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

type senderEvent struct {
	Kind       string `json:"k"` // "sent" or "confirmed"
	DeliveryID int64  `json:"d"`
	To         string `json:"to,omitempty"`
	Client     string `json:"c,omitempty"`
	Seq        int64  `json:"s,omitempty"`
	Dedup      bool   `json:"dd,omitempty"`
}

type sender struct {
	send     Send
	clock    clock.Clock
	interval time.Duration

	mu          sync.Mutex // the journal and state, shared with the redeliverer
	j           journaled
	next        int64
	unconfirmed map[int64]senderEvent
	changed     chan struct{} // closed when unconfirmed shrinks

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
		s := &sender{
			send: send, clock: ec.Clock, interval: opts.RedeliverInterval,
			unconfirmed: map[int64]senderEvent{}, changed: make(chan struct{}),
			wake: make(chan struct{}, 1), done: make(chan struct{}),
		}
		s.j = newJournaled(ec, protocol.TypeSender, s.apply)
		s.clock = s.j.clock
		if err := s.j.recover(ctx, opts.Options); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		go s.redeliver(rctx)
		s.kick()
		return s, nil
	}
}

func (s *sender) apply(data []byte) error {
	var e senderEvent
	if err := json.Unmarshal(data, &e); err != nil {
		return err
	}
	switch e.Kind {
	case "sent":
		s.unconfirmed[e.DeliveryID] = e
		s.next = max(s.next, e.DeliveryID)
	case "confirmed":
		delete(s.unconfirmed, e.DeliveryID)
		close(s.changed)
		s.changed = make(chan struct{})
	default:
		return fmt.Errorf("unknown sender event %q", e.Kind)
	}
	return nil
}

// persistApply persists e and applies it; the caller holds mu.
func (s *sender) persistApply(ctx context.Context, e senderEvent) error {
	data, _ := json.Marshal(e)
	if err := s.j.sync(ctx); err != nil {
		return err
	}
	if err := s.j.persist(ctx, e); err != nil {
		return err
	}
	return s.apply(data)
}

func (s *sender) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sender) Handle(ctx context.Context, msg sharding.Message) (json.RawMessage, error) {
	op, err := kit.ParseSender(msg.Op, msg.Payload)
	if err != nil {
		return nil, parsed(err)
	}
	switch op.Op {
	case protocol.OpSend:
		req := op.Send
		s.mu.Lock()
		e := senderEvent{Kind: "sent", DeliveryID: s.next + 1, To: req.To, Client: req.Client, Seq: req.Seq, Dedup: req.Dedup}
		err = s.persistApply(ctx, e)
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		s.kick()
		return json.Marshal(protocol.SenderSendResult{DeliveryID: e.DeliveryID})
	case protocol.OpPending:
		return json.Marshal(protocol.SenderPendingResult{Unconfirmed: s.pending()})
	case protocol.OpFlush:
		for {
			s.mu.Lock()
			n, ch := len(s.unconfirmed), s.changed
			s.mu.Unlock()
			if n == 0 {
				break
			}
			s.kick()
			select {
			case <-ch:
			case <-ctx.Done():
				return json.Marshal(protocol.SenderPendingResult{Unconfirmed: n})
			}
		}
		return json.Marshal(protocol.SenderPendingResult{})
	}
	return nil, fmt.Errorf("%w: unknown sender op %q", ErrBadRequest, msg.Op) // ParseSender knows no other
}

func (s *sender) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.unconfirmed)
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
		batch := make([]senderEvent, 0, len(s.unconfirmed))
		for _, e := range s.unconfirmed {
			batch = append(batch, e)
		}
		s.mu.Unlock()
		sort.Slice(batch, func(i, j int) bool { return batch[i].DeliveryID < batch[j].DeliveryID })
		for _, e := range batch {
			if ctx.Err() != nil {
				return
			}
			payload, _ := json.Marshal(protocol.LogAppend{LogEntry: protocol.LogEntry{Client: e.Client, Seq: e.Seq}, Dedup: e.Dedup})
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := s.send(dctx, protocol.TypeLog, sharding.Message{EntityID: e.To, Op: protocol.OpAppend, Payload: payload, Sender: "sender"})
			cancel()
			if err != nil {
				// Not confirmed (lost, unknown, or refused): try again on the
				// next tick. Stop at the first failure to keep order.
				break
			}
			s.mu.Lock()
			cerr := s.persistApply(ctx, senderEvent{Kind: "confirmed", DeliveryID: e.DeliveryID})
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

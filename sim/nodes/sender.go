package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/shardtest/shardtest/impl/entities"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/protocol"
)

// simSender is the at-least-once sender entity in the simulation: the
// node's own decisions and journal (entities.SenderState behind an
// entities.SenderJournal), with what the node runs on a goroutine, a
// ticker and a channel driven by the scheduler instead: the redelivery
// rounds (every RedeliverInterval of the node's clock, and at once after a
// send), each delivery through the node's log region with the real
// attempt's timeout, and a flush's wait for the last confirmation.
//
// Where it differs from the node's: a confirmation is stored only while
// the node reaches the journal and no call of the entity waits on it (the
// node's redeliverer would wait for a cut journal, holding the entity's
// lock); otherwise the round ends there and the message stays
// unconfirmed, to be delivered again, as after any failed attempt.
type simSender struct {
	r        *region
	sj       *entities.SenderJournal
	interval time.Duration

	// stopped: Stop was called, or a newer incarnation took over (a
	// confirmation was refused as stale): no more rounds.
	stopped bool
	// inRound: a round is under way; again: a tick or a send came during
	// it (the node's ticker and wake channel each hold one).
	inRound, again bool
	// handling: a call of the entity runs (it may wait on a cut journal,
	// as a coroutine, with the journal's sequence number in hand).
	handling bool
	flushes  []*flushWait
}

// flushWait is a flush waiting for the last confirmation or its deadline.
type flushWait struct {
	answer func(json.RawMessage)
}

// senderFactory is the sender type's factory on region r.
func senderFactory(r *region, opts entities.Options, interval time.Duration) sharding.EntityFactory {
	return func(ctx context.Context, ec sharding.EntityContext) (sharding.Entity, error) {
		sj, err := entities.OpenSender(ctx, ec, opts)
		if err != nil {
			return nil, err
		}
		s := &simSender{r: r, sj: sj, interval: interval}
		s.tick()
		s.kick()
		return s, nil
	}
}

// tick arms the next redelivery tick.
func (s *simSender) tick() {
	s.r.inc.after(s.interval, "", func() {
		if s.stopped {
			return
		}
		s.kick()
		s.tick()
	})
}

// kick starts a round now, or right after the one under way.
func (s *simSender) kick() {
	if s.stopped {
		return
	}
	if s.inRound {
		s.again = true
		return
	}
	s.inRound = true
	s.r.inc.after(0, "", func() { s.deliver(s.sj.State().Round()) })
}

// deliver delivers batch's first message, and the next once it is
// confirmed; the round ends at the first that is not.
func (s *simSender) deliver(batch []entities.SenderEvent) {
	logs := s.r.inc.regionOf(protocol.TypeLog)
	if s.stopped || len(batch) == 0 || logs == nil {
		s.roundOver()
		return
	}
	e := batch[0]
	logs.deliverBy(entities.Delivery(e), s.r.now()+entities.DeliveryTimeout, nil, func(_ sharding.Reply, err error) {
		if s.stopped || s.r.inc.gone() {
			return
		}
		if err != nil || s.handling || !s.r.inc.n.c.journalReachable(s.r.inc.n.Name) {
			s.roundOver()
			return
		}
		err = s.sj.Confirm(context.Background(), e.DeliveryID)
		if errors.Is(err, entities.ErrStale) {
			s.stopped = true // a newer incarnation took over
			return
		}
		if err != nil {
			s.roundOver()
			return
		}
		s.confirmed()
		s.deliver(batch[1:])
	})
}

func (s *simSender) roundOver() {
	s.inRound = false
	if s.again {
		s.again = false
		s.kick()
	}
}

// confirmed answers the flushes once nothing is unconfirmed.
func (s *simSender) confirmed() {
	if s.sj.State().Pending() > 0 {
		return
	}
	waits := s.flushes
	s.flushes = nil
	for _, w := range waits {
		w.answer(entities.PendingResult(0))
	}
}

// flush answers once nothing is unconfirmed, or at deadline with what
// still is, as the node's flush returns when its caller's context ends.
func (s *simSender) flush(deadline time.Duration, answer func(json.RawMessage)) {
	if s.sj.State().Pending() == 0 {
		answer(entities.PendingResult(0))
		return
	}
	s.kick()
	w := &flushWait{answer: answer}
	s.flushes = append(s.flushes, w)
	s.r.inc.n.c.World.At(deadline, func() {
		if s.r.inc.gone() {
			return // the process ended: nobody answers
		}
		for i, x := range s.flushes {
			if x == w {
				s.flushes = append(s.flushes[:i], s.flushes[i+1:]...)
				w.answer(entities.PendingResult(s.sj.State().Pending()))
				return
			}
		}
	})
}

// Handle implements sharding.Entity: send and pending (flush is taken
// before it, by simShard.handle).
func (s *simSender) Handle(ctx context.Context, msg sharding.Message) (json.RawMessage, error) {
	s.handling = true
	defer func() { s.handling = false }()
	res, flush, err := s.sj.Handle(ctx, msg)
	if flush {
		return nil, errors.New("sim: a sender's flush is answered by its driver")
	}
	if err == nil && msg.Op == protocol.OpSend {
		s.kick()
	}
	return res, err
}

// Stop implements sharding.Entity.
func (s *simSender) Stop(context.Context) error {
	s.stopped = true
	return nil
}

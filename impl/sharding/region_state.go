package sharding

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// RegionState is the routing decisions of one region, as a state machine:
// where a message for a shard goes (a shard hosted here, the region that
// hosts it, or the shard's buffer while its home is unknown or being
// handed off), when to ask the coordinator for a home, in which order a
// buffer is flushed and what happens when a home turns out wrong. Step
// does no I/O, reads no clock and starts nothing; Region drives it over
// the coordinator, the peer client and the shards' entity runners, and a
// simulation over its own.
//
// Messages are named by the driver (RegionMsg.ID); the machine holds only
// their ids in the order they must be delivered. A buffer's existence
// means one ask-and-flush cycle is under way for its shard: asking
// (AskHome sent), waiting to ask again (ArmRetry), or flushing (one
// Forward at a time, so that one sender's messages keep their order).
type RegionState struct {
	self string
	cfg  RegionConfig
	log  *slog.Logger

	stopped bool
	// homes caches the region (member uid) hosting each shard elsewhere.
	homes map[string]string
	// local is the mode of each shard hosted here.
	local   map[string]shardMode
	buffers map[string]*regionBuffer
	// bufferedIn names the shard whose buffer holds each buffered message.
	bufferedIn map[uint64]string
	// buffered counts the messages in buffers (what BufferSize bounds).
	buffered int
	// handingOff marks shards whose hand-off began here and whose new home
	// this region has not learnt yet (kept only for DropBufferedOnHandOff).
	handingOff map[string]bool
	dropped    uint64

	out []RegionEffect
}

// RegionConfig is what a RegionState decides with.
type RegionConfig struct {
	TypeName      string
	BufferSize    int
	RetryInterval time.Duration
	// NumberOfShards: the coordinator may place shards "0" to
	// NumberOfShards-1 here and no other (the ids HashShards gives). 0:
	// shard ids are not numbers (a custom ExtractShardID) and any is
	// taken.
	NumberOfShards int
	// ProxyOnly regions never host shards.
	ProxyOnly bool
	Bugs      Bugs
}

// shardMode is a hosted shard's state as routing sees it.
type shardMode int

const (
	// shardAccepting: deliveries go to the shard's entities.
	shardAccepting shardMode = iota + 1
	// shardClosed: a hand-off has begun; deliveries wait in the buffer. A
	// host-shard reopens it (an aborted hand-off).
	shardClosed
	// shardStopping: final; the shard's entities are stopping and it will
	// be removed (RgShardRemoved).
	shardStopping
)

// regionBuffer holds the messages of one shard whose home is unknown.
type regionBuffer struct {
	queue []RegionMsg
	// phase of the buffer's ask-and-flush cycle.
	phase bufferPhase
	// home being flushed to, and the message in flight to it (flushing).
	home     string
	inFlight uint64
	// notHere names the home that answered it does not host the shard;
	// the next ask tells the coordinator, which then makes that region
	// host it again (or answers anew).
	notHere string
	// handOff: messages were buffered while the shard was handed off
	// (kept only for Bugs.DropBufferedOnHandOff).
	handOff bool
}

type bufferPhase int

const (
	phaseAsking bufferPhase = iota + 1
	phaseWaiting
	phaseFlushing
)

// RegionMsg is one message as routing sees it: the driver's id for it, its
// shard and entity.
type RegionMsg struct {
	ID     uint64
	Shard  string
	Entity string
}

// NewRegionState returns the routing state of the region self (a member
// uid), with nothing hosted, known or buffered.
func NewRegionState(self string, cfg RegionConfig, log *slog.Logger) *RegionState {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RegionState{
		self: self, cfg: cfg, log: log,
		homes:      map[string]string{},
		local:      map[string]shardMode{},
		buffers:    map[string]*regionBuffer{},
		bufferedIn: map[uint64]string{},
		handingOff: map[string]bool{},
	}
}

// RegionInput is what a RegionState steps on.
type RegionInput interface{ regionInput() }

// RgSubmit: a local caller sends a message.
type RgSubmit struct{ Msg RegionMsg }

// RgPeerDeliver: another region forwarded a message to a shard it believes
// is hosted here; it is served here or refused, never routed further.
type RgPeerDeliver struct{ Msg RegionMsg }

// RgAbandoned: the caller of a buffered message gave up on it (its
// deadline passed); it is never sent.
type RgAbandoned struct{ ID uint64 }

// RgHome is the coordinator's answer to AskHome, or why there was none.
type RgHome struct {
	Shard, Home string
	Err         error
}

// RgRetry: the retry timer of a shard's buffer (ArmRetry) fired.
type RgRetry struct{ Shard string }

// RgForwarded is the outcome of a Forward. Delivered: the home took it
// (whatever the entity answered), or its caller had already given up;
// else the message certainly reached no entity, and Requeued says whether
// it is to wait for the shard's next home (false: its deadline passed
// meanwhile and the driver has failed it).
type RgForwarded struct {
	Msg       RegionMsg
	Home      string
	Flush     bool
	Delivered bool
	Requeued  bool
}

// RgRebuffer: a shard returns messages that never reached an entity (held
// for a passivating entity when the shard closed); they go to the front of
// its buffer, in order.
type RgRebuffer struct {
	Shard string
	Msgs  []RegionMsg
}

// ByCoordinator names who asks for a coordinator's request (host-shard,
// begin-hand-off, hand-off): From, the member it comes from as the peer
// guard admitted it, and Coordinator, the member this region's view puts
// the entity type's coordinator on. Only the coordinator decides where a
// shard lives: what another member asks is refused (errNotCoordinator).
type ByCoordinator struct{ From, Coordinator string }

// RgHostShard: the coordinator asks this region to host a shard; the
// answer is a HostResult.
type RgHostShard struct {
	Shard string
	By    ByCoordinator
}

// RgBeginHandOff: the coordinator is about to move a shard: forget its
// home, close it if hosted here, and buffer its messages. Refused (not
// the coordinator's, or no shard of the type) it gives Refused.
type RgBeginHandOff struct {
	Shard string
	By    ByCoordinator
}

// RgHandOff: the coordinator asks this region to stop the shard's
// entities and drop the shard; StopShard follows if it is hosted here.
// Refused it gives Refused.
type RgHandOff struct {
	Shard string
	By    ByCoordinator
}

// RgShardRemoved: a shard's entities have all stopped (StopShard done).
type RgShardRemoved struct{ Shard string }

// RgStop: the region stops (its member is leaving the cluster for good or
// was downed): what is buffered fails, local shards stop at once.
type RgStop struct{}

func (RgSubmit) regionInput()       {}
func (RgPeerDeliver) regionInput()  {}
func (RgAbandoned) regionInput()    {}
func (RgHome) regionInput()         {}
func (RgRetry) regionInput()        {}
func (RgForwarded) regionInput()    {}
func (RgRebuffer) regionInput()     {}
func (RgHostShard) regionInput()    {}
func (RgBeginHandOff) regionInput() {}
func (RgHandOff) regionInput()      {}
func (RgShardRemoved) regionInput() {}
func (RgStop) regionInput()         {}

// RegionEffect is what a Step asks its driver to do, in order.
type RegionEffect interface{ regionEffect() }

// Enqueue: give the message to its entity in the shard hosted here (its
// order among the shard's messages is now fixed).
type Enqueue struct {
	Msg   RegionMsg
	Shard string
}

// Forward: send the message to the region Home, and step RgForwarded with
// the outcome. Flush forwards come one at a time from a buffer; the others
// are a caller's direct sends to a known home.
type Forward struct {
	Msg   RegionMsg
	Home  string
	Flush bool
}

// AskHome: ask the coordinator for the shard's home (telling it which
// region said it does not host the shard), and step RgHome with the answer.
type AskHome struct{ Shard, NotHere string }

// ArmRetry: step RgRetry for the shard after the delay.
type ArmRetry struct {
	Shard string
	After time.Duration
}

// FailMsg: answer the message with a definite error (it was never sent).
type FailMsg struct {
	Msg RegionMsg
	Err error
}

// ForgetMsg: let go of the message without answering it (deliberate bug:
// its caller waits for its deadline).
type ForgetMsg struct{ Msg RegionMsg }

// StartShard: create the shard's entity runner here.
type StartShard struct{ Shard string }

// CloseShard: the shard takes no new deliveries (a hand-off began).
type CloseShard struct{ Shard string }

// ReopenShard: the shard takes deliveries again (an aborted hand-off).
type ReopenShard struct{ Shard string }

// StopShard: stop the shard's entities after what is in their mailboxes
// (Now: at once, failing what is queued), then step RgShardRemoved.
type StopShard struct {
	Shard string
	Now   bool
}

// HostResult answers RgHostShard (nil: hosted).
type HostResult struct{ Err error }

// Refused answers RgBeginHandOff or RgHandOff that the region will not
// act on; it did nothing.
type Refused struct{ Err error }

// EmitRegionEvent: append the event to the node's event log.
type EmitRegionEvent struct{ Event protocol.Event }

// LocalChanged: the set of shards hosted here changed.
type LocalChanged struct{}

func (Enqueue) regionEffect()         {}
func (Forward) regionEffect()         {}
func (AskHome) regionEffect()         {}
func (ArmRetry) regionEffect()        {}
func (FailMsg) regionEffect()         {}
func (ForgetMsg) regionEffect()       {}
func (StartShard) regionEffect()      {}
func (CloseShard) regionEffect()      {}
func (ReopenShard) regionEffect()     {}
func (StopShard) regionEffect()       {}
func (HostResult) regionEffect()      {}
func (Refused) regionEffect()         {}
func (EmitRegionEvent) regionEffect() {}
func (LocalChanged) regionEffect()    {}

// Step takes one input and returns the effects to carry out, in order.
func (s *RegionState) Step(in RegionInput) []RegionEffect {
	s.out = nil
	switch in := in.(type) {
	case RgSubmit:
		s.submit(in.Msg)
	case RgPeerDeliver:
		s.peerDeliver(in.Msg)
	case RgAbandoned:
		s.abandoned(in.ID)
	case RgHome:
		s.home(in)
	case RgRetry:
		if b := s.buffers[in.Shard]; b != nil && b.phase == phaseWaiting {
			s.ask(in.Shard, b)
		}
	case RgForwarded:
		s.forwarded(in)
	case RgRebuffer:
		for i := len(in.Msgs) - 1; i >= 0; i-- {
			if s.stopped {
				s.emit(FailMsg{Msg: in.Msgs[i], Err: fmt.Errorf("%w: the message came back undelivered after the region stopped", ErrRegionStopped)})
				continue
			}
			s.buffer(in.Msgs[i], true, false)
		}
	case RgHostShard:
		err := s.coordinatorsWord(in.Shard, in.By)
		if err == nil {
			err = s.host(in.Shard)
		}
		s.emit(HostResult{Err: err})
	case RgBeginHandOff:
		if err := s.coordinatorsWord(in.Shard, in.By); err != nil {
			s.emit(Refused{Err: err})
			break
		}
		s.beginHandOff(in.Shard)
	case RgHandOff:
		if err := s.coordinatorsWord(in.Shard, in.By); err != nil {
			s.emit(Refused{Err: err})
			break
		}
		delete(s.homes, in.Shard)
		if s.local[in.Shard] != 0 {
			// Also when it is stopping already: the asker waits for the
			// same stop, never answers before the entities have stopped.
			s.local[in.Shard] = shardStopping
			s.emit(StopShard{Shard: in.Shard})
		}
	case RgShardRemoved:
		if s.local[in.Shard] != 0 {
			delete(s.local, in.Shard)
			s.emit(LocalChanged{})
		}
	case RgStop:
		s.stop()
	default:
		panic(fmt.Sprintf("sharding: unknown region input %T", in))
	}
	out := s.out
	s.out = nil
	return out
}

func (s *RegionState) emit(e RegionEffect) { s.out = append(s.out, e) }

func (s *RegionState) submit(m RegionMsg) {
	if s.stopped {
		s.emit(FailMsg{Msg: m, Err: fmt.Errorf("%w: %s", ErrRegionStopped, s.cfg.TypeName)})
		return
	}
	if _, buffering := s.buffers[m.Shard]; !buffering {
		if s.local[m.Shard] == shardAccepting {
			s.emit(Enqueue{Msg: m, Shard: m.Shard})
			return
		}
		if s.local[m.Shard] == 0 {
			if home, ok := s.homes[m.Shard]; ok {
				s.emit(Forward{Msg: m, Home: home})
				return
			}
		}
	}
	s.buffer(m, false, true)
}

func (s *RegionState) peerDeliver(m RegionMsg) {
	switch {
	case s.stopped:
		s.emit(FailMsg{Msg: m, Err: ErrRegionStopped})
	case s.local[m.Shard] == 0:
		s.emit(FailMsg{Msg: m, Err: fmt.Errorf("%w: shard %s", ErrShardNotHere, m.Shard)})
	case s.local[m.Shard] != shardAccepting:
		s.emit(FailMsg{Msg: m, Err: fmt.Errorf("%w: shard %s is being handed off", ErrShardNotHere, m.Shard)})
	default:
		s.emit(Enqueue{Msg: m, Shard: m.Shard})
	}
}

// buffer puts a message into its shard's buffer (at the front for one that
// had been taken out in order, else at the back) and starts the shard's
// ask-and-flush cycle if none is under way. bounded applies BufferSize:
// when the buffers are full the incoming message is dropped (as Akka drops
// what overflows), counted and logged.
func (s *RegionState) buffer(m RegionMsg, front, bounded bool) {
	if bounded && s.buffered >= s.cfg.BufferSize {
		s.dropped++
		s.log.Warn("region buffer full; dropped the incoming message", "shard", m.Shard, "entity", m.Entity, "dropped_total", s.dropped)
		s.emit(EmitRegionEvent{Event: protocol.Event{Type: protocol.EventBufferDropped, Member: s.self, EntityType: s.cfg.TypeName,
			Shard: m.Shard, Entity: m.Entity,
			Detail: fmt.Sprintf("buffer of %d full; dropped the incoming message (%d in total)", s.cfg.BufferSize, s.dropped)}})
		s.emit(FailMsg{Msg: m, Err: fmt.Errorf("%w (buffer size %d)", ErrBufferFull, s.cfg.BufferSize)})
		return
	}
	b := s.buffers[m.Shard]
	if b == nil {
		b = &regionBuffer{}
		s.buffers[m.Shard] = b
	}
	// A buffer without a phase has no ask-and-flush cycle yet.
	fresh := b.phase == 0
	if s.handingOff[m.Shard] {
		b.handOff = true
	}
	if front {
		b.queue = slices.Insert(b.queue, 0, m)
	} else {
		b.queue = append(b.queue, m)
	}
	s.buffered++
	s.bufferedIn[m.ID] = m.Shard
	if fresh {
		s.ask(m.Shard, b)
	}
}

func (s *RegionState) ask(shard string, b *regionBuffer) {
	if len(b.queue) == 0 {
		delete(s.buffers, shard)
		return
	}
	b.phase = phaseAsking
	s.emit(AskHome{Shard: shard, NotHere: b.notHere})
}

func (s *RegionState) abandoned(id uint64) {
	shard, ok := s.bufferedIn[id]
	if !ok {
		return // not buffered: in a mailbox or in flight, answered there
	}
	b := s.buffers[shard]
	if i := slices.IndexFunc(b.queue, func(m RegionMsg) bool { return m.ID == id }); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		s.buffered--
	}
	delete(s.bufferedIn, id)
}

func (s *RegionState) home(in RgHome) {
	b := s.buffers[in.Shard]
	if b == nil || b.phase != phaseAsking || s.stopped {
		return
	}
	if in.Err != nil {
		s.log.Debug("no home for shard yet", "shard", in.Shard, "err", in.Err)
		b.phase = phaseWaiting
		s.emit(ArmRetry{Shard: in.Shard, After: s.cfg.RetryInterval})
		return
	}
	b.notHere = ""
	if in.Home != s.self {
		s.homes[in.Shard] = in.Home
	}
	delete(s.handingOff, in.Shard)
	if b.handOff {
		// Deliberate bug (DropBufferedOnHandOff): what waited for the
		// shard's new home is thrown away, uncounted; the callers wait
		// for their deadline.
		b.handOff = false
		for _, m := range b.queue {
			s.emit(ForgetMsg{Msg: m})
			delete(s.bufferedIn, m.ID)
		}
		s.buffered -= len(b.queue)
		b.queue = nil
	}
	b.phase = phaseFlushing
	b.home = in.Home
	s.flush(in.Shard, b)
}

// flush delivers the buffer's messages to its home in order: all at once
// to a shard hosted here, one Forward at a time elsewhere. When the home
// turns out wrong the messages wait and the home is asked again.
func (s *RegionState) flush(shard string, b *regionBuffer) {
	for {
		if len(b.queue) == 0 {
			delete(s.buffers, shard)
			return
		}
		if b.home == s.self {
			if s.local[shard] != shardAccepting {
				// Not (or no longer) hosted here: ask again.
				b.notHere = s.self
				s.ask(shard, b)
				return
			}
			s.emit(Enqueue{Msg: s.pop(b), Shard: shard})
			continue
		}
		if s.homes[shard] != b.home {
			// A hand-off began meanwhile.
			s.ask(shard, b)
			return
		}
		m := s.pop(b)
		b.inFlight = m.ID
		s.emit(Forward{Msg: m, Home: b.home, Flush: true})
		return
	}
}

// pop takes the next message to flush out of the buffer.
func (s *RegionState) pop(b *regionBuffer) RegionMsg {
	var m RegionMsg
	if s.cfg.Bugs.ReorderBuffered {
		// Deliberate bug: the buffer is popped like a stack, newest first.
		last := len(b.queue) - 1
		m = b.queue[last]
		b.queue = b.queue[:last]
	} else {
		m = b.queue[0]
		b.queue = slices.Delete(b.queue, 0, 1)
	}
	s.buffered--
	delete(s.bufferedIn, m.ID)
	return m
}

func (s *RegionState) forwarded(in RgForwarded) {
	if !in.Delivered {
		if s.homes[in.Msg.Shard] == in.Home {
			delete(s.homes, in.Msg.Shard)
		}
	}
	if !in.Flush {
		if in.Delivered || !in.Requeued {
			return
		}
		if s.stopped {
			s.emit(FailMsg{Msg: in.Msg, Err: fmt.Errorf("%w: %s", ErrRegionStopped, s.cfg.TypeName)})
			return
		}
		if b := s.buffers[in.Msg.Shard]; b == nil {
			// Ask for the next home, telling the coordinator which one
			// said no.
			s.buffers[in.Msg.Shard] = &regionBuffer{notHere: in.Home}
		}
		s.buffer(in.Msg, false, false)
		return
	}
	b := s.buffers[in.Msg.Shard]
	if b == nil || b.phase != phaseFlushing || b.inFlight != in.Msg.ID {
		// The region stopped meanwhile (it failed the buffer).
		if !in.Delivered && in.Requeued {
			s.emit(FailMsg{Msg: in.Msg, Err: fmt.Errorf("%w: the message came back undelivered after the region stopped", ErrRegionStopped)})
		}
		return
	}
	b.inFlight = 0
	if in.Delivered {
		s.flush(in.Msg.Shard, b)
		return
	}
	if in.Requeued {
		b.queue = slices.Insert(b.queue, 0, in.Msg)
		s.buffered++
		s.bufferedIn[in.Msg.ID] = in.Msg.Shard
	}
	// The home said no (or is gone) even if this message's caller has
	// given up: the next ask tells the coordinator.
	b.notHere = in.Home
	s.ask(in.Msg.Shard, b)
}

// coordinatorsWord refuses a coordinator's request that is not the
// coordinator's: from another member than the one this region's view
// runs the coordinator on, or for a shard the type does not have. Before,
// any member could make a region host any shard, also one whose home was
// elsewhere, and deliver to it: two live incarnations of an entity.
func (s *RegionState) coordinatorsWord(shard string, by ByCoordinator) error {
	if by.From == "" || by.From != by.Coordinator {
		at := by.Coordinator
		if at == "" {
			at = "no member"
		}
		return fmt.Errorf("%w: %q asks about shard %s, and the coordinator of %s runs on %s in %s's view",
			errNotCoordinator, by.From, shard, s.cfg.TypeName, at, s.self)
	}
	if n := s.cfg.NumberOfShards; n > 0 {
		if i, err := strconv.Atoi(shard); err != nil || i < 0 || i >= n || strconv.Itoa(i) != shard {
			return fmt.Errorf("%w: %q is not a shard of %s (0 to %d)", errShardOutOfRange, shard, s.cfg.TypeName, n-1)
		}
	}
	return nil
}

func (s *RegionState) host(shard string) error {
	if s.cfg.ProxyOnly {
		return errProxyOnly
	}
	if s.stopped {
		return ErrRegionStopped
	}
	switch s.local[shard] {
	case shardStopping:
		return errHandingOff
	case shardClosed:
		s.local[shard] = shardAccepting
		s.emit(ReopenShard{Shard: shard})
		return nil
	case shardAccepting:
		return nil
	}
	s.local[shard] = shardAccepting
	delete(s.homes, shard)
	s.emit(StartShard{Shard: shard})
	s.emit(LocalChanged{})
	s.emit(EmitRegionEvent{Event: protocol.Event{Type: protocol.EventShardStarted, Member: s.self, EntityType: s.cfg.TypeName, Shard: shard}})
	return nil
}

func (s *RegionState) beginHandOff(shard string) {
	delete(s.homes, shard)
	if s.cfg.Bugs.DropBufferedOnHandOff {
		s.handingOff[shard] = true
		if b := s.buffers[shard]; b != nil {
			b.handOff = true
		}
	}
	if s.local[shard] == shardAccepting {
		s.local[shard] = shardClosed
		s.emit(CloseShard{Shard: shard})
	}
}

func (s *RegionState) stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	for _, shard := range slices.Sorted(maps.Keys(s.buffers)) {
		b := s.buffers[shard]
		for _, m := range b.queue {
			s.emit(FailMsg{Msg: m, Err: fmt.Errorf("%w: region stopped while the message was buffered", ErrRegionStopped)})
		}
	}
	s.buffers = map[string]*regionBuffer{}
	s.bufferedIn = map[uint64]string{}
	s.buffered = 0
	for _, shard := range slices.Sorted(maps.Keys(s.local)) {
		s.emit(StopShard{Shard: shard, Now: true})
	}
	s.local = map[string]shardMode{}
	s.emit(LocalChanged{})
}

// Stopped reports whether the region has stopped.
func (s *RegionState) Stopped() bool { return s.stopped }

// Hosted returns the shards hosted here (in any mode), sorted.
func (s *RegionState) Hosted() []string { return slices.Sorted(maps.Keys(s.local)) }

// KnownHomes counts the shards whose remote home is cached.
func (s *RegionState) KnownHomes() int { return len(s.homes) }

// Buffered counts the messages waiting for a home.
func (s *RegionState) Buffered() int { return s.buffered }

// Dropped counts the messages dropped from a full buffer, in total.
func (s *RegionState) Dropped() uint64 { return s.dropped }

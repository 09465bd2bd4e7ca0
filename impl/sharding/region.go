package sharding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/singleton"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// Region is the ShardRegion of one entity type on one member. It routes
// every message by its shard: to a shard hosted here, to the region that
// hosts it, or — while the home is unknown or a hand-off is in progress —
// into a bounded buffer while it asks the coordinator.
type Region struct {
	s       Settings
	d       Deps
	coord   *singleton.Proxy
	log     *slog.Logger
	self    string // member uid
	extract ExtractShardID
	// proxyOnly regions never host shards.
	proxyOnly bool

	// ctx is the region's lifetime; cancelled when Run returns.
	ctx    context.Context
	cancel context.CancelFunc
	ran    atomic.Bool

	mu         sync.Mutex
	stopped    bool
	registered bool
	homes      map[string]string // shard -> region uid (other regions only)
	local      map[string]*shard
	buffers    map[string]*shardBuffer
	buffered   int
	// handingOff marks shards whose hand-off began here and whose new home
	// this region has not learnt yet (kept only for Bugs.DropBufferedOnHandOff).
	handingOff map[string]bool
	changed    chan struct{} // closed when local shards change

	dropped atomic.Uint64
	askers  sync.WaitGroup
}

// shardBuffer holds messages for a shard whose home is unknown (or being
// handed off). Its existence means one goroutine (resolve) is asking the
// coordinator for the home and will flush it, in order.
type shardBuffer struct {
	queue []*envelope
	// notHere names the home that answered it does not host the shard; the
	// next ask tells the coordinator, which then makes that region host it
	// again (or answers anew).
	notHere string
	// handOff: messages were buffered while the shard was handed off (kept
	// only for Bugs.DropBufferedOnHandOff).
	handOff bool
}

// NewRegion returns the region of s.TypeName on this member. It is
// proxy-only if d.Factory is nil or this member lacks s.Role. coordinator
// reaches the coordinator singleton (named CoordinatorName(s.TypeName)).
func NewRegion(s Settings, d Deps, coordinator *singleton.Proxy) (*Region, error) {
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	switch {
	case d.Membership == nil:
		return nil, errors.New("sharding: Deps.Membership is required")
	case d.Peers == nil:
		return nil, errors.New("sharding: Deps.Peers is required")
	case d.Clock == nil:
		return nil, errors.New("sharding: Deps.Clock is required")
	case coordinator == nil:
		return nil, errors.New("sharding: the coordinator proxy is required")
	}
	if d.Events == nil {
		d.Events = kit.NewEventLog(d.Clock.Now, 0)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.ExtractShardID == nil {
		d.ExtractShardID = HashShards(s.NumberOfShards)
	}
	if d.Incarnations == nil {
		d.Incarnations = &Incarnations{}
	}
	self := d.Membership.Snapshot().Self
	if self.Name == "" {
		return nil, errors.New("sharding: this member is not known yet (empty Snapshot().Self)")
	}
	r := &Region{
		s: s, d: d, coord: coordinator,
		log:        d.Logger.With("region", s.TypeName),
		self:       self.UID(),
		extract:    d.ExtractShardID,
		proxyOnly:  d.Factory == nil || !self.HasRole(s.Role),
		homes:      map[string]string{},
		local:      map[string]*shard{},
		buffers:    map[string]*shardBuffer{},
		handingOff: map[string]bool{},
		changed:    make(chan struct{}),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// TypeName is the entity type this region serves.
func (r *Region) TypeName() string { return r.s.TypeName }

// ProxyOnly reports whether the region never hosts shards.
func (r *Region) ProxyOnly() bool { return r.proxyOnly }

// Settings returns the settings with defaults applied.
func (r *Region) Settings() Settings { return r.s }

func (r *Region) nextIncarnation() string {
	return r.self + "/" + strconv.FormatUint(r.d.Incarnations.next(), 10)
}

// askTimeout bounds one request to the coordinator; hostTimeout one
// coordinator-to-region protocol call (shorter, so that a get-shard-home
// that waits for host-shard still answers within the asker's deadline).
func (s Settings) askTimeout() time.Duration  { return max(10*s.RetryInterval, 2*s.hostTimeout()) }
func (s Settings) hostTimeout() time.Duration { return max(4*s.RetryInterval, 500*time.Millisecond) }

// Run registers with the coordinator (retrying every RetryInterval until it
// is acknowledged), serves until ctx is done, then stops every local entity
// at once — no hand-off: this is what a downed node does — and fails what
// is buffered. It returns nil.
func (r *Region) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return errors.New("sharding: Region.Run called twice")
	}
	defer r.stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	if r.s.PassivateIdleAfter > 0 && !r.proxyOnly {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.idleLoop(ctx)
		}()
	}
	// Register, and register again whenever the coordinator moves (as
	// Akka's regions do): registering is idempotent for a coordinator that
	// recovered the registration from the journal, and it makes sure any
	// new coordinator knows this region.
	registeredAt := "\x00" // no coordinator location yet
	for {
		changed := r.d.Membership.Changed()
		if at := r.coordinatorAt(); at != registeredAt {
			if err := r.register(ctx); err != nil {
				r.log.Debug("registration with the coordinator failed; retrying", "err", err)
				if r.d.Clock.Sleep(ctx, r.s.RetryInterval) != nil {
					return nil
				}
				continue
			}
			registeredAt = at
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// coordinatorAt is the member uid the coordinator is looked for on (the
// oldest Up member with the role); empty if none.
func (r *Region) coordinatorAt() string {
	if o, ok := r.d.Membership.Snapshot().Oldest(r.s.Role); ok {
		return o.UID()
	}
	return ""
}

func (r *Region) register(ctx context.Context) error {
	cctx, cancel := clock.WithTimeout(ctx, r.d.Clock, r.s.askTimeout())
	defer cancel()
	_, err := r.callCoordinator(cctx, OpRegister, RegisterRequest{Region: r.self, Proxy: r.proxyOnly})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.registered = true
	r.mu.Unlock()
	r.log.Info("registered with the coordinator", "proxy_only", r.proxyOnly)
	return nil
}

func (r *Region) callCoordinator(ctx context.Context, op string, payload any) (json.RawMessage, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	return r.coord.Call(ctx, singleton.Request{Op: op, Payload: b})
}

// stop ends the region: buffered messages fail (never sent), local
// entities stop at once.
func (r *Region) stop() {
	r.mu.Lock()
	r.stopped = true
	var pending []*envelope
	for _, b := range r.buffers {
		pending = append(pending, b.queue...)
	}
	r.buffers = map[string]*shardBuffer{}
	r.buffered = 0
	locals := make([]*shard, 0, len(r.local))
	for _, sh := range r.local {
		locals = append(locals, sh)
	}
	r.local = map[string]*shard{}
	r.notifyLocked()
	r.mu.Unlock()
	r.cancel()
	for _, env := range pending {
		env.fail(fmt.Errorf("%w: region stopped while the message was buffered", ErrRegionStopped))
	}
	var wg sync.WaitGroup
	for _, sh := range locals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sh.stopNow()
			sh.event(protocol.EventShardStopped, "region stopped")
		}()
	}
	wg.Wait()
	r.askers.Wait()
}

func (r *Region) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Deliver routes msg to its entity and returns the entity's reply. Use
// IsDefinite on an error to learn whether the message certainly had no
// effect; a message whose outcome is unknown is never resent.
func (r *Region) Deliver(ctx context.Context, msg Message) (Reply, error) {
	// The caller waits at once, so it may serve its entity itself.
	return r.submit(ctx, msg, true)()
}

// Submit routes msg like Deliver but returns as soon as the message's place
// among the messages to its shard is fixed: queued in a local mailbox or in
// the region's buffer for the shard (both delivered in order), or, when the
// shard lives on another node, delivered there. The returned function
// waits for the reply (it must be called, at most once, while ctx lives).
//
// Submitting one sender's messages one after another without waiting for
// their replies keeps their order, as Akka's tell does: this is how the
// node pipelines fire-and-forget messages.
func (r *Region) Submit(ctx context.Context, msg Message) func() (Reply, error) {
	return r.submit(ctx, msg, false)
}

// submit is Submit; with waitsNow, the caller calls the returned function
// at once, so when the message's entity here is parked the caller serves
// it itself (shard.enqueue's byCaller). Submit's callers may wait later,
// or for several messages in another order, so theirs never hold an
// entity's turn.
func (r *Region) submit(ctx context.Context, msg Message, waitsNow bool) func() (Reply, error) {
	if msg.EntityID == "" {
		return failed(fmt.Errorf("%w: empty entity id", ErrBadMessage))
	}
	if err := r.awaitFresh(ctx); err != nil {
		return failed(err)
	}
	shardID := r.extract(msg.EntityID)
	if shardID == "" {
		return failed(fmt.Errorf("%w: entity %q maps to an empty shard id", ErrBadMessage, msg.EntityID))
	}
	env := newEnvelope(ctx, msg, shardID)
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return failed(fmt.Errorf("%w: %s", ErrRegionStopped, r.s.TypeName))
	}
	if _, buffering := r.buffers[shardID]; !buffering {
		if sh := r.local[shardID]; sh != nil {
			if e, err := sh.enqueue(env, waitsNow); err == nil {
				r.mu.Unlock()
				return env.waitServing(e)
			}
			// Closed for a hand-off: buffer below.
		} else if home, ok := r.homes[shardID]; ok {
			r.mu.Unlock()
			return r.forwardDirect(env, home)
		}
	}
	if err := r.bufferLocked(env, false, true); err != nil {
		r.mu.Unlock()
		return failed(err)
	}
	r.mu.Unlock()
	return env.wait
}

// failed is a Submit result that is already known.
func failed(err error) func() (Reply, error) {
	return func() (Reply, error) { return Reply{}, err }
}

// forwardDirect sends a fresh envelope to the known remote home; if the
// home turns out not to host the shard (or was never reached) the message
// goes into the buffer to wait for the shard's new home. It returns once
// the message was delivered or buffered.
func (r *Region) forwardDirect(env *envelope, home string) func() (Reply, error) {
	env.take()
	rep, err, rebuf := r.send(env, home)
	if !rebuf {
		return func() (Reply, error) { return rep, err }
	}
	r.mu.Lock()
	r.forgetHomeLocked(env.shard, home)
	if r.stopped {
		r.mu.Unlock()
		return failed(fmt.Errorf("%w: %s", ErrRegionStopped, r.s.TypeName))
	}
	if env.requeue() {
		r.bufferLocked(env, false, false)
		r.buffers[env.shard].notHere = home
	}
	r.mu.Unlock()
	return env.wait
}

func (r *Region) forgetHomeLocked(shardID, home string) {
	if r.homes[shardID] == home {
		delete(r.homes, shardID)
	}
}

// bufferLocked puts a queued envelope into its shard's buffer (at the front
// for messages that had been taken out in order, else at the back) and
// makes sure someone asks for the home. bounded applies BufferSize: when
// the buffer is full the incoming message is dropped (as Akka drops what
// overflows), counted and logged.
func (r *Region) bufferLocked(env *envelope, front, bounded bool) error {
	if bounded && r.buffered >= r.s.BufferSize {
		r.pruneLocked()
		if r.buffered >= r.s.BufferSize {
			total := r.dropped.Add(1)
			r.log.Warn("region buffer full; dropped the incoming message", "shard", env.shard, "entity", env.msg.EntityID, "dropped_total", total)
			r.d.Events.Append(protocol.Event{Type: protocol.EventBufferDropped, Member: r.self, EntityType: r.s.TypeName,
				Shard: env.shard, Entity: env.msg.EntityID,
				Detail: fmt.Sprintf("buffer of %d full; dropped the incoming message (%d in total)", r.s.BufferSize, total)})
			return fmt.Errorf("%w (buffer size %d)", ErrBufferFull, r.s.BufferSize)
		}
	}
	b := r.buffers[env.shard]
	if b == nil {
		b = &shardBuffer{}
		r.buffers[env.shard] = b
		r.askers.Add(1)
		go r.resolve(env.shard, b)
	}
	if r.handingOff[env.shard] {
		b.handOff = true
	}
	if front {
		b.queue = slices.Insert(b.queue, 0, env)
	} else {
		b.queue = append(b.queue, env)
	}
	r.buffered++
	return nil
}

// pruneLocked drops envelopes whose callers gave up.
func (r *Region) pruneLocked() {
	for _, b := range r.buffers {
		kept := b.queue[:0]
		for _, env := range b.queue {
			if env.abandoned() {
				r.buffered--
				continue
			}
			kept = append(kept, env)
		}
		clear(b.queue[len(kept):])
		b.queue = kept
	}
}

// rebuffer returns envelopes that a shard accepted but never gave to an
// entity (held during passivation when a hand-off began) to the front of
// the shard's buffer, in order.
func (r *Region) rebuffer(shardID string, envs []*envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(envs) - 1; i >= 0; i-- {
		env := envs[i]
		if r.stopped {
			env.fail(fmt.Errorf("%w: region stopped", ErrRegionStopped))
			continue
		}
		if env.abandoned() {
			continue
		}
		_ = r.bufferLocked(env, true, false)
	}
}

// resolve asks the coordinator for the home of shardID while messages wait
// in b, and flushes them there in order. It is the only goroutine that
// removes b, and only when b is empty.
func (r *Region) resolve(shardID string, b *shardBuffer) {
	defer r.askers.Done()
	for {
		r.mu.Lock()
		if r.stopped || r.buffers[shardID] != b {
			r.mu.Unlock()
			return
		}
		r.pruneShardLocked(b)
		if len(b.queue) == 0 {
			delete(r.buffers, shardID)
			r.mu.Unlock()
			return
		}
		notHere := b.notHere
		r.mu.Unlock()
		home, err := r.askHome(shardID, notHere)
		if err == nil {
			r.mu.Lock()
			b.notHere = ""
			if home != r.self {
				r.homes[shardID] = home
			}
			delete(r.handingOff, shardID)
			if b.handOff && r.buffers[shardID] == b {
				// Deliberate bug (DropBufferedOnHandOff): what waited for
				// the shard's new home is thrown away, uncounted; the
				// callers wait for their deadline.
				b.handOff = false
				r.buffered -= len(b.queue)
				clear(b.queue)
				b.queue = b.queue[:0]
			}
			r.mu.Unlock()
			if r.flush(shardID, b, home) {
				continue
			}
		} else {
			r.log.Debug("no home for shard yet", "shard", shardID, "err", err)
		}
		if r.d.Clock.Sleep(r.ctx, r.s.RetryInterval) != nil {
			return
		}
	}
}

func (r *Region) pruneShardLocked(b *shardBuffer) {
	kept := b.queue[:0]
	for _, env := range b.queue {
		if env.abandoned() {
			r.buffered--
			continue
		}
		kept = append(kept, env)
	}
	clear(b.queue[len(kept):])
	b.queue = kept
}

func (r *Region) askHome(shardID, notHere string) (string, error) {
	ctx, cancel := clock.WithTimeout(r.ctx, r.d.Clock, r.s.askTimeout())
	defer cancel()
	res, err := r.callCoordinator(ctx, OpGetShardHome, GetShardHomeRequest{Shard: shardID, Region: r.self, NotHere: notHere})
	if err != nil {
		return "", err
	}
	var rep ShardHomeReply
	if err := json.Unmarshal(res, &rep); err != nil || rep.Region == "" {
		return "", fmt.Errorf("sharding: bad get-shard-home answer %s: %v", res, err)
	}
	return rep.Region, nil
}

// flush delivers b's messages to home one after the other, so that the
// messages of one sender keep their order. It returns true when b is empty
// (and removed), false when the home turned out wrong: the messages not yet
// delivered are back in b and the home must be asked again.
func (r *Region) flush(shardID string, b *shardBuffer, home string) bool {
	for {
		r.mu.Lock()
		if r.stopped || r.buffers[shardID] != b {
			r.mu.Unlock()
			return true
		}
		if len(b.queue) == 0 {
			delete(r.buffers, shardID)
			r.mu.Unlock()
			return true
		}
		var env *envelope
		if r.s.Bugs.ReorderBuffered {
			// Deliberate bug: the buffer is popped like a stack, newest
			// first.
			last := len(b.queue) - 1
			env = b.queue[last]
			b.queue[last] = nil
			b.queue = b.queue[:last]
		} else {
			env = b.queue[0]
			b.queue[0] = nil
			b.queue = b.queue[1:]
		}
		r.buffered--
		if !env.take() {
			r.mu.Unlock()
			continue
		}
		if home == r.self {
			sh := r.local[shardID]
			if !env.requeue() {
				r.mu.Unlock()
				continue
			}
			if sh == nil || errOf(sh.enqueue(env, false)) != nil {
				// Not (or no longer) hosted here: ask again.
				b.queue = slices.Insert(b.queue, 0, env)
				r.buffered++
				b.notHere = r.self
				r.mu.Unlock()
				return false
			}
			r.mu.Unlock()
			continue
		}
		if r.homes[shardID] != home {
			// A hand-off began meanwhile.
			if env.requeue() {
				b.queue = slices.Insert(b.queue, 0, env)
				r.buffered++
			}
			r.mu.Unlock()
			return false
		}
		r.mu.Unlock()
		rep, err, rebuf := r.send(env, home)
		if !rebuf {
			env.finish(rep, err)
			continue
		}
		r.mu.Lock()
		r.forgetHomeLocked(shardID, home)
		if !r.stopped && r.buffers[shardID] == b && env.requeue() {
			b.queue = slices.Insert(b.queue, 0, env)
			r.buffered++
			b.notHere = home
		} else if !env.abandoned() {
			env.fail(fmt.Errorf("%w: region stopped", ErrRegionStopped))
		}
		r.mu.Unlock()
		return false
	}
}

// send forwards a taken envelope to the region home. rebuffer reports
// that the message certainly did not reach an entity and should wait for
// the shard's (new) home: the home said it does not host the shard, is
// gone, or was never reached.
func (r *Region) send(env *envelope, home string) (rep Reply, err error, rebuffer bool) {
	m, ok := r.d.Membership.Find(home)
	if !ok || m.Status.Final() {
		return Reply{}, nil, true
	}
	ctx, cancel := context.WithCancel(env.ctx)
	defer cancel()
	stopLink := context.AfterFunc(r.ctx, cancel)
	defer stopLink()
	err = r.d.Peers.Call(ctx, m.Target(), r.path(opDeliver), env.msg, &rep)
	if err == nil {
		return rep, nil, false
	}
	return classifyForward(err, env.msg.EntityID, home)
}

// classifyForward maps a failed forward to what the caller learns.
func classifyForward(err error, entityID, home string) (Reply, error, bool) {
	var re *peer.RemoteError
	if errors.As(err, &re) {
		switch {
		case (re.Body.Code == protocol.CodeShardNotHere || re.Body.Code == protocol.CodeRegionStopped || re.Body.Code == protocol.CodeWrongMember ||
			re.Body.Code == protocol.CodePeerRefused) && re.Body.Outcome == protocol.Fail:
			// Not hosted there (any more), or that region has stopped (its
			// node is being downed, or it is another incarnation now), or
			// it does not know this member yet: wait for the shard's next
			// home.
			return Reply{}, nil, true
		case re.Body.Code == protocol.CodeEntityError:
			return Reply{}, &EntityError{Entity: entityID, Err: err}, false
		case re.Body.Code == protocol.CodeEntityRejected && re.Body.Outcome == protocol.Fail:
			return Reply{}, &EntityError{Entity: entityID, Err: Reject(re.Body.Reason, err)}, false
		case re.Body.Outcome == protocol.Fail:
			return Reply{}, fmt.Errorf("sharding: forward to %s: %w", home, err), false
		}
		return Reply{}, fmt.Errorf("%w: forward to %s: %w", ErrUnknownOutcome, home, err), false
	}
	if errors.Is(err, peer.ErrNotSent) {
		// Never written: nothing reached the home.
		return Reply{}, nil, true
	}
	return Reply{}, fmt.Errorf("%w: forward to %s: %w", ErrUnknownOutcome, home, err), false
}

// hostShard makes this region host shardID (the coordinator's host-shard).
func (r *Region) hostShard(shardID string) error {
	if r.proxyOnly {
		return errProxyOnly
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return ErrRegionStopped
	}
	if sh := r.local[shardID]; sh != nil {
		if !sh.reopen() {
			return errHandingOff
		}
		return nil
	}
	sh := newShard(r, shardID)
	r.local[shardID] = sh
	delete(r.homes, shardID)
	r.notifyLocked()
	sh.event(protocol.EventShardStarted, "")
	return nil
}

var (
	errProxyOnly  = errors.New("sharding: proxy-only region hosts no shards")
	errHandingOff = errors.New("sharding: shard is being handed off here")
)

// beginHandOff: the coordinator is about to move shardID; forget its home
// and buffer its messages until the new home is known.
func (r *Region) beginHandOff(shardID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.homes, shardID)
	if r.s.Bugs.DropBufferedOnHandOff {
		r.handingOff[shardID] = true
		if b := r.buffers[shardID]; b != nil {
			b.handOff = true
		}
	}
	if sh := r.local[shardID]; sh != nil {
		sh.close()
	}
}

// handOff stops every entity of shardID here (after their queued messages,
// forced after HandOffTimeout) and removes the shard. Only then does the
// coordinator allocate the shard anew.
func (r *Region) handOff(shardID string) {
	r.mu.Lock()
	delete(r.homes, shardID)
	sh := r.local[shardID]
	r.mu.Unlock()
	if sh == nil {
		return
	}
	forced := sh.handOff()
	r.mu.Lock()
	if r.local[shardID] == sh {
		delete(r.local, shardID)
		r.notifyLocked()
	}
	r.mu.Unlock()
	detail := "handed off"
	if forced > 0 {
		detail = fmt.Sprintf("handed off; %d entities did not stop within %v and were given up", forced, r.s.HandOffTimeout)
	}
	sh.event(protocol.EventShardStopped, detail)
}

// localDeliver serves a forwarded message (the deliver endpoint): only to a
// shard hosted and accepting here; never routed further.
func (r *Region) localDeliver(ctx context.Context, msg Message) (Reply, error) {
	if err := r.awaitFresh(ctx); err != nil {
		return Reply{}, err
	}
	shardID := r.extract(msg.EntityID)
	env := newEnvelope(ctx, msg, shardID)
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return Reply{}, ErrRegionStopped
	}
	sh := r.local[shardID]
	if sh == nil {
		r.mu.Unlock()
		return Reply{}, fmt.Errorf("%w: shard %s", ErrShardNotHere, shardID)
	}
	e, err := sh.enqueue(env, true)
	r.mu.Unlock()
	if err != nil {
		return Reply{}, err
	}
	return env.waitServing(e)()
}

// errOf is the error of a two-valued result.
func errOf[T any](_ T, err error) error { return err }

// awaitFresh waits, while the member is not fresh (Deps.Fresh: it was just
// frozen), until it is, ctx ends or the region stops; the message has not
// been delivered anywhere yet, so giving up is a definite failure.
func (r *Region) awaitFresh(ctx context.Context) error {
	if r.d.Fresh == nil || r.d.Fresh() {
		return nil
	}
	t := r.d.Clock.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: this member is not fresh (it was frozen or starved) and did not become so in time", ErrEntityUnavailable)
		case <-t.C():
		}
		r.mu.Lock()
		stopped := r.stopped
		r.mu.Unlock()
		if stopped {
			return fmt.Errorf("%w: %s", ErrRegionStopped, r.s.TypeName)
		}
		if r.d.Fresh() {
			return nil
		}
	}
}

// idleLoop passivates entities idle for PassivateIdleAfter.
func (r *Region) idleLoop(ctx context.Context) {
	t := r.d.Clock.NewTicker(max(r.s.PassivateIdleAfter/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		now := r.d.Clock.Elapsed()
		r.mu.Lock()
		locals := make([]*shard, 0, len(r.local))
		for _, sh := range r.local {
			locals = append(locals, sh)
		}
		r.mu.Unlock()
		for _, sh := range locals {
			sh.mu.Lock()
			var idle []*entity
			for _, e := range sh.entities {
				if e.passivating || e.idleFor(now) < r.s.PassivateIdleAfter {
					continue
				}
				e.mu.Lock()
				empty := len(e.queue) == 0
				e.mu.Unlock()
				if empty {
					idle = append(idle, e)
				}
			}
			sh.mu.Unlock()
			for _, e := range idle {
				sh.passivate(e)
			}
		}
	}
}

// Leave is the region's part of a graceful leave: it asks the coordinator
// to hand off every shard hosted here (graceful-shutdown) and returns once
// none is left, or when ctx is done. The request is repeated every
// RebalanceInterval (a new coordinator after a failover does not know it).
func (r *Region) Leave(ctx context.Context) error {
	if r.proxyOnly {
		return nil
	}
	var next <-chan time.Time
	send := func() {
		err := func() error {
			cctx, cancel := clock.WithTimeout(ctx, r.d.Clock, r.s.askTimeout())
			defer cancel()
			_, err := r.callCoordinator(cctx, OpGracefulShutdown, GracefulShutdownRequest{Region: r.self})
			return err
		}()
		d := r.s.RebalanceInterval
		if err != nil {
			r.log.Debug("graceful shutdown request failed; retrying", "err", err)
			d = r.s.RetryInterval
		}
		t := r.d.Clock.NewTimer(d)
		next = t.C()
	}
	send()
	for {
		r.mu.Lock()
		n, ch := len(r.local), r.changed
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sharding %s: leave: %d shards still hosted: %w", r.s.TypeName, n, ctx.Err())
		case <-ch:
		case <-next:
			send()
		}
	}
}

// RegionStatus is a region's state as the node protocol shows it.
type RegionStatus struct {
	Type       string                 `json:"type"`
	Self       string                 `json:"self"`
	ProxyOnly  bool                   `json:"proxy_only"`
	Registered bool                   `json:"registered"`
	Shards     []protocol.ShardStatus `json:"shards"`
	// KnownHomes counts shards whose remote home is cached.
	KnownHomes int `json:"known_homes"`
	// Buffered: messages waiting for a home now.
	Buffered int `json:"buffered"`
	// Dropped: messages dropped from a full buffer, in total.
	Dropped uint64 `json:"dropped"`
	// Coordinator is the member the coordinator is looked for on (the
	// oldest Up member with the role, as this member sees it).
	Coordinator string `json:"coordinator,omitempty"`
}

// Status returns the region's state; shards and entities sorted by id.
func (r *Region) Status() RegionStatus {
	r.mu.Lock()
	st := RegionStatus{Type: r.s.TypeName, Self: r.self, ProxyOnly: r.proxyOnly, Registered: r.registered,
		KnownHomes: len(r.homes), Buffered: r.buffered, Shards: []protocol.ShardStatus{}}
	locals := make([]*shard, 0, len(r.local))
	for _, sh := range r.local {
		locals = append(locals, sh)
	}
	r.mu.Unlock()
	for _, sh := range locals {
		ss := sh.status()
		slices.SortFunc(ss.Entities, func(a, b protocol.EntityStatus) int { return strings.Compare(a.ID, b.ID) })
		st.Shards = append(st.Shards, ss)
	}
	slices.SortFunc(st.Shards, func(a, b protocol.ShardStatus) int { return strings.Compare(a.ID, b.ID) })
	st.Dropped = r.dropped.Load()
	st.Coordinator = r.coordinatorAt()
	return st
}

// HostedShards returns the ids of the shards hosted here, sorted.
func (r *Region) HostedShards() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.local))
	for id := range r.local {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

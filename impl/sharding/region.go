package sharding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
	// entityParent is ctx's values without its cancellation, the parent
	// of every entity's context: an entity outlives the region's end
	// until its shard stops it. Made once, not once per entity (16 bytes
	// each, which a million idle entities notice).
	entityParent context.Context
	ran          atomic.Bool

	// mu guards the routing state machine and the shards' runners; the
	// machine decides, the region carries out its effects.
	mu         sync.Mutex
	state      *RegionState
	registered bool
	// local are the entity runners of the shards hosted here.
	local map[string]*shard
	// envs are the envelopes the machine may still name, by id.
	envs    map[uint64]*envelope
	lastMsg uint64
	changed chan struct{} // closed when local shards change

	askers sync.WaitGroup
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
	numbered := d.ExtractShardID == nil
	if numbered {
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
		log:       d.Logger.With("region", s.TypeName),
		self:      self.UID(),
		extract:   d.ExtractShardID,
		proxyOnly: d.Factory == nil || !self.HasRole(s.Role),
		local:     map[string]*shard{},
		envs:      map[uint64]*envelope{},
		changed:   make(chan struct{}),
	}
	cfg := RegionConfig{TypeName: s.TypeName, BufferSize: s.BufferSize, RetryInterval: s.RetryInterval, ProxyOnly: r.proxyOnly, Bugs: s.Bugs}
	if numbered {
		// Shard ids are HashShards': the coordinator may place no other.
		cfg.NumberOfShards = s.NumberOfShards
	}
	r.state = NewRegionState(r.self, cfg, r.log)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.entityParent = context.WithoutCancel(r.ctx)
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
	later := r.stepLocked(RgStop{})
	r.mu.Unlock()
	r.cancel()
	r.carryOut(later)
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
	r.mu.Lock()
	env := r.newEnvelopeLocked(ctx, msg, shardID)
	var serve entityWork
	var serving bool
	var forward *Forward
	var work []RegionEffect
	later := r.stepWith(RgSubmit{Msg: env.rmsg()}, func(e RegionEffect) bool {
		switch e := e.(type) {
		case Enqueue:
			if e.Msg.ID == env.id {
				serve, serving, work = r.enqueueLocked(env, e.Shard, waitsNow)
				return true
			}
		case Forward:
			if e.Msg.ID == env.id && !e.Flush {
				delete(r.envs, env.id)
				forward = &e
				return true
			}
		}
		return false
	})
	r.mu.Unlock()
	r.carryOut(append(later, work...))
	if forward != nil {
		// A direct send to the known home, on the caller's goroutine: it
		// returns once the message was delivered or buffered.
		return r.forwardDirect(env, forward.Home)
	}
	return env.waitServing(serve, serving)
}

// failed is a Submit result that is already known.
func failed(err error) func() (Reply, error) {
	return func() (Reply, error) { return Reply{}, err }
}

// newEnvelopeLocked makes the envelope of a message, known to the routing
// machine by its id until it leaves the machine's hands.
func (r *Region) newEnvelopeLocked(ctx context.Context, msg Message, shardID string) *envelope {
	r.lastMsg++
	env := newEnvelope(ctx, msg, shardID)
	env.id = r.lastMsg
	env.owner = r
	r.envs[env.id] = env
	return env
}

// abandon tells the machine that a buffered message's caller gave up.
func (r *Region) abandon(env *envelope) {
	r.mu.Lock()
	delete(r.envs, env.id)
	later := r.stepLocked(RgAbandoned{ID: env.id})
	r.mu.Unlock()
	r.carryOut(later)
}

// stepLocked steps the machine and carries out, under r.mu, the effects
// that need no waiting; it returns those that do (forwards, asks, timers,
// stopping shards), for carryOut once r.mu is released.
func (r *Region) stepLocked(in RegionInput) []RegionEffect {
	return r.stepWith(in, nil)
}

// stepWith is stepLocked where mine, if not nil, may claim an effect (it
// returns true) for the caller to carry out itself.
func (r *Region) stepWith(in RegionInput, mine func(RegionEffect) bool) []RegionEffect {
	var later []RegionEffect
	for _, eff := range r.state.Step(in) {
		if mine != nil && mine(eff) {
			continue
		}
		switch e := eff.(type) {
		case Enqueue:
			if env := r.envs[e.Msg.ID]; env != nil {
				_, _, work := r.enqueueLocked(env, e.Shard, false)
				later = append(later, work...)
			}
		case FailMsg:
			if env := r.envs[e.Msg.ID]; env != nil {
				delete(r.envs, e.Msg.ID)
				env.fail(e.Err)
			}
		case ForgetMsg:
			delete(r.envs, e.Msg.ID)
		case StartShard:
			sh := newShard(r, e.Shard)
			r.local[e.Shard] = sh
		case CloseShard:
			if sh := r.local[e.Shard]; sh != nil {
				later = append(later, sh.stepLocked(ShClose{})...)
			}
		case ReopenShard:
			if sh := r.local[e.Shard]; sh != nil {
				later = append(later, sh.stepLocked(ShReopen{})...)
			}
		case EmitRegionEvent:
			r.d.Events.Append(e.Event)
		case LocalChanged:
			r.notifyLocked()
		case StopShard:
			if e.Now {
				// The region stopped: the runner leaves the region's hands
				// at once, and is stopped outside the lock.
				if sh := r.local[e.Shard]; sh != nil {
					delete(r.local, e.Shard)
					later = append(later, stopRunner{sh: sh})
				}
				continue
			}
			later = append(later, eff)
		case Forward:
			// The message is out of the machine's hands until the outcome.
			if env := r.envs[e.Msg.ID]; env != nil {
				delete(r.envs, e.Msg.ID)
				later = append(later, forwardEnv{Forward: e, env: env})
			}
		default:
			later = append(later, eff)
		}
	}
	return later
}

// forwardEnv is a Forward with its envelope.
type forwardEnv struct {
	Forward
	env *envelope
}

// stopRunner stops a shard's runner at once (the region stopped).
type stopRunner struct{ sh *shard }

func (stopRunner) regionEffect() {}

// enqueueLocked gives a message to its entity in a shard hosted here. When
// the caller waits at once and its entity was parked, it returns the
// caller's own message to carry out on the caller's goroutine (serve);
// work is what else is to be carried out.
func (r *Region) enqueueLocked(env *envelope, shardID string, waitsNow bool) (serve entityWork, serving bool, work []RegionEffect) {
	sh := r.local[shardID]
	if sh == nil {
		delete(r.envs, env.id)
		env.fail(fmt.Errorf("%w: shard %s", ErrShardNotHere, shardID))
		return entityWork{}, false, nil
	}
	work = sh.stepLocked(ShEnqueue{Msg: env.rmsg()})
	if waitsNow {
		for i, eff := range work {
			if w, ok := eff.(entityWork); ok && w.env == env {
				work = append(work[:i], work[i+1:]...)
				return w, true, work
			}
		}
	}
	return entityWork{}, false, work
}

// carryOut does the effects that wait (without r.mu): each in a goroutine
// the region owns, except stopping runners, which it waits for.
func (r *Region) carryOut(effs []RegionEffect) {
	var stopping sync.WaitGroup
	for _, eff := range effs {
		switch e := eff.(type) {
		case stopRunner:
			stopping.Go(func() {
				e.sh.stopNow()
				e.sh.event(protocol.EventShardStopped, "region stopped")
			})
		case forwardEnv:
			r.askers.Go(func() { r.forwardFlush(e.Forward, e.env) })
		case AskHome:
			r.askers.Go(func() { r.askHome(e) })
		case ArmRetry:
			r.askers.Go(func() {
				if r.d.Clock.Sleep(r.ctx, e.After) != nil {
					return
				}
				r.step(RgRetry{Shard: e.Shard})
			})
		case StopShard:
			r.askers.Go(func() {
				r.mu.Lock()
				sh := r.local[e.Shard]
				r.mu.Unlock()
				r.stopShard(e.Shard, sh)
			})
		case entityWork:
			// Owned by the shard: its end waits for it or gives it up.
			go e.work()
		case shardTimer:
			go e.waitEnd()
		default:
			panic(fmt.Sprintf("sharding: region effect %T not carried out", eff))
		}
	}
	stopping.Wait()
}

// step steps the machine and carries out all its effects.
func (r *Region) step(in RegionInput) {
	r.mu.Lock()
	later := r.stepLocked(in)
	r.mu.Unlock()
	r.carryOut(later)
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
	r.requeued(env, home, false)
	return env.wait
}

// forwardFlush sends the next message of a shard's buffer to its home.
func (r *Region) forwardFlush(f Forward, env *envelope) {
	if !env.take() {
		// Its caller gave up: go on with the next one.
		r.step(RgForwarded{Msg: f.Msg, Home: f.Home, Flush: true, Delivered: true})
		return
	}
	rep, err, rebuf := r.send(env, f.Home)
	if !rebuf {
		env.finish(rep, err)
		r.step(RgForwarded{Msg: f.Msg, Home: f.Home, Flush: true, Delivered: true})
		return
	}
	r.requeued(env, f.Home, true)
}

// requeued gives the machine back a taken message that reached no entity.
func (r *Region) requeued(env *envelope, home string, flush bool) {
	r.mu.Lock()
	ok := env.requeue()
	if ok {
		r.envs[env.id] = env
	}
	later := r.stepLocked(RgForwarded{Msg: env.rmsg(), Home: home, Flush: flush, Requeued: ok})
	r.mu.Unlock()
	r.carryOut(later)
}

// rebuffer returns envelopes that a shard accepted but never gave to an
// entity (held during passivation when a hand-off began) to the front of
// the shard's buffer, in order.
func (r *Region) rebuffer(shardID string, envs []*envelope) {
	r.mu.Lock()
	var msgs []RegionMsg
	for _, env := range envs {
		if env.abandoned() {
			continue
		}
		r.envs[env.id] = env
		msgs = append(msgs, env.rmsg())
	}
	later := r.stepLocked(RgRebuffer{Shard: shardID, Msgs: msgs})
	r.mu.Unlock()
	r.carryOut(later)
}

// askHome asks the coordinator for a shard's home.
func (r *Region) askHome(a AskHome) {
	home, err := func() (string, error) {
		ctx, cancel := clock.WithTimeout(r.ctx, r.d.Clock, r.s.askTimeout())
		defer cancel()
		res, err := r.callCoordinator(ctx, OpGetShardHome, GetShardHomeRequest{Shard: a.Shard, Region: r.self, NotHere: a.NotHere})
		if err != nil {
			return "", err
		}
		var rep ShardHomeReply
		if err := json.Unmarshal(res, &rep); err != nil || rep.Region == "" {
			return "", fmt.Errorf("sharding: bad get-shard-home answer %s: %v", res, err)
		}
		return rep.Region, nil
	}()
	if r.ctx.Err() != nil {
		return
	}
	r.step(RgHome{Shard: a.Shard, Home: home, Err: err})
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
	return ClassifyForward(err, env.msg.EntityID, home)
}

// ClassifyForward maps a failed forward to what the caller learns: the
// reply or error to answer, or (rebuffer) that the message certainly
// reached no entity and waits for the shard's next home.
func ClassifyForward(err error, entityID, home string) (Reply, error, bool) {
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

// by names from, the member a coordinator's request came from, and where
// this member's view runs the coordinator.
func (r *Region) by(from string) ByCoordinator {
	return ByCoordinator{From: from, Coordinator: r.coordinatorAt()}
}

// answered steps in (a coordinator's request) and carries out its
// effects, but for the answer, of type T, which it returns (the zero T if
// the machine gave none).
func answered[T RegionEffect](r *Region, in RegionInput) T {
	var ans T
	r.mu.Lock()
	later := r.stepWith(in, func(e RegionEffect) bool {
		a, ok := e.(T)
		if ok {
			ans = a
		}
		return ok
	})
	r.mu.Unlock()
	r.carryOut(later)
	return ans
}

// hostShard makes this region host shardID (the coordinator's host-shard,
// sent by from).
func (r *Region) hostShard(shardID, from string) error {
	return answered[HostResult](r, RgHostShard{Shard: shardID, By: r.by(from)}).Err
}

var (
	errProxyOnly  = errors.New("sharding: proxy-only region hosts no shards")
	errHandingOff = errors.New("sharding: shard is being handed off here")
	// errNotCoordinator: a coordinator's request from a member that does
	// not run the coordinator (in this member's view).
	errNotCoordinator = errors.New("sharding: not the coordinator's member")
	// errShardOutOfRange: a shard id the entity type does not have.
	errShardOutOfRange = errors.New("sharding: no such shard")
)

// beginHandOff: the coordinator (from) is about to move shardID; forget
// its home and buffer its messages until the new home is known.
func (r *Region) beginHandOff(shardID, from string) error {
	return answered[Refused](r, RgBeginHandOff{Shard: shardID, By: r.by(from)}).Err
}

// handOff stops every entity of shardID here (after their queued messages,
// forced after HandOffTimeout) and removes the shard, on the word of the
// coordinator (from). Only then does the coordinator allocate the shard
// anew.
func (r *Region) handOff(shardID, from string) error {
	by := r.by(from)
	r.mu.Lock()
	var refused error
	stops := false
	later := r.stepWith(RgHandOff{Shard: shardID, By: by}, func(e RegionEffect) bool {
		switch e := e.(type) {
		case Refused:
			refused = e.Err
			return true
		case StopShard:
			if e.Shard == shardID && !e.Now {
				stops = true
				return true
			}
		}
		return false
	})
	sh := r.local[shardID]
	r.mu.Unlock()
	r.carryOut(later)
	if refused != nil {
		return refused
	}
	if stops {
		r.stopShard(shardID, sh)
	}
	return nil
}

// stopShard carries out StopShard: it stops every entity of the shard
// and removes it.
func (r *Region) stopShard(shardID string, sh *shard) {
	if sh == nil {
		return
	}
	forced := sh.handOff()
	r.mu.Lock()
	removed := r.local[shardID] == sh
	if removed {
		delete(r.local, shardID)
	}
	later := r.stepLocked(RgShardRemoved{Shard: shardID})
	r.mu.Unlock()
	r.carryOut(later)
	if !removed {
		return // stopped meanwhile; the stop tells
	}
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
	r.mu.Lock()
	env := r.newEnvelopeLocked(ctx, msg, shardID)
	var serve entityWork
	var serving bool
	var work []RegionEffect
	var refused error
	later := r.stepWith(RgPeerDeliver{Msg: env.rmsg()}, func(e RegionEffect) bool {
		switch e := e.(type) {
		case Enqueue:
			if e.Msg.ID == env.id {
				serve, serving, work = r.enqueueLocked(env, e.Shard, true)
				return true
			}
		case FailMsg:
			if e.Msg.ID == env.id {
				delete(r.envs, env.id)
				refused = e.Err
				return true
			}
		}
		return false
	})
	r.mu.Unlock()
	r.carryOut(append(later, work...))
	if refused != nil {
		return Reply{}, refused
	}
	return env.waitServing(serve, serving)()
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
		stopped := r.state.Stopped()
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
		r.mu.Lock()
		var later []RegionEffect
		for _, id := range slices.Sorted(maps.Keys(r.local)) {
			later = append(later, r.local[id].stepLocked(ShIdleTick{})...)
		}
		r.mu.Unlock()
		r.carryOut(later)
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
		KnownHomes: r.state.KnownHomes(), Buffered: r.state.Buffered(), Dropped: r.state.Dropped(), Shards: []protocol.ShardStatus{}}
	for _, id := range slices.Sorted(maps.Keys(r.local)) {
		st.Shards = append(st.Shards, r.local[id].st.Status())
	}
	r.mu.Unlock()
	slices.SortFunc(st.Shards, func(a, b protocol.ShardStatus) int { return strings.Compare(a.ID, b.ID) })
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

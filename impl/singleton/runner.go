package singleton

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
	"log/slog"
	"sync"
	"sync/atomic"
)

// runner runs one instance behind a mailbox: requests are handled one at a
// time in arrival order, and the termination message (Stop) is handled after
// the requests queued before it.
type runner struct {
	num     int // instance number within the manager, from 1
	name    string
	self    string // member uid, for events
	factory Factory
	events  *kit.EventLog
	log     *slog.Logger
	started func() // called once the factory succeeded

	startCtx    context.Context // for the factory; cancelled by stop(now)
	startCancel context.CancelFunc
	stopCtx     context.Context // for Stop; cancelled when the manager gives up
	stopCancel  context.CancelFunc

	mu      sync.Mutex
	queue   []*envelope
	stopReq bool // termination enqueued (or the instance failed): no new requests
	live    bool // the factory succeeded
	wake    chan struct{}

	done    chan struct{} // closed once the instance counts as stopped
	once    sync.Once
	failErr error // why it stopped on its own; read after done
}

type result struct {
	res json.RawMessage
	err error
}

const (
	envQueued int32 = iota
	envTaken
	envAbandoned
)

type envelope struct {
	ctx   context.Context
	req   Request
	state atomic.Int32
	reply chan result // buffered 1
}

func newRunner(ctx context.Context, num int, name, self string, f Factory, ev *kit.EventLog, log *slog.Logger, started func()) *runner {
	r := &runner{
		num: num, name: name, self: self, factory: f, events: ev, started: started,
		log:  log.With("instance", num),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	r.startCtx, r.startCancel = context.WithCancel(ctx)
	r.stopCtx, r.stopCancel = context.WithCancel(context.WithoutCancel(ctx))
	return r
}

func (r *runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// running reports whether the instance is up and accepts requests.
func (r *runner) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live && !r.stopReq
}

// call enqueues req and waits for its answer.
func (r *runner) call(ctx context.Context, req Request) (json.RawMessage, error) {
	env := &envelope{ctx: ctx, req: req, reply: make(chan result, 1)}
	r.mu.Lock()
	if r.stopReq {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: instance is stopping", ErrNotRunning)
	}
	r.queue = append(r.queue, env)
	r.mu.Unlock()
	r.signal()
	select {
	case res := <-env.reply:
		return res.res, res.err
	case <-ctx.Done():
		if env.state.CompareAndSwap(envQueued, envAbandoned) {
			return nil, fmt.Errorf("%w: request expired before its turn: %w", ErrNotRunning, ctx.Err())
		}
		select {
		case res := <-env.reply:
			return res.res, res.err
		default:
		}
		return nil, fmt.Errorf("%w: %w", ErrUnknownOutcome, ctx.Err())
	case <-r.done:
		if env.state.CompareAndSwap(envQueued, envAbandoned) {
			return nil, fmt.Errorf("%w: instance stopped before the request's turn", ErrNotRunning)
		}
		select {
		case res := <-env.reply:
			return res.res, res.err
		default:
		}
		return nil, fmt.Errorf("%w: instance was given up while handling the request", ErrUnknownOutcome)
	}
}

// stop enqueues the termination message. With now, requests still queued
// are failed (not processed) and the termination comes next.
func (r *runner) stop(now bool) {
	r.mu.Lock()
	r.stopReq = true
	var pending []*envelope
	if now {
		pending, r.queue = r.queue, nil
		r.startCancel()
	}
	r.mu.Unlock()
	failPending(pending, "instance stopped before the request's turn")
	r.signal()
}

func failPending(pending []*envelope, why string) {
	for _, env := range pending {
		if env.state.CompareAndSwap(envQueued, envAbandoned) {
			env.reply <- result{err: fmt.Errorf("%w: %s", ErrNotRunning, why)}
		}
	}
}

// next returns the next request, or nil when the termination message is due.
func (r *runner) next() *envelope {
	for {
		r.mu.Lock()
		if len(r.queue) > 0 {
			env := r.queue[0]
			r.queue[0] = nil
			r.queue = r.queue[1:]
			r.mu.Unlock()
			return env
		}
		if r.stopReq {
			r.mu.Unlock()
			return nil
		}
		r.mu.Unlock()
		<-r.wake
	}
}

func (r *runner) event(typ, detail string) {
	r.events.Append(protocol.Event{Type: typ, Member: r.self, Singleton: r.name, Detail: detail})
}

// loop starts the instance, serves the mailbox and stops the instance.
func (r *runner) loop() {
	defer r.startCancel()
	inst, err := r.safeStart()
	if err != nil {
		r.mu.Lock()
		r.stopReq = true
		abandoned := r.startCtx.Err() != nil
		pending := r.queue
		r.queue = nil
		r.mu.Unlock()
		failPending(pending, "instance failed to start")
		if abandoned {
			r.log.Info("singleton start abandoned", "err", err)
		} else {
			r.log.Warn("singleton failed to start", "err", err)
			r.event(protocol.EventSingletonFailed, fmt.Sprintf("instance %d failed to start: %v", r.num, err))
		}
		r.finish(fmt.Errorf("start: %w", err), "")
		return
	}
	r.mu.Lock()
	r.live = true
	r.mu.Unlock()
	r.started()
	r.log.Info("singleton started")
	r.event(protocol.EventSingletonStarted, fmt.Sprintf("instance %d", r.num))

	var failErr error
	for {
		env := r.next()
		if env == nil {
			break
		}
		if !env.state.CompareAndSwap(envQueued, envTaken) {
			continue
		}
		res, herr := r.safeHandle(inst, env)
		env.reply <- result{res: res, err: herr}
		if isInstanceFailure(herr) {
			failErr = herr
			r.mu.Lock()
			r.stopReq = true
			pending := r.queue
			r.queue = nil
			r.mu.Unlock()
			failPending(pending, "instance failed before the request's turn")
			r.log.Warn("singleton instance failed", "err", herr)
			r.event(protocol.EventSingletonFailed, fmt.Sprintf("instance %d: %v", r.num, herr))
			break
		}
	}
	detail := fmt.Sprintf("instance %d stopped", r.num)
	if serr := r.safeStop(inst); serr != nil {
		detail = fmt.Sprintf("instance %d stopped with error: %v", r.num, serr)
	}
	r.finish(failErr, detail)
}

// finish marks the instance stopped (once): it logs SingletonStopped if the
// instance had started, then closes done.
func (r *runner) finish(failErr error, detail string) {
	r.once.Do(func() {
		r.failErr = failErr
		r.mu.Lock()
		live := r.live
		r.stopReq = true
		r.mu.Unlock()
		if live {
			r.log.Info("singleton stopped", "detail", detail)
			r.event(protocol.EventSingletonStopped, detail)
		}
		close(r.done)
	})
}

// giveUp forgets an instance whose Stop did not finish in time.
func (r *runner) giveUp(detail string) {
	r.finish(nil, detail)
	r.stopCancel()
	r.startCancel()
}

func (r *runner) safeStart() (inst Instance, err error) {
	defer func() {
		if p := recover(); p != nil {
			inst, err = nil, fmt.Errorf("panic in factory: %v", p)
		}
	}()
	inst, err = r.factory(r.startCtx)
	if err == nil && inst == nil {
		err = fmt.Errorf("factory returned no instance")
	}
	return inst, err
}

func (r *runner) safeHandle(inst Instance, env *envelope) (res json.RawMessage, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, fmt.Errorf("%w: %w: panic in Handle: %v", ErrInstanceFailed, ErrUnknownOutcome, p)
		}
	}()
	return inst.Handle(env.ctx, env.req)
}

func (r *runner) safeStop(inst Instance) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic in Stop: %v", p)
		}
	}()
	return inst.Stop(r.stopCtx)
}

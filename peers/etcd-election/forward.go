package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// Any member takes next-id and routes it to the member running the id
// generator (the election's leader): over the forward port, a plain HTTP
// endpoint on the cluster-internal IP that asks for the run's cluster
// secret. etcd itself only says who leads (the oldest key of the queue).

// secretHeader carries the cluster secret on forwarded requests.
const secretHeader = "X-Shardtest-Secret"

// forwardPath is the forward port's one endpoint.
const forwardPath = "/next-id"

// forwardReply is the forward port's answer: an id, or a code saying
// nothing was written (codeNotHere) or that the outcome is unknown.
type forwardReply struct {
	ID        int64                      `json:"id,omitempty"`
	Singleton protocol.SingletonInstance `json:"singleton"`
	Code      string                     `json:"code,omitempty"`
	Error     string                     `json:"error,omitempty"`
}

// codeNotHere: the member asked runs no instance (or its instance was
// fenced); nothing was written, the request may go elsewhere.
const codeNotHere = "not-here"

// forwardTimeout bounds the singleton's work on a forwarded request.
const forwardTimeout = 4 * time.Second

// forwarder serves the forward port and forwards requests to it.
type forwarder struct {
	secret string
	client *http.Client
}

func newForwarder(secret string) *forwarder {
	return &forwarder{secret: secret, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
}

// serve serves the forward port for s until ctx ends.
func (f *forwarder) serve(ctx context.Context, addr string, s *singleton) error {
	if err := kit.Serve(ctx, addr, f.handler(s)); err != nil {
		return fmt.Errorf("serve the forward port %s: %w", addr, err)
	}
	return nil
}

// handler is the forward port's endpoint: next-id on s for a member
// that knows the cluster secret.
func (f *forwarder) handler(s *singleton) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+forwardPath, func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(secretHeader)), []byte(f.secret)) != 1 {
			http.Error(w, "cluster secret missing or wrong", http.StatusForbidden)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), forwardTimeout)
		defer cancel()
		var rep forwardReply
		res, err := s.next(ctx)
		switch {
		case err == nil:
			rep.ID, rep.Singleton = res.ID, res.Singleton
		case errors.Is(err, errNotHere) || errors.Is(err, errFenced):
			rep.Code, rep.Error = codeNotHere, err.Error()
		default:
			rep.Code, rep.Error = protocol.CodeUnknownOutcome, err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rep)
	})
	return mux
}

// errNotSent: the request never reached the member (no connection).
var errNotSent = errors.New("not sent")

// forward asks the member at addr for an id. errNotHere and errNotSent
// mean nothing was written; any other error is an unknown outcome.
func (f *forwarder) forward(ctx context.Context, addr string) (protocol.NextID, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+forwardPath, nil)
	if err != nil {
		return protocol.NextID{}, fmt.Errorf("%w: %v", errNotSent, err)
	}
	req.Header.Set(secretHeader, f.secret)
	resp, err := f.client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return protocol.NextID{}, fmt.Errorf("%w: %v", errNotSent, err)
		}
		return protocol.NextID{}, fmt.Errorf("forward to %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// Refused before anything ran (the secret).
		return protocol.NextID{}, fmt.Errorf("%w: %s answered %s", errNotSent, addr, resp.Status)
	}
	var rep forwardReply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return protocol.NextID{}, fmt.Errorf("forward to %s: reply: %w", addr, err)
	}
	switch rep.Code {
	case "":
		return protocol.NextID{ID: rep.ID, Singleton: rep.Singleton}, nil
	case codeNotHere:
		return protocol.NextID{}, fmt.Errorf("%w (%s: %s)", errNotHere, addr, rep.Error)
	}
	return protocol.NextID{}, fmt.Errorf("forward to %s: %s: %s", addr, rep.Code, rep.Error)
}

// nextID serves next-id on any member: the instance here if one runs,
// else the leader's, over the forward port. A step that certainly wrote
// nothing (no instance there, fenced, not connected) is retried until
// ctx ends; then the request is unavailable, or an unknown outcome if a
// step before may have written.
func (p *peer) nextID(ctx context.Context) (protocol.NextID, error) {
	var last error
	for {
		res, err := p.single.next(ctx)
		if err == nil {
			return res, nil
		}
		if errors.Is(err, errNotHere) || errors.Is(err, errFenced) {
			res, err = p.forwardToLeader(ctx)
			if err == nil {
				return res, nil
			}
		}
		if !errors.Is(err, errNotHere) && !errors.Is(err, errNotSent) && !errors.Is(err, errFenced) && !errors.Is(err, errNoLeader) {
			return protocol.NextID{}, kit.Errorf(protocol.CodeUnknownOutcome, "%w", err)
		}
		last = err
		sleep(ctx, 50*time.Millisecond)
		if ctx.Err() != nil {
			return protocol.NextID{}, kit.Errorf(protocol.CodeUnavailable, "no id generator reachable in time (last: %v)", last)
		}
	}
}

// errNoLeader: the election has no leader, or it could not be read.
var errNoLeader = errors.New("no leader")

// forwardToLeader reads the election's leader (the oldest key) and
// forwards to it, unless it is this member (which has just won and not
// started yet, or is a former incarnation of this member whose key has
// not expired yet).
func (p *peer) forwardToLeader(ctx context.Context) (protocol.NextID, error) {
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	resp, err := p.cli.Get(rctx, electionPrefix, clientv3.WithFirstCreate()...)
	cancel()
	if err != nil {
		return protocol.NextID{}, fmt.Errorf("%w: read the leader: %v", errNoLeader, err)
	}
	if len(resp.Kvs) == 0 {
		return protocol.NextID{}, fmt.Errorf("%w: no candidate", errNoLeader)
	}
	kv := resp.Kvs[0]
	c, err := decodeCandidate(string(kv.Key), kv.Value, kv.CreateRevision)
	if err != nil {
		return protocol.NextID{}, fmt.Errorf("%w: %v", errNoLeader, err)
	}
	if c.Name == p.set.Name {
		return protocol.NextID{}, fmt.Errorf("%w: the leader key is this member's (%s)", errNoLeader, c.UID)
	}
	return p.fwd.forward(ctx, c.Forward)
}

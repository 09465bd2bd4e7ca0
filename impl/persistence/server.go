package persistence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"unicode/utf8"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/journal"
)

// server serves one journal.Journal over HTTP/JSON.
type server struct {
	store  journal.Journal
	logger *slog.Logger
	// slots bound the requests in flight, so their bodies (up to
	// journal.MaxRequestBytes each) bound the memory they take.
	slots chan struct{}
}

// MaxInFlight is how many requests the server handles at once; more wait
// for a slot (or their client's cancellation).
const MaxInFlight = 32

// NewServer returns the HTTP/JSON API of the journal (see Client for the
// other end). Every error is answered as JSON {"error","code","outcome"}.
func NewServer(store journal.Journal, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &server{store: store, logger: logger, slots: make(chan struct{}, MaxInFlight)}
}

// ServeHTTP takes a slot, then serves the request.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case s.slots <- struct{}{}:
	case <-r.Context().Done():
		// The client is gone; nothing was read, nothing done: the one
		// unavailable that is a definite failure (the table's row says so).
		s.writeErrorBody(w, r, protocol.ErrorBody{Code: protocol.CodeUnavailable, Outcome: protocol.Fail, Error: "request cancelled while waiting for a slot"})
		return
	}
	defer func() { <-s.slots }()
	s.route(w, r)
}

// route routes by hand rather than with http.ServeMux method patterns,
// because the mux answers 404/405 in plain text and clients rely on JSON.
func (s *server) route(w http.ResponseWriter, r *http.Request) {
	var handle func(http.ResponseWriter, *http.Request)
	method := http.MethodPost
	switch r.URL.Path {
	case journal.PathAppend:
		handle = s.handleAppend
	case journal.PathReplay:
		handle = s.handleReplay
	case journal.PathFence:
		handle = s.handleFence
	case journal.PathHighest:
		handle = s.handleHighest
	case journal.PathHealth:
		handle, method = s.handleHealth, http.MethodGet
	default:
		s.writeError(w, r, protocol.CodeNotFound, fmt.Sprintf("no such endpoint %q", r.URL.Path))
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		s.writeError(w, r, protocol.CodeMethodNotAllowed, fmt.Sprintf("%s %s not allowed, use %s", r.Method, r.URL.Path, method))
		return
	}
	handle(w, r)
}

func (s *server) handleAppend(w http.ResponseWriter, r *http.Request) {
	var req journal.AppendRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.ExpectedSeq == nil {
		s.writeError(w, r, protocol.CodeInvalid, "missing expected_seq")
		return
	}
	last, err := s.store.Append(r.Context(), req.PID, *req.ExpectedSeq, req.Epoch, req.Events)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.logger.Debug("append", "pid", req.PID, "expected_seq", *req.ExpectedSeq, "epoch", req.Epoch,
		"events", len(req.Events), "last_seq", last)
	s.writeJSON(w, r, http.StatusOK, journal.AppendReply{LastSeq: last})
}

func (s *server) handleReplay(w http.ResponseWriter, r *http.Request) {
	var req journal.ReplayRequest
	if !s.decode(w, r, &req) {
		return
	}
	events, err := s.store.Replay(r.Context(), req.PID, req.From, req.Max)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if events == nil {
		events = []journal.Event{} // "events":[] rather than null
	}
	s.writeJSON(w, r, http.StatusOK, journal.ReplayReply{Events: events})
}

func (s *server) handleFence(w http.ResponseWriter, r *http.Request) {
	var req journal.FenceRequest
	if !s.decode(w, r, &req) {
		return
	}
	var (
		epoch   uint64
		highest int64
		err     error
	)
	if once, ok := s.store.(journal.OnceFencer); ok {
		epoch, highest, err = once.FenceOnce(r.Context(), req.PID, req.Token)
	} else {
		epoch, highest, err = s.store.Fence(r.Context(), req.PID)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.logger.Info("fence", "pid", req.PID, "epoch", epoch, "highest", highest)
	s.writeJSON(w, r, http.StatusOK, journal.FenceReply{Epoch: epoch, Highest: highest})
}

func (s *server) handleHighest(w http.ResponseWriter, r *http.Request) {
	var req journal.PIDRequest
	if !s.decode(w, r, &req) {
		return
	}
	highest, err := s.store.Highest(r.Context(), req.PID)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, journal.HighestReply{Highest: highest})
}

func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, journal.HealthReply{OK: true})
}

// decode reads exactly one JSON object with no unknown fields from the
// body, answering the error itself when it cannot.
func (s *server) decode(w http.ResponseWriter, r *http.Request, dst any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, journal.MaxRequestBytes))
	if err == nil && !utf8.Valid(body) {
		// The decoder would turn invalid bytes into U+FFFD, and two
		// distinct pids would become one.
		err = errors.New("the body is not valid UTF-8")
	}
	if err == nil {
		// A lone surrogate escape decodes to U+FFFD too.
		err = protocol.CheckSurrogates(body)
	}
	if err != nil && !isTooLarge(err) {
		s.writeError(w, r, protocol.CodeInvalid, "malformed request: "+err.Error())
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err == nil {
		err = dec.Decode(dst)
	}
	if err == nil {
		// Trailing data would mean the client and server disagree about
		// the request; refuse rather than guess.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("unexpected data after the JSON object")
			if terr != nil && isTooLarge(terr) {
				err = terr
			}
		}
	}
	if err == nil {
		return true
	}
	if isTooLarge(err) {
		s.writeError(w, r, protocol.CodeTooLarge, fmt.Sprintf("request body exceeds %d bytes", journal.MaxRequestBytes))
		return false
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("empty request body")
	}
	s.writeError(w, r, protocol.CodeInvalid, "malformed request: "+err.Error())
	return false
}

func isTooLarge(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}

// writeStoreError maps journal.Journal errors to codes (the table gives
// their statuses and outcomes). Only the definite failures have codes
// whose outcome is fail; anything else may have been written.
func (s *server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, journal.ErrSeqConflict):
		s.writeError(w, r, protocol.CodeSeqConflict, err.Error())
	case errors.Is(err, journal.ErrFenced):
		s.writeError(w, r, protocol.CodeFenced, err.Error())
	case errors.Is(err, journal.ErrInvalid):
		s.writeError(w, r, protocol.CodeInvalid, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, journal.ErrUnavailable):
		s.writeError(w, r, protocol.CodeUnavailable, err.Error())
	default:
		s.logger.Error("journal storage error", "path", r.URL.Path, "err", err)
		s.writeError(w, r, protocol.CodeInternal, err.Error())
	}
}

// writeError answers code (protocol.ScopeJournal) with msg: the table's
// status and outcome.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, code, msg string) {
	s.writeErrorBody(w, r, protocol.ErrorBody{Error: msg, Code: code})
}

// writeErrorBody answers b with the table's status for its code, and its
// outcome unless b has one.
func (s *server) writeErrorBody(w http.ResponseWriter, r *http.Request, b protocol.ErrorBody) {
	status, b := protocol.ErrorReply(protocol.ScopeJournal, 0, b)
	if status < http.StatusInternalServerError {
		s.logger.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "code", b.Code, "err", b.Error)
	}
	s.writeJSON(w, r, status, b)
}

func (s *server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only reachable through a bug (every response type marshals).
		s.logger.Error("encode response", "path", r.URL.Path, "err", err)
		var eb protocol.ErrorBody
		status, eb = protocol.ErrorReply(protocol.ScopeJournal, 0, protocol.ErrorBody{Error: "encode response", Code: protocol.CodeInternal})
		body, _ = json.Marshal(eb) // an ErrorBody always marshals
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body = append(body, '\n')
	if _, err := w.Write(body); err != nil {
		s.logger.Debug("write response", "path", r.URL.Path, "err", err)
	}
}

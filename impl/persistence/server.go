package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
)

// MaxRequestBytes bounds an HTTP request body. Events travel base64-encoded,
// so this admits roughly 48 MiB of payload per append.
const MaxRequestBytes = 64 << 20

// API paths served by NewServer and used by Client.
const (
	pathAppend  = "/v1/append"
	pathReplay  = "/v1/replay"
	pathFence   = "/v1/fence"
	pathHighest = "/v1/highest"
	pathHealth  = "/v1/health"
)

// Error codes in errorResponse.Code.
const (
	codeSeqConflict      = "seq-conflict"
	codeFenced           = "fenced"
	codeInvalid          = "invalid"
	codeTooLarge         = "too-large"
	codeNotFound         = "not-found"
	codeMethodNotAllowed = "method-not-allowed"
	codeUnavailable      = "unavailable"
	codeInternal         = "internal"
)

// Outcomes in errorResponse.Outcome: "fail" means nothing was written;
// "unknown" means the server cannot vouch either way.
const (
	outcomeFail    = "fail"
	outcomeUnknown = "unknown"
)

type appendRequest struct {
	PID string `json:"pid"`
	// ExpectedSeq is a pointer so a missing field is an error rather than
	// a silent "0: new id".
	ExpectedSeq *int64   `json:"expected_seq"`
	Epoch       uint64   `json:"epoch"`
	Events      [][]byte `json:"events"`
}

type appendResponse struct {
	LastSeq int64 `json:"last_seq"`
}

type replayRequest struct {
	PID  string `json:"pid"`
	From int64  `json:"from"`
	Max  int    `json:"max"`
}

type replayResponse struct {
	Events []Event `json:"events"`
}

type pidRequest struct {
	PID string `json:"pid"`
}

// fenceRequest: Token (optional) makes a repeated fence return the epoch
// the first one gave (OnceFencer).
type fenceRequest struct {
	PID   string `json:"pid"`
	Token string `json:"token,omitempty"`
}

type fenceResponse struct {
	Epoch   uint64 `json:"epoch"`
	Highest int64  `json:"highest"`
}

type highestResponse struct {
	Highest int64 `json:"highest"`
}

type healthResponse struct {
	OK bool `json:"ok"`
}

type errorResponse struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Outcome string `json:"outcome"`
}

// server serves one Journal over HTTP/JSON.
type server struct {
	store  Journal
	logger *slog.Logger
}

// NewServer returns the HTTP/JSON API of the journal (see Client for the
// other end). Every error is answered as JSON {"error","code","outcome"}.
func NewServer(store Journal, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &server{store: store, logger: logger}
}

// ServeHTTP routes by hand rather than with http.ServeMux method patterns,
// because the mux answers 404/405 in plain text and clients rely on JSON.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var handle func(http.ResponseWriter, *http.Request)
	method := http.MethodPost
	switch r.URL.Path {
	case pathAppend:
		handle = s.handleAppend
	case pathReplay:
		handle = s.handleReplay
	case pathFence:
		handle = s.handleFence
	case pathHighest:
		handle = s.handleHighest
	case pathHealth:
		handle, method = s.handleHealth, http.MethodGet
	default:
		s.writeError(w, r, http.StatusNotFound, codeNotFound, outcomeFail, fmt.Sprintf("no such endpoint %q", r.URL.Path))
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		s.writeError(w, r, http.StatusMethodNotAllowed, codeMethodNotAllowed, outcomeFail,
			fmt.Sprintf("%s %s not allowed, use %s", r.Method, r.URL.Path, method))
		return
	}
	handle(w, r)
}

func (s *server) handleAppend(w http.ResponseWriter, r *http.Request) {
	var req appendRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.ExpectedSeq == nil {
		s.writeError(w, r, http.StatusBadRequest, codeInvalid, outcomeFail, "missing expected_seq")
		return
	}
	last, err := s.store.Append(r.Context(), req.PID, *req.ExpectedSeq, req.Epoch, req.Events)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.logger.Debug("append", "pid", req.PID, "expected_seq", *req.ExpectedSeq, "epoch", req.Epoch,
		"events", len(req.Events), "last_seq", last)
	s.writeJSON(w, r, http.StatusOK, appendResponse{LastSeq: last})
}

func (s *server) handleReplay(w http.ResponseWriter, r *http.Request) {
	var req replayRequest
	if !s.decode(w, r, &req) {
		return
	}
	events, err := s.store.Replay(r.Context(), req.PID, req.From, req.Max)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if events == nil {
		events = []Event{} // "events":[] rather than null
	}
	s.writeJSON(w, r, http.StatusOK, replayResponse{Events: events})
}

func (s *server) handleFence(w http.ResponseWriter, r *http.Request) {
	var req fenceRequest
	if !s.decode(w, r, &req) {
		return
	}
	var (
		epoch   uint64
		highest int64
		err     error
	)
	if once, ok := s.store.(OnceFencer); ok {
		epoch, highest, err = once.FenceOnce(r.Context(), req.PID, req.Token)
	} else {
		epoch, highest, err = s.store.Fence(r.Context(), req.PID)
	}
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.logger.Info("fence", "pid", req.PID, "epoch", epoch, "highest", highest)
	s.writeJSON(w, r, http.StatusOK, fenceResponse{Epoch: epoch, Highest: highest})
}

func (s *server) handleHighest(w http.ResponseWriter, r *http.Request) {
	var req pidRequest
	if !s.decode(w, r, &req) {
		return
	}
	highest, err := s.store.Highest(r.Context(), req.PID)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, highestResponse{Highest: highest})
}

func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, healthResponse{OK: true})
}

// decode reads exactly one JSON object with no unknown fields from the
// body, answering the error itself when it cannot.
func (s *server) decode(w http.ResponseWriter, r *http.Request, dst any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
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
		s.writeError(w, r, http.StatusRequestEntityTooLarge, codeTooLarge, outcomeFail,
			fmt.Sprintf("request body exceeds %d bytes", MaxRequestBytes))
		return false
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("empty request body")
	}
	s.writeError(w, r, http.StatusBadRequest, codeInvalid, outcomeFail, "malformed request: "+err.Error())
	return false
}

func isTooLarge(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}

// writeStoreError maps Journal errors to statuses. Only the definite
// failures may be reported as "fail"; anything else may have been written.
func (s *server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrSeqConflict):
		s.writeError(w, r, http.StatusConflict, codeSeqConflict, outcomeFail, err.Error())
	case errors.Is(err, ErrFenced):
		s.writeError(w, r, http.StatusConflict, codeFenced, outcomeFail, err.Error())
	case errors.Is(err, ErrInvalid):
		s.writeError(w, r, http.StatusBadRequest, codeInvalid, outcomeFail, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrUnavailable):
		s.writeError(w, r, http.StatusServiceUnavailable, codeUnavailable, outcomeUnknown, err.Error())
	default:
		s.logger.Error("journal storage error", "path", r.URL.Path, "err", err)
		s.writeError(w, r, http.StatusInternalServerError, codeInternal, outcomeUnknown, err.Error())
	}
}

func (s *server) writeError(w http.ResponseWriter, r *http.Request, status int, code, outcome, msg string) {
	if status < http.StatusInternalServerError {
		s.logger.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "code", code, "err", msg)
	}
	s.writeJSON(w, r, status, errorResponse{Error: msg, Code: code, Outcome: outcome})
}

func (s *server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only reachable through a bug (every response type marshals).
		s.logger.Error("encode response", "path", r.URL.Path, "err", err)
		status = http.StatusInternalServerError
		body = []byte(`{"error":"encode response","code":"internal","outcome":"unknown"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body = append(body, '\n')
	if _, err := w.Write(body); err != nil {
		s.logger.Debug("write response", "path", r.URL.Path, "err", err)
	}
}

package kit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/shardtest/shardtest/protocol"
)

// MaxBody bounds a request body: every valid request is tiny.
const MaxBody = 64 << 10

// Decode reads a request body strictly into v (a pointer to a struct): an
// empty body leaves v as it is (for requests whose parameters are all
// optional); anything else must be one JSON object with no unknown field
// and nothing after it. null, arrays, strings and numbers are refused, as
// are bodies over MaxBody, invalid UTF-8 and lone surrogate escapes
// (protocol.CheckSurrogates). The error is a bad-request *Error.
func Decode(r *http.Request, v any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return Errorf(protocol.CodeBadRequest, "read body: %v", err)
	}
	return DecodeJSON(data, v)
}

// DecodeJSON is Decode of a body already read.
func DecodeJSON(data []byte, v any) error {
	if len(data) > MaxBody {
		return Errorf(protocol.CodeBadRequest, "body larger than %d bytes", MaxBody)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil
	}
	if !utf8.Valid(trimmed) {
		// The decoder would turn invalid bytes into U+FFFD, and two
		// distinct ids would become one.
		return Errorf(protocol.CodeBadRequest, "malformed request: the body is not valid UTF-8")
	}
	if err := protocol.CheckSurrogates(trimmed); err != nil {
		// Decoded, a lone surrogate escape is U+FFFD too.
		return Errorf(protocol.CodeBadRequest, "malformed request: %w", err)
	}
	if trimmed[0] != '{' {
		what := "a JSON value"
		switch trimmed[0] {
		case 'n':
			what = "null"
		case '[':
			what = "an array"
		case '"':
			what = "a string"
		}
		return Errorf(protocol.CodeBadRequest, "malformed request: the body is %s; want a JSON object", what)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(protocol.CodeBadRequest, "malformed JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Errorf(protocol.CodeBadRequest, "malformed JSON: trailing data after the object")
	}
	return nil
}

// eventsQuery is the parsed query of GET /v1/events.
type eventsQuery struct {
	after uint64
	limit int
	wait  time.Duration
}

func parseEventsQuery(raw string) (eventsQuery, error) {
	eq := eventsQuery{limit: protocol.EventsDefaultLimit}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return eq, fmt.Errorf("malformed query %q: %v", raw, err)
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return eq, fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
		v := vs[0]
		switch k {
		case "after":
			a, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return eq, fmt.Errorf("after=%q: want a non-negative integer", v)
			}
			eq.after = a
		case "limit":
			l, err := strconv.Atoi(v)
			if err != nil || l < 1 || l > protocol.EventsMaxLimit {
				return eq, fmt.Errorf("limit=%q: want an integer from 1 to %d", v, protocol.EventsMaxLimit)
			}
			eq.limit = l
		case "wait_ms":
			ms, err := strconv.Atoi(v)
			if err != nil || ms < 0 || ms > protocol.EventsMaxWaitMS {
				return eq, fmt.Errorf("wait_ms=%q: want an integer from 0 to %d", v, protocol.EventsMaxWaitMS)
			}
			eq.wait = time.Duration(ms) * time.Millisecond
		default:
			return eq, fmt.Errorf("unknown query parameter %q (after, limit, wait_ms)", k)
		}
	}
	return eq, nil
}

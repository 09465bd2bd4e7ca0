package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds on what one value may add to the page.
const (
	maxOptions      = 200  // rows of the options table
	maxOptionText   = 400  // characters of one option's value
	maxOptionsRaw   = 4096 // characters of a test.json that is not an object
	maxTargetsText  = 300  // characters of a fault's targets in the table
	maxTargetsTitle = 120  // ... in the timeline's tooltip
	maxSummaryText  = 4096 // characters of a checker's summary
	maxLabel        = 24   // characters of a node or fault name in the timeline
)

// clip returns s as valid UTF-8 of at most n runes, ending in "…" when
// cut.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n-1 {
			break
		}
		count++
	}
	return s[:i] + "…"
}

// optionRow is one top-level field of test.json.
type optionRow struct {
	Key, Value string
	// Human restates Value for people ("30s" for 30000000000 ns); may be
	// empty.
	Human string
	// Scalar: a string, number, bool or null (not a list or object).
	Scalar bool
}

type optionsView struct {
	rows []optionRow
	// more counts fields left out; raw holds test.json when it is not a
	// JSON object (shown as text).
	more int
	raw  string
}

// options reads test.json's top-level fields in their order (the order
// the harness writes them in is the order a person reads them in).
// Durations, stored in nanoseconds under keys ending in "_ns", are shown
// in both forms.
func options(raw json.RawMessage) optionsView {
	var v optionsView
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return v
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		v.raw = clip(string(raw), maxOptionsRaw)
		return v
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			break
		}
		key, _ := t.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			break
		}
		if len(v.rows) == maxOptions {
			v.more++
			continue
		}
		row := optionRow{Key: clip(key, maxOptionText), Value: compactJSON(val, maxOptionText)}
		row.Scalar = len(val) > 0 && val[0] != '{' && val[0] != '['
		if strings.HasSuffix(key, "_ns") {
			if n, err := strconv.ParseInt(string(val), 10, 64); err == nil {
				row.Human = time.Duration(n).String()
			}
		}
		v.rows = append(v.rows, row)
	}
	return v
}

// compactJSON renders a JSON value as terse text for people, in document
// order: objects as "key=value" pairs, nested ones in braces, arrays in
// brackets, strings unquoted, at most limit characters. It stops reading
// once the limit is reached, so a huge value costs little; what is not
// valid JSON is shown as it is, clipped.
func compactJSON(raw json.RawMessage, limit int) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	var b strings.Builder
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	type level struct {
		object, key bool // in an object; the next token is a key
		n           int  // elements written
	}
	var stack []level
	full := false
	for !full {
		t, err := dec.Token()
		if errors.Is(err, io.EOF) && len(stack) == 0 {
			break
		}
		if err != nil {
			// Not JSON, or cut off inside a value.
			return clip(string(raw), limit)
		}
		top := len(stack) - 1
		// A separator before every element but the first of its level; a
		// key's value follows its "=" directly.
		if top >= 0 && !(stack[top].object && !stack[top].key) && stack[top].n > 0 {
			if d, ok := t.(json.Delim); !ok || d == '{' || d == '[' {
				b.WriteByte(' ')
			}
		}
		switch t := t.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top >= 0 {
					b.WriteRune(rune(t))
				}
				stack = append(stack, level{object: t == '{', key: t == '{'})
				continue
			default:
				stack = stack[:top]
				if top > 0 {
					b.WriteRune(rune(t))
				}
			}
		case string:
			if top >= 0 && stack[top].object && stack[top].key {
				b.WriteString(t)
				b.WriteByte('=')
				stack[top].key = false
				continue
			}
			b.WriteString(t)
		case json.Number:
			b.WriteString(t.String())
		case bool:
			b.WriteString(strconv.FormatBool(t))
		case nil:
			b.WriteString("null")
		}
		// A value ended: count it in its level, whose next token is again a
		// key if it is an object.
		if top = len(stack) - 1; top >= 0 {
			stack[top].n++
			if stack[top].object {
				stack[top].key = true
			}
		}
		full = b.Len() > 4*limit
	}
	return clip(b.String(), limit)
}

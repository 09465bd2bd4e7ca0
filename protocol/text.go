package protocol

import "fmt"

// CheckSurrogates refuses a JSON text with a \u escape of a lone surrogate
// (U+D800 to U+DFFF not forming a high-low pair). Such an escape names no
// character: encoding/json decodes it as U+FFFD, so "a\ud800", "a\udfff"
// and "a\ufffd" would be one entity id, or one journal stream. Every
// decoder of a request runs this on the raw body (the kit, the journal,
// the reference node's peer port), so that one place decides it; a pair
// (\ud83d\ude00) is a real character and passes.
//
// It does not track where strings begin and end: outside a string a
// backslash is a syntax error the decoder refuses anyway, and inside one
// every escape is skipped whole, so "\\ud800" (an escaped backslash, then
// text) is not taken for an escape.
func CheckSurrogates(data []byte) error {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		r, ok := escapedUnit(data, i)
		switch {
		case !ok:
			i++ // \" \\ \n ..., or a bad escape the decoder refuses
		case r < 0xd800 || r > 0xdfff:
			i += 5
		case r <= 0xdbff:
			if lo, ok := escapedUnit(data, i+6); ok && lo >= 0xdc00 && lo <= 0xdfff {
				i += 11
				continue
			}
			return fmt.Errorf("lone surrogate escape %s at byte %d: it names no character (a high surrogate needs a low one after it)", data[i:i+6], i)
		default:
			return fmt.Errorf("lone surrogate escape %s at byte %d: it names no character (a low surrogate needs a high one before it)", data[i:i+6], i)
		}
	}
	return nil
}

// escapedUnit reads the UTF-16 code unit of a \uXXXX escape at data[i].
func escapedUnit(data []byte, i int) (rune, bool) {
	if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range data[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

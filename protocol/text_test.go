package protocol

import "testing"

func TestCheckSurrogates(t *testing.T) {
	tests := []struct {
		name, body string
		ok         bool
	}{
		{"plain", `{"id":"sur"}`, true},
		{"the replacement character itself", `{"id":"sur\ufffd"}`, true},
		{"a pair", `{"id":"sur\ud83d\ude00"}`, true},
		{"a pair in capitals", `{"id":"\uD83D\uDE00"}`, true},
		{"an escaped backslash before u", `{"id":"\\ud800"}`, true},
		{"other escapes", `{"id":"\"\\\/\b\f\n\r\t\u0041"}`, true},
		{"a bad escape is the decoder's to refuse", `{"id":"\uzzzz"}`, true},
		{"a lone high surrogate", `{"id":"sur\ud800"}`, false},
		{"a lone low surrogate", `{"id":"sur\udfff"}`, false},
		{"capitals", `{"id":"\uDBFF"}`, false},
		{"a high one then text", `{"id":"\ud800x"}`, false},
		{"two high ones", `{"id":"\ud800\ud800"}`, false},
		{"a low one then a high one", `{"id":"\udc00\ud800"}`, false},
		{"after an escaped backslash", `{"id":"\\\ud800"}`, false},
		{"in a key", `{"\udfff":1}`, false},
		{"deep in a payload", `{"payload":{"a":["x","\udc00"]}}`, false},
		{"at the end", `"\ud800`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSurrogates([]byte(tt.body))
			if (err == nil) != tt.ok {
				t.Fatalf("CheckSurrogates(%s) = %v, want ok %v", tt.body, err, tt.ok)
			}
		})
	}
}

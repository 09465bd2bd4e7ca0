package run

import "testing"

// A proven violation outranks everything when results are combined: a
// suite with an invalid run exits 1 even when another run was unknown or
// could not start.
func TestWorse(t *testing.T) {
	tests := []struct{ a, b, want int }{
		{ExitValid, ExitUnknown, ExitUnknown},
		{ExitUnknown, ExitInvalid, ExitInvalid},
		{ExitInvalid, ExitUnknown, ExitInvalid},
		{ExitInvalid, ExitCannotRun, ExitInvalid},
		{ExitCannotRun, ExitUnknown, ExitCannotRun},
		{ExitUnknown, ExitValid, ExitUnknown},
	}
	for _, tt := range tests {
		if got := Worse(tt.a, tt.b); got != tt.want {
			t.Errorf("Worse(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

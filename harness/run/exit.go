package run

import "github.com/shardtest/shardtest/checker"

// Exit statuses of every command that runs or checks tests (README): the
// one table of what a run's or a suite's outcome means to a CI job.
const (
	ExitValid     = 0
	ExitInvalid   = 1
	ExitUnknown   = 2
	ExitCannotRun = 3
)

// ExitFor is the exit status of a verdict.
func ExitFor(v checker.Verdict) int {
	switch v {
	case checker.Valid:
		return ExitValid
	case checker.Invalid:
		return ExitInvalid
	}
	return ExitUnknown
}

// VerdictFor names the verdict an exit status stands for (a run that
// could not run says nothing of correctness: it is not a verdict, and is
// named by the caller).
func VerdictFor(code int) string {
	switch code {
	case ExitInvalid:
		return "invalid"
	case ExitUnknown:
		return "unknown"
	}
	return "valid"
}

// Worse returns the exit status of two results together: a proven
// violation (invalid) outranks everything, as in Jepsen (invalid >
// unknown > valid), so a CI job keyed on exit 1 never misses one; then a
// run that could not start, then unknown, then valid.
func Worse(a, b int) int {
	rank := func(code int) int {
		switch code {
		case ExitInvalid:
			return 3
		case ExitCannotRun:
			return 2
		case ExitUnknown:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

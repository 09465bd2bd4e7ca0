package checker

// Caught is the one place that decides whether a run caught what it was
// looking for (a deliberate bug, the failure a shrink keeps): the named
// checker said invalid. It returns that checker's result (found: the run
// has it at all).
func Caught(results []Result, name string) (r Result, caught, found bool) {
	for _, r := range results {
		if r.Checker == name {
			return r, r.Verdict == Invalid, true
		}
	}
	return Result{}, false, false
}

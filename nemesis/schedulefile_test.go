package nemesis

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestReadSchedule(t *testing.T) {
	good := `{"format":"shardtest-schedule","steps":[
		{"at":"5s","fault":"partition:halves"},
		{"at":"6.5s","fault":"clock:bump","key":"skew","target":"one","seed":77},
		{"at":"20s","fault":"partition:halves","heal":true},
		{"at":"1m","fault":"clock:bump","key":"skew","heal":true}]}`
	steps, err := ReadSchedule(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{At: 5 * time.Second, Fault: "partition:halves"},
		{At: 6500 * time.Millisecond, Fault: "clock:bump", Key: "skew", Target: "one", Seed: 77},
		{At: 20 * time.Second, Fault: "partition:halves", Heal: true},
		{At: time.Minute, Fault: "clock:bump", Key: "skew", Heal: true},
	}
	if len(steps) != len(want) {
		t.Fatalf("%d steps", len(steps))
	}
	for i := range want {
		if steps[i] != want[i] {
			t.Errorf("step %d: %+v, want %+v", i, steps[i], want[i])
		}
	}
	// What WriteSchedule writes reads back the same.
	var b bytes.Buffer
	if err := WriteSchedule(&b, steps); err != nil {
		t.Fatal(err)
	}
	again, err := ReadSchedule(&b)
	if err != nil || len(again) != len(steps) {
		t.Fatalf("round trip: %v, %d steps", err, len(again))
	}
	for i := range steps {
		if again[i] != steps[i] {
			t.Errorf("round trip step %d: %+v, want %+v", i, again[i], steps[i])
		}
	}

	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", `steps: []`, "not a schedule file"},
		{"no format", `{"steps":[{"at":"1s","fault":"kill:one"}]}`, `format ""`},
		{"unknown field", `{"format":"shardtest-schedule","steps":[{"at":"1s","fault":"kill:one","hold":"2s"}]}`, "unknown field"},
		{"no steps", `{"format":"shardtest-schedule","steps":[]}`, "no steps"},
		{"bad at", `{"format":"shardtest-schedule","steps":[{"at":"5x","fault":"kill:one"}]}`, `step 0: at "5x"`},
		{"no at", `{"format":"shardtest-schedule","steps":[{"fault":"kill:one"}]}`, `step 0: no "at"`},
		{"at as a number", `{"format":"shardtest-schedule","steps":[{"at":5,"fault":"kill:one"}]}`, "not a schedule file"},
		{"negative at", `{"format":"shardtest-schedule","steps":[{"at":"-1s","fault":"kill:one"}]}`, "before the main phase"},
		{"no fault", `{"format":"shardtest-schedule","steps":[{"at":"1s"}]}`, "step 0: no fault"},
		{"out of order", `{"format":"shardtest-schedule","steps":[{"at":"5s","fault":"kill:one"},{"at":"1s","fault":"kill:one","heal":true}]}`, "comes before"},
		{"heal of nothing", `{"format":"shardtest-schedule","steps":[{"at":"5s","fault":"kill:one","heal":true}]}`, "not injected"},
		{"two objects", `{"format":"shardtest-schedule","steps":[{"at":"1s","fault":"kill:one"}]} {}`, "text after"},
		{"bad target", `{"format":"shardtest-schedule","steps":[{"at":"1s","fault":"kill:one","target":"half"}]}`, `target "half"`},
	} {
		_, err := ReadSchedule(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A step's own seed is kept; the others follow the run's.
func TestSeedScheduleKeepsFixedSeeds(t *testing.T) {
	steps := SeedSchedule([]Step{{At: 1, Fault: "kill:one"}, {At: 2, Fault: "kill:one", Heal: true, Seed: 5}}, 3)
	if steps[0].Seed == 0 || steps[1].Seed != 5 {
		t.Fatalf("%+v", steps)
	}
}

package report

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/history"
)

// chromium is a headless Chromium on this machine, or "" (Debian's
// package: apt-get install chromium).
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The page of an invalid run, opened from disk in a real browser with no
// network: it renders (the DOM the browser built holds the lead, the folded
// evidence and the timeline with its violation mark), and a screenshot is
// taken (SHARDTEST_SCREENSHOT=path keeps it, to look at).
func TestPageInBrowser(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no headless Chromium here (apt-get install chromium)")
	}
	s := time.Second.Nanoseconds()
	var ops []history.Op
	ops = append(ops, history.Op{Time: 0, Kind: history.Phase, Process: -1, F: "main"})
	for i := range 200 {
		node := fmt.Sprintf("n%d", i%3+1)
		ops = append(ops, opAt(int64(i)*s/10, history.Invoke, i%6, node), opAt(int64(i)*s/10+5e6, history.OK, i%6, node))
	}
	ops = append(ops, nem(5*s, "partition:halves", `{"action":"inject","began":4900000000}`, ""),
		nem(12*s, "partition:halves", `{"action":"heal","began":11900000000}`, ""))
	var ev []string
	for i := range 30 {
		ev = append(ev, fmt.Sprintf("register/e%d: not linearizable", i))
	}
	dir := t.TempDir()
	in := Input{Test: "browser", Verdict: checker.Invalid, History: &history.File{Ops: indexOps(ops)}, Checks: []checker.Result{
		{Checker: "linearizable", Verdict: checker.Invalid, Summary: "30 entities not linearizable", Evidence: ev, FirstViolation: 8 * s,
			Detection: &checker.Detection{Fault: "partition:halves", FaultAt: 5 * s, At: 8 * s, After: 3 * time.Second}},
		{Checker: "single-instance", Verdict: checker.Valid, Summary: "never two alive at once"},
	}}
	if err := Write(dir, in); err != nil {
		t.Fatal(err)
	}
	page := "file://" + filepath.Join(dir, IndexFile)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--user-data-dir=" + t.TempDir()}
	dom, err := exec.CommandContext(ctx, bin, append(args, "--dump-dom", page)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	for _, want := range []string{`<h2 id="failed">What failed</h2>`, "30 lines of evidence", "✕ linearizable", "<svg", `id="check-linearizable"`} {
		if !strings.Contains(string(dom), want) {
			t.Errorf("the rendered page lacks %q", want)
		}
	}
	shot := os.Getenv("SHARDTEST_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "page.png")
	}
	if out, err := exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, "--window-size=1280,1600", page)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Errorf("screenshot %s: %v", shot, err)
	}
}

// indexOps numbers ops as a history would.
func indexOps(ops []history.Op) []history.Op {
	for i := range ops {
		ops[i].Index = int64(i)
	}
	return ops
}

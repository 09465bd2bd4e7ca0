package results

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/report"
)

// resultsTree writes a small results store: one finished run, one killed
// run, a latest symlink, and a secret outside the root.
func resultsTree(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "results")
	good := filepath.Join(root, "register", "20261129T201536.132Z")
	writeFile(t, filepath.Join(good, "test.json"), `{"name":"register","runtime":"local","workload":"register","nodes":3,"seed":4242}`)
	writeFile(t, filepath.Join(good, "results.json"), `{"test":"register","started":"2026-11-29T20:15:36.132Z","summary":{"Invocations":9,"OK":6,"Fail":2,"Info":1},"verdict":"unchecked"}`)
	writeFile(t, filepath.Join(good, "history.jsonl"), `{"kind":"phase"}`+"\n")
	writeFile(t, filepath.Join(good, "n1.log"), "node n1 started\n")
	writeFile(t, filepath.Join(good, "linearizability", "register-r1.html"), "<p>porcupine</p>")
	in := report.Input{Test: "register", Verdict: checker.Unknown, Options: []byte(`{"name":"register","seed":4242}`),
		Checks: []checker.Result{{Checker: "linearizable", Verdict: checker.Unknown, Summary: "<b>undecided</b>",
			Files: []string{"linearizability/register-r1.html"}}}}
	if err := report.Write(good, in); err != nil {
		t.Fatal(err)
	}
	killed := filepath.Join(root, "idgen", "20261129T201954.118Z")
	writeFile(t, filepath.Join(killed, "test.json"), `{"name":"idgen","runtime":"docker","workload":"idgen","nodes":5,"seed":77}`)
	writeFile(t, filepath.Join(base, "secret.txt"), "SECRET")
	if err := os.Symlink("register/20261129T201536.132Z", filepath.Join(root, "latest")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret.txt", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	return root
}

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

func TestServeHandler(t *testing.T) {
	root := resultsTree(t)
	h, err := Handler(root)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("index lists the runs", func(t *testing.T) {
		rec := get(t, h, "/")
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("Content-Type %q", ct)
		}
		body := rec.Body.String()
		for _, want := range []string{
			"register", "2026-11-29 20:15:36 UTC", "v-unchecked", "4242", "local",
			"idgen", "v-incomplete", "77", "docker",
			`href="/files/register/20261129T201536.132Z/history.jsonl"`,
			`href="/files/register/20261129T201536.132Z/n1.log"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("index lacks %q", want)
			}
		}
		if strings.Contains(body, "<script") || strings.Contains(body, "http://") || strings.Contains(body, "https://") {
			t.Error("index uses scripts or external assets")
		}
		// Newest first: the killed idgen run started later.
		if strings.Index(body, "idgen") > strings.Index(body, "/files/register/") {
			t.Error("runs are not newest first")
		}
	})

	t.Run("runs link their report", func(t *testing.T) {
		body := get(t, h, "/").Body.String()
		const page = "/files/register/20261129T201536.132Z/"
		for _, want := range []string{
			`<a class="verdict v-unchecked" href="` + page + `">unchecked</a>`, // results.json's verdict
			`<a class="report" href="` + page + `">report</a>`,
			`href="/files/register/20261129T201536.132Z/junit.xml"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("index lacks %q", want)
			}
		}
		if strings.Count(body, `class="report"`) != 1 {
			t.Error("a run without index.html links a report")
		}
		// The report is served as a page whose relative links resolve
		// inside the run folder.
		rec := get(t, h, page)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "&lt;b&gt;undecided&lt;/b&gt;") {
			t.Fatalf("GET %s: %d %.200q", page, rec.Code, rec.Body.String())
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Errorf("report Content-Type %q", ct)
		}
		links := regexp.MustCompile(`href="\./([^"]+)"`).FindAllStringSubmatch(rec.Body.String(), -1)
		if len(links) < 4 {
			t.Fatalf("report has %d relative links", len(links))
		}
		for _, m := range links {
			if rec := get(t, h, page+m[1]); rec.Code != http.StatusOK {
				t.Errorf("report link %s: status %d", m[1], rec.Code)
			}
		}
	})

	t.Run("file links serve the files", func(t *testing.T) {
		for _, tc := range []struct{ path, body, ctype string }{
			{"/files/register/20261129T201536.132Z/history.jsonl", `{"kind":"phase"}`, "text/plain"},
			{"/files/register/20261129T201536.132Z/n1.log", "node n1 started", "text/plain"},
			{"/files/register/20261129T201536.132Z/test.json", `"seed":4242`, "application/json"},
			{"/files/latest/n1.log", "node n1 started", "text/plain"},
		} {
			rec := get(t, h, tc.path)
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("GET %s: %d %q", tc.path, rec.Code, rec.Body.String())
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.ctype) {
				t.Errorf("GET %s: Content-Type %q, want %s", tc.path, ct, tc.ctype)
			}
		}
	})

	t.Run("escapes are refused", func(t *testing.T) {
		for _, p := range []string{
			"/files/../secret.txt",
			"/files/register/../../secret.txt",
			"/files/%2e%2e/secret.txt",
			"/files/..%2fsecret.txt",
			"/files/escape", // a symlink out of the root
			"/../secret.txt",
		} {
			rec := get(t, h, p)
			if rec.Code != http.StatusBadRequest && rec.Code != http.StatusNotFound {
				t.Errorf("GET %s: status %d, want 400 or 404", p, rec.Code)
			}
			if strings.Contains(rec.Body.String(), "SECRET") {
				t.Errorf("GET %s leaked the file outside the root", p)
			}
		}
	})

	t.Run("read-only", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/files/latest/n1.log", strings.NewReader("x")))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("POST: status %d", rec.Code)
		}
	})
}

func TestServeHandlerMissingDir(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	_, err := Handler(missing)
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want a clear 'does not exist' error naming %s", err, missing)
	}
}

// A FIFO in the results folder (or named like a run's results.json) is not
// served or read: opening one blocks until a writer comes, and every
// request for it hung, holding a file and a thread.
func TestServeSkipsSpecialFiles(t *testing.T) {
	root := resultsTree(t)
	fifo := filepath.Join(root, "register", "20261129T201536.132Z", "pipe.log")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	run := filepath.Join(root, "append", "20261129T202000.000Z")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(run, "results.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := Handler(root)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *httptest.ResponseRecorder, 2)
	go func() { done <- get(t, h, "/files/register/20261129T201536.132Z/pipe.log") }()
	go func() { done <- get(t, h, "/") }()
	for range 2 {
		select {
		case rec := <-done:
			if rec.Code != http.StatusOK && rec.Code != http.StatusNotFound {
				t.Errorf("status %d: %s", rec.Code, rec.Body)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a request for a FIFO hangs")
		}
	}
	if rec := get(t, h, "/files/register/20261129T201536.132Z/pipe.log"); rec.Code != http.StatusNotFound {
		t.Fatalf("a FIFO was served: %d", rec.Code)
	}
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

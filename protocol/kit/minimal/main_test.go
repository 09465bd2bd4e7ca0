package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

// The module path of the protocol module, and the only module outside the
// standard library it may require (docs/protocol.md, Testing your
// implementation): an implementation that depends on it takes nothing else.
const (
	protocolModule = "github.com/shardtest/shardtest/protocol"
	allowedDep     = "golang.org/x/net"
)

// A fresh module outside the repository, depending on the protocol module
// alone, builds this node (main.go, as docs/protocol.md shows it) offline:
// GOPROXY=off, only the module cache this machine has, and the protocol
// module's folder for the module itself (as a replace). Its module graph
// holds the protocol module and nothing but golang.org/x/net besides. The
// binary then serves a register as the protocol says.
func TestMinimalNodeInAFreshModule(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH: the fresh module cannot be built here")
	}
	protoDir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if mod := modulePath(t, filepath.Join(protoDir, "go.mod")); mod != protocolModule {
		t.Fatalf("%s/go.mod declares %q, want %s", protoDir, mod, protocolModule)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := fmt.Sprintf("module example.com/mynode\n\ngo 1.26\n\nrequire %s v0.0.0\n\nreplace %s => %s\n", protocolModule, protocolModule, protoDir)
	write(t, filepath.Join(dir, "go.mod"), gomod)
	write(t, filepath.Join(dir, "main.go"), string(src))
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "CGO_ENABLED=0")
	gorun := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(gocmd, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in a fresh module: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	bin := filepath.Join(dir, "mynode")
	gorun("build", "-o", bin, ".")
	for _, m := range strings.Fields(gorun("list", "-m", "-f", "{{.Path}}", "all")) {
		if m != "example.com/mynode" && m != protocolModule && m != allowedDep {
			t.Errorf("the fresh module's graph holds %s: the protocol module may require %s alone", m, allowedDep)
		}
	}
	serveRegister(t, bin)
}

// serveRegister starts the node's binary and drives a register through it.
func serveRegister(t *testing.T, bin string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), protocol.EnvName("name")+"=n1", protocol.EnvName("http")+"="+addr)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("the node did not stop on SIGTERM within 10 s")
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		if res, err := http.Get("http://" + addr + "/v1/health"); err == nil {
			res.Body.Close()
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("the node exited: %v\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("the node did not serve within 20 s\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	steps := []struct {
		op, payload string
		status      int
		result      string
	}{
		{"read", ``, 200, `{"value":null}`},
		{"cas", `{"value":1}`, 400, ""}, // no expect: refused, not taken as null
		{"cas", `{"expect":5,"value":1}`, 200, `{"ok":false,"value":null}`},
		{"cas", `{"expect":null,"value":1}`, 200, `{"ok":true,"value":1}`},
		{"write", `{"value":"2"}`, 400, ""},
		{"write", `{"value":2}`, 200, `{"value":2}`},
		{"read", `{}`, 200, `{"value":2}`},
	}
	for _, s := range steps {
		req := protocol.EntityRequest{Type: protocol.TypeRegister, ID: "k", Op: s.op, Payload: json.RawMessage(s.payload)}
		body, _ := json.Marshal(req)
		res, err := http.Post("http://"+addr+"/v1/entity", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != s.status {
			t.Fatalf("%s %s: %d %s, want %d", s.op, s.payload, res.StatusCode, b, s.status)
		}
		var rep protocol.EntityReply
		if s.status == 200 && (json.Unmarshal(b, &rep) != nil || string(rep.Result) != s.result || rep.ServedBy.Node != "n1") {
			t.Fatalf("%s %s: %s, want result %s served by n1", s.op, s.payload, b, s.result)
		}
	}
}

// docs/protocol.md shows main.go whole, under "Testing your
// implementation": the page's code is the code this test builds.
func TestDocsShowThisNode(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/protocol.md")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("docs/protocol.md is not beside this module (a copy outside the repository)")
	}
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(doc))
	if !slices.Contains(blocks, string(src)) {
		t.Fatalf("docs/protocol.md has no ```go block equal to protocol/kit/minimal/main.go (%d go blocks); copy the file into the page", len(blocks))
	}
	if !strings.Contains(string(doc), "go get "+protocolModule) {
		t.Errorf("docs/protocol.md does not give the go get line of %s", protocolModule)
	}
}

// goBlocks returns the ```go fenced blocks of a Markdown text.
func goBlocks(md string) []string {
	var blocks []string
	var cur *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && line == "```go":
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

func modulePath(t *testing.T, gomod string) string {
	b, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

func write(t *testing.T, path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

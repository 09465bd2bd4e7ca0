package node

import (
	"bufio"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

// peerPost sends a node-to-node request to n's peer port as a stranger's
// raw client would, with headers h; it returns the status and the error
// code (a refusal must be a definite failure).
func peerPost(t *testing.T, n *Node, path, body string, h map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.PeerAddr()+path, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var e protocol.ErrorBody
	json.Unmarshal(b, &e)
	if res.StatusCode >= 300 && e.Outcome != protocol.Fail {
		t.Errorf("%s: refused with outcome %q, want fail: %s", path, e.Outcome, b)
	}
	return res.StatusCode, e.Code
}

// withHeader is h but for header k, set to v ("": left out).
func withHeader(h map[string]string, k, v string) map[string]string {
	h = maps.Clone(h)
	if v == "" {
		delete(h, k)
	} else {
		h[k] = v
	}
	return h
}

// peerUpgrade asks n's peer port for a stream with headers h; it returns
// the answer's status (101: a stream was opened, and is closed again).
func peerUpgrade(t *testing.T, n *Node, h map[string]string) int {
	t.Helper()
	conn, err := net.Dial("tcp", n.PeerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	req, _ := http.NewRequest(http.MethodGet, "http://"+n.PeerAddr()+peer.StreamPath, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "shardtest-peer/1")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

package singleton

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

func TestEndpointsBadInput(t *testing.T) {
	rec := newRecorder()
	c := newCluster(t, 2, testConfig(), func(n string) Factory { return rec.factory(n, 0) })
	n1, n2 := c.node("n1"), c.node("n2")
	// A second singleton on n1's mux whose manager is not running.
	other, err := NewManager(Config{Name: "other"}, Deps{Membership: n1.mem, Peers: n1.peers, Clock: c.clock, Factory: rec.factory("x", 0)})
	if err != nil {
		t.Fatal(err)
	}
	other.Routes(n1.mux)
	c.setAll(allUp("n1", "n2"))
	c.start()
	eventually(t, wait, func() bool { return running(n1) }, "n1 runs")
	eventually(t, wait, func() bool { return n2.mgr.Status().State == StateYounger }, "n2 younger")

	base := "/internal/v1/singleton/test-singleton/"
	tests := []struct {
		name       string
		node       *tnode
		method     string
		path       string
		body       string
		wantStatus int
		wantCode   string
		wantOut    protocol.Outcome // "" means fail
	}{
		{"malformed hand-over", n1, "POST", base + "hand-over-to-me", "{", 400, protocol.CodeBadJSON, ""},
		{"hand-over without from", n1, "POST", base + "hand-over-to-me", "{}", 400, protocol.CodeBadRequest, ""},
		{"take-over wrong shape", n1, "POST", base + "take-over-from-me", "[1,2]", 400, protocol.CodeBadJSON, ""},
		{"hand-over-done empty body", n1, "POST", base + "hand-over-done", "", 400, protocol.CodeBadJSON, ""},
		{"from of the wrong type", n1, "POST", base + "hand-over-done", `{"from":5}`, 400, protocol.CodeBadJSON, ""},
		{"malformed request", n1, "POST", base + "request", "{", 400, protocol.CodeBadJSON, ""},
		{"empty op", n1, "POST", base + "request", `{"op":""}`, 400, protocol.CodeBadRequest, ""},
		{"null request", n1, "POST", base + "request", `null`, 400, protocol.CodeBadRequest, ""},
		{"unknown op", n1, "POST", base + "request", `{"op":"nope"}`, 400, protocol.CodeBadRequest, ""},
		{"instance replies garbage", n1, "POST", base + "request", `{"op":"bad-json"}`, 500, protocol.CodeInstanceError, protocol.Unknown},
		{"too large", n1, "POST", base + "request", `{"op":"echo","payload":"` + strings.Repeat("x", maxBody) + `"}`, 413, protocol.CodeBadRequest, ""},
		{"unknown singleton", n1, "POST", "/internal/v1/singleton/nope/request", `{"op":"echo"}`, 404, protocol.CodeUnknownSingleton, ""},
		{"unknown endpoint", n1, "POST", base + "explode", `{}`, 404, protocol.CodeNotFound, ""},
		{"nested path", n1, "POST", base + "request/more", `{}`, 404, protocol.CodeNotFound, ""},
		{"no name", n1, "POST", "/internal/v1/singleton/", `{}`, 404, protocol.CodeNotFound, ""},
		{"wrong method", n1, "GET", base + "request", "", 405, protocol.CodeMethodNotAllowed, ""},
		{"wrong method hand-over", n1, "PUT", base + "hand-over-to-me", `{"from":"x"}`, 405, protocol.CodeMethodNotAllowed, ""},
		{"not running here", n2, "POST", base + "request", `{"op":"echo"}`, 503, protocol.CodeSingletonNotRunning, ""},
		{"manager not running", n1, "POST", "/internal/v1/singleton/other/hand-over-to-me", `{"from":"n2@i1"}`, 503, protocol.CodeNoManager, ""},
		// The body's word for the sender is not taken: it must be the
		// member the request comes from (a hand-over to a member that
		// does not exist stopped the singleton cluster-wide).
		{"hand-over for another member", n1, "POST", base + "hand-over-to-me", `{"from":"ghost@000000000000"}`, 403, protocol.CodePeerRefused, ""},
		{"take-over for another member", n1, "POST", base + "take-over-from-me", `{"from":"ghost@000000000000"}`, 403, protocol.CodePeerRefused, ""},
		{"hand-over-done for another member", n1, "POST", base + "hand-over-done", `{"from":"ghost@000000000000"}`, 403, protocol.CodePeerRefused, ""},
		{"no sender admitted", n1, "POST", base + "hand-over-to-me", `{"from":"n2@i1"}`, 403, protocol.CodePeerRefused, ""},
		// Its own, but not the next oldest in n1's view (n2 is).
		{"hand-over to a member not next in line", n1, "POST", base + "hand-over-to-me", `{"from":"n3@i1"}`, 409, protocol.CodeNotNextOldest, ""},
	}
	// Who sends (n2 unless named here; "": nobody the guard admitted).
	senders := map[string]string{"no sender admitted": "", "hand-over to a member not next in line": "n3@i1"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, tt.node.srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			// The harness has no guard: it takes this header for the
			// member the request comes from (peer.NameSender).
			sender, named := senders[tt.name]
			if !named {
				sender = n2.uid()
			}
			if sender != "" {
				req.Header.Set(peer.MemberHeader, sender)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			data, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.wantStatus, data)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			var eb protocol.ErrorBody
			if err := json.Unmarshal(data, &eb); err != nil {
				t.Fatalf("answer is not JSON: %q", data)
			}
			want := tt.wantOut
			if want == "" {
				want = protocol.Fail
			}
			if eb.Code != tt.wantCode || eb.Outcome != want || eb.Error == "" {
				t.Errorf("body %+v, want code %q outcome %q", eb, tt.wantCode, want)
			}
		})
	}
	// Still healthy after all that.
	if !running(n1) || rec.count("n1", "start") != 1 {
		t.Fatal("bad input disturbed the singleton")
	}
	var out stateBody
	if err := n2.peers.Call(t.Context(), n1.member.Target(), base+"take-over-from-me", fromBody{From: "stranger@x"}, &out); !peer.IsDefiniteFailure(err) {
		t.Errorf("take-over for a stranger: %+v, %v, want refused", out, err)
	}
	if got, err := postErr(n1, opTakeOverFromMe, "stranger@x"); err != nil || got != answerIgnored {
		t.Errorf("take-over from a stranger: %q, %v", got, err)
	}
	if got, err := postErr(n1, opHandOverDone, "stranger@x"); err != nil || got != answerAck {
		t.Errorf("hand-over-done from a stranger: %q, %v", got, err)
	}
	if !running(n1) {
		t.Fatal("stray protocol messages stopped the singleton")
	}
}

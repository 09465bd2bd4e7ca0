package sharding

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/protocol"
)

// TestBadInput: malformed requests to the internal endpoints get a 4xx
// JSON protocol.ErrorBody with outcome "fail", never a panic.
func TestBadInput(t *testing.T) {
	s := testSettings()
	c := newShardCluster(t, 2, s, "n2")
	c.setAll(allUp("n1", "n2"))
	c.start("n1", "n2")
	c.awaitRegistered("n1", "n2")
	base := c.node("n1").srv.URL + routePrefix + s.TypeName + "/"
	proxyBase := c.node("n2").srv.URL + routePrefix + s.TypeName + "/"
	tests := []struct {
		name, method, url, body string
		status                  int
		code                    string
	}{
		{"deliver bad json", "POST", base + "deliver", "{", 400, protocol.CodeBadJSON},
		{"deliver not an object", "POST", base + "deliver", "[1,2]", 400, protocol.CodeBadJSON},
		{"deliver empty entity", "POST", base + "deliver", `{"op":"x"}`, 400, protocol.CodeBadRequest},
		{"deliver wrong payload type", "POST", base + "deliver", `{"entity_id":5}`, 400, protocol.CodeBadJSON},
		{"deliver shard not hosted", "POST", base + "deliver", `{"entity_id":"nobody-asked"}`, 503, protocol.CodeShardNotHere},
		{"host-shard empty", "POST", base + "host-shard", `{}`, 400, protocol.CodeBadRequest},
		{"host-shard bad json", "POST", base + "host-shard", `nope`, 400, protocol.CodeBadJSON},
		{"host-shard on proxy", "POST", proxyBase + "host-shard", `{"shard":"1"}`, 409, protocol.CodeProxyOnly},
		{"begin-hand-off empty", "POST", base + "begin-hand-off", `{"shard":""}`, 400, protocol.CodeBadRequest},
		{"hand-off long shard", "POST", base + "hand-off", `{"shard":"` + strings.Repeat("x", 300) + `"}`, 400, protocol.CodeBadRequest},
		{"hand-off null", "POST", base + "hand-off", `null`, 400, protocol.CodeBadRequest},
		{"wrong method", "GET", base + "deliver", "", 405, protocol.CodeMethodNotAllowed},
		{"unknown op", "POST", base + "explode", "{}", 404, protocol.CodeNotFound},
		{"unknown type", "POST", c.node("n1").srv.URL + routePrefix + "nosuchtype/deliver", "{}", 404, protocol.CodeNotFound},
		{"no type", "POST", c.node("n1").srv.URL + routePrefix + "deliver", "{}", 404, protocol.CodeNotFound},
		{"too large", "POST", base + "deliver", `{"entity_id":"` + strings.Repeat("x", maxBody) + `"}`, 413, protocol.CodeBadRequest},
		// Only the shards the type has (0 to 11), by their one name.
		{"host-shard out of range", "POST", base + "host-shard", `{"shard":"12"}`, 400, protocol.CodeBadRequest},
		{"host-shard negative", "POST", base + "host-shard", `{"shard":"-1"}`, 400, protocol.CodeBadRequest},
		{"host-shard not a number", "POST", base + "host-shard", `{"shard":"x"}`, 400, protocol.CodeBadRequest},
		{"host-shard another name of 7", "POST", base + "host-shard", `{"shard":"07"}`, 400, protocol.CodeBadRequest},
		{"hand-off out of range", "POST", base + "hand-off", `{"shard":"99"}`, 400, protocol.CodeBadRequest},
		// Only from the coordinator's member (n1, the oldest).
		{"host-shard from another member", "POST", base + "host-shard", `{"shard":"7"}`, 409, protocol.CodeNotCoordinator},
		{"begin-hand-off from another member", "POST", base + "begin-hand-off", `{"shard":"7"}`, 409, protocol.CodeNotCoordinator},
		{"hand-off from another member", "POST", base + "hand-off", `{"shard":"7"}`, 409, protocol.CodeNotCoordinator},
		{"host-shard from nobody admitted", "POST", base + "host-shard", `{"shard":"7"}`, 403, protocol.CodePeerRefused},
	}
	// Who sends: the coordinator's member unless named here ("": nobody
	// the guard admitted).
	n1, n2 := c.node("n1").uid(), c.node("n2").uid()
	senders := map[string]string{
		"host-shard from another member": n2, "begin-hand-off from another member": n2, "hand-off from another member": n2,
		"host-shard from nobody admitted": "",
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, tt.url, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			// The harness has no guard: it takes this header for the
			// member the request comes from (peer.NameSender).
			sender, named := senders[tt.name]
			if !named {
				sender = n1
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
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, data)
			}
			var eb protocol.ErrorBody
			if err := json.Unmarshal(data, &eb); err != nil {
				t.Fatalf("body is not JSON: %q", data)
			}
			if eb.Code != tt.code || eb.Outcome != protocol.Fail || eb.Error == "" {
				t.Fatalf("body %+v, want code %s outcome fail", eb, tt.code)
			}
		})
	}
	// Nothing was hosted on those requests, and the region still works.
	if hosted := c.node("n1").region.HostedShards(); len(hosted) != 0 {
		t.Fatalf("n1 hosts %v after the bad requests", hosted)
	}
	if _, err := c.deliver("n1", "after", "s", 1); err != nil {
		t.Fatal(err)
	}
}

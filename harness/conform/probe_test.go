package conform

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/harness/local"
)

// The probes pass on a correct implementation on the kit, and each
// deliberately broken one fails the probes its breakage is about (and no
// other): the suite can fail. The reference node's peer-port probes skip
// on another implementation, saying why.
func TestProbesFailOnBrokenTargets(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *fakeCluster)
		wrap  func(f *fakeCluster, i int, h http.Handler) http.Handler
		only  []string
		// broken are the probes that must fail, with the words their
		// detail must have ("": any detail); none other may.
		broken map[string]string
	}{
		{name: "a correct implementation on the kit"},
		{name: "node-to-node routes served on the public port", broken: map[string]string{"internal-routes-404": "accepted (200"},
			wrap: func(_ *fakeCluster, _ int, h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if strings.Contains(r.URL.Path, "internal") {
						w.Write([]byte(`{"state":"in-progress"}`))
						return
					}
					h.ServeHTTP(w, r)
				})
			}},
		{name: "bad requests answered 200", broken: map[string]string{"bad-bodies": "accepted", "huge-id": "accepted", "invalid-utf8": "accepted", "lone-surrogates": "accepted"},
			wrap: func(_ *fakeCluster, _ int, h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					for k, v := range rec.Header() {
						w.Header()[k] = v
					}
					if rec.Code == http.StatusBadRequest {
						w.Write([]byte(`{}`))
						return
					}
					w.WriteHeader(rec.Code)
					w.Write(rec.Body.Bytes())
				})
			}},
		{name: "no header timeout", setup: func(f *fakeCluster) { f.headerTimeout = 0 }, only: []string{"slow-client"},
			broken: map[string]string{"slow-client": "still connected after"}},
		// Refused, yet harmed: the after-check catches what the answer
		// does not show.
		{name: "a garbage body makes each node keep its own state", only: []string{"bad-bodies"}, broken: map[string]string{"bad-bodies": "afterwards: read through n2"},
			wrap: func(f *fakeCluster, _ int, h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/v1/entity" && r.ContentLength == 2 {
						f.mu.Lock()
						f.perNode = true
						f.mu.Unlock()
					}
					h.ServeHTTP(w, r)
				})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeCluster{headerTimeout: time.Second}
			if tt.setup != nil {
				tt.setup(f)
			}
			var wrap func(int, http.Handler) http.Handler
			if tt.wrap != nil {
				wrap = func(i int, h http.Handler) http.Handler { return tt.wrap(f, i, h) }
			}
			nodes := f.start(t, 2, wrap)
			rep := RunProbes(context.Background(), nodes, ProbeOptions{Only: tt.only, SlowClientLimit: 3 * time.Second, FloodConnections: 500})
			for _, r := range rep.Results {
				want, broken := tt.broken[r.Probe]
				switch {
				case broken && (r.Verdict != Fail || !strings.Contains(r.Detail, want)):
					t.Errorf("%s: %s %q, want it failed saying %q", r.Probe, r.Verdict, r.Detail, want)
				case !broken && r.Verdict == Fail:
					t.Errorf("%s failed too: %s", r.Probe, r.Detail)
				case r.Applies == ReferenceNode && (r.Verdict != Skip || !strings.Contains(r.Detail, "not the reference node")):
					t.Errorf("%s: %s %q on another implementation, want it skipped as the reference node's", r.Probe, r.Verdict, r.Detail)
				case r.Applies == AnyImplementation && !broken && r.Verdict != Pass:
					t.Errorf("%s: %s %q, want pass", r.Probe, r.Verdict, r.Detail)
				}
			}
			if got := len(rep.Results) - 1; tt.only != nil && got != len(tt.only) {
				t.Errorf("%d probes ran, want %v", got, tt.only)
			}
			if rep.OK() != (len(tt.broken) == 0) {
				t.Errorf("report OK = %v with %d failed", rep.OK(), rep.Failed)
			}
			if t.Failed() {
				var b strings.Builder
				rep.Print(&b)
				t.Log(b.String())
			}
		})
	}
}

// checkProbesOnReferenceNode runs every probe on a cluster of reference
// nodes (cl): each passes. Its peer-port probes skip, saying what they
// need, when the harness cannot reach the peer port as a member.
func checkProbesOnReferenceNode(ctx context.Context, t *testing.T, cl *local.Cluster, nodes []Node) {
	rep := RunProbes(ctx, nodes, ProbeOptions{Peer: &PeerAccess{Secret: cl.Secret()}})
	var b strings.Builder
	rep.Print(&b)
	t.Log(b.String())
	if !rep.Reference {
		t.Error("the reference node was not recognised")
	}
	for _, r := range rep.Results {
		if r.Verdict != Pass {
			t.Errorf("probe %s: %s %s", r.Probe, r.Verdict, r.Detail)
		}
	}
	if got, want := len(rep.Results), len(Probes())+1; got != want {
		t.Errorf("%d results, want %d (the baseline and every probe)", got, want)
	}
	peerOnly := slices.DeleteFunc(Probes(), func(p Probe) bool { return p.Applies != ReferenceNode })
	rep = RunProbes(ctx, nodes, ProbeOptions{Only: []string{peerOnly[0].Name}})
	if r := rep.Results[len(rep.Results)-1]; r.Verdict != Skip || !strings.Contains(r.Detail, "--runtime local") {
		t.Errorf("without peer access, %s: %s %q, want skipped naming --runtime local", r.Probe, r.Verdict, r.Detail)
	}
}

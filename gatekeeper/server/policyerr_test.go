package server_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// TestPolicyErrorLogIsRedacted: a runtime error that quotes the input it
// failed on — here a dataset URI holding a credential — reaches the server
// log redacted, like the decision log, never verbatim.
func TestPolicyErrorLogIsRedacted(t *testing.T) {
	var active swappable
	h := newHostile(t, hostileOptions{policy: active.decider})
	e, err := handMade(t, `decision := {"allow": to_number(input.manifest.data[0].uri) > 0, "violations": []}`, 0)
	if err != nil {
		t.Fatal(err)
	}
	active.p.Store(e)
	var doc map[string]any
	if err := json.Unmarshal(h.m.Raw, &doc); err != nil {
		t.Fatal(err)
	}
	const secret = "https://trainer:hunter2hunter2@data.example.com/shard/"
	doc["data"].([]any)[0].(map[string]any)["uri"] = secret
	raw, _ := json.Marshal(doc)
	f := h.fixtureFor(t, raw)
	m, err := h.runner.SignManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	r := h.admit(t, h.body(t, f, map[string]any{"manifest": base64.StdEncoding.EncodeToString(m.Raw), "manifest_signature": m.Signature}))
	h.expect(t, r, want{http.StatusServiceUnavailable, api.CodePolicyEvaluationFailed})
	if !strings.Contains(h.logs.String(), "policy evaluation failed") || strings.Contains(h.logs.String(), "hunter2") {
		t.Fatalf("server log: %s", h.logs.String())
	}
	h.finish(t)
}

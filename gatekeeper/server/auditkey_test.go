package server_test

import (
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/decisionlog"
)

// TestSecretShapedKeyIsAudited: an allowed admission whose idempotency key
// looks like a JWT or an AWS key id is admitted, stored, and has its
// decision-log event (the key redacted, its SHA-256 kept), so no caller can
// hide a run from the audit log and from replay by choosing such a key. The
// key is in neither log.
func TestSecretShapedKeyIsAudited(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	keys := []string{"eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLXg", "AKIAIOSFODNN7EXAMPLE"}
	decisions := map[string]string{}
	for _, key := range keys {
		f := h.fixture(t)
		f.key = key
		r := h.admit(t, h.body(t, f, nil))
		if r.status != 200 || r.data()["decision"] != "allow" {
			t.Fatalf("key %s: %d %s", key, r.status, r.raw)
		}
		decisions[r.data()["decision_id"].(string)] = key
	}
	h.dl.Close()
	if n := h.dl.Dropped("guard"); n != 0 {
		t.Fatalf("%d events dropped by the guard", n)
	}
	events, err := decisionlog.Read(strings.NewReader(h.dlog.String()))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, ev := range events {
		key, ok := decisions[ev.DecisionID]
		if !ok {
			continue
		}
		found++
		if ev.Result != "allow" || ev.IdempotencyKey != decisionlog.RedactKey(key) || ev.Input == nil {
			t.Errorf("event for key %s: result %s, key %q, input %v", key, ev.Result, ev.IdempotencyKey, ev.Input != nil)
		}
	}
	if found != len(keys) {
		t.Fatalf("%d of %d allowed admissions have a decision-log event", found, len(keys))
	}
	for _, key := range keys {
		if strings.Contains(h.dlog.String(), key) || strings.Contains(h.logs.String(), key) {
			t.Errorf("key %s written to a log", key)
		}
	}
}

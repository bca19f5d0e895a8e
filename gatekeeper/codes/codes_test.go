package codes

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/policies"
)

var update = flag.Bool("update", false, "rewrite docs/codes.md")

// TestCodesDocIsCurrent fails when docs/codes.md differs from what the policy
// METADATA and the Go code list generate (`make codes`, or go test -update).
func TestCodesDocIsCurrent(t *testing.T) {
	pc, err := FromPolicy(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	want := Markdown(pc, api.Registry())
	path := filepath.Join("..", "..", "docs", "codes.md")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/codes.md is stale: run `make codes` (or go test ./gatekeeper/codes -update)")
	}
}

// TestEveryPolicyCodeIsWellFormed: UPPER_SNAKE, a gate, a meaning, and no
// code claimed by both the policy and Go with different meanings.
func TestEveryPolicyCodeIsWellFormed(t *testing.T) {
	pc, err := FromPolicy(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if len(pc) < 30 {
		t.Fatalf("only %d policy codes found; METADATA not read?", len(pc))
	}
	upper := regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)
	gates := map[string]bool{"entitlement": true, "confirmation": true, "idempotency": true, "budget": true,
		"data": true, "parallelism": true, "manifest": true, "admission": true, "caller": true, "booking": true, "workload": true,
		"lifecycle": true, "checkpoint": true, "datachecks": true, "rlvr": true}
	for _, e := range pc {
		levelOK := e.Level == "deny" || e.Level == "warn" || e.Level == "deny, warn"
		if !upper.MatchString(string(e.Code)) || !gates[e.Gate] || e.Meaning == "" || !levelOK {
			t.Errorf("policy code %+v", e)
		}
	}
	for _, e := range api.Registry() {
		if !upper.MatchString(string(e.Code)) {
			t.Errorf("go code %q malformed", e.Code)
		}
	}
}

package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/policies"
)

// input builds the policy input the server would for a fixture manifest.
func input(b testing.TB, name string) map[string]any {
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", name+".json"))
	if err != nil {
		b.Fatal(err)
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(1764403200, 0)
	ent := scenario.EntitlementClaims(doc, now)
	budget := doc["budget"].(map[string]any)
	v := map[string]any{"verified": true, "key_id": "k"}
	digest := manifest.Digest(raw)
	return map[string]any{
		"now": now.Unix(),
		"request": map[string]any{"action": "train.create", "booking_id": ent["booking_id"], "idempotency_key": "k1",
			"request_digest": digest, "run_id": "", "releases_booking": false},
		"caller":          map[string]any{"sub": "s", "account": ent["sub"], "key_id": "k"},
		"manifest_digest": digest, "manifest": doc,
		"verification": map[string]any{"caller": v, "manifest_signature": v, "entitlement": v, "confirmation": v},
		"entitlement":  ent,
		"confirmation": map[string]any{"ref": "cfr_00000000000000000000000000000000", "iss": "i", "aud": "itogate",
			"sub": ent["sub"], "iat": now.Unix(), "exp": now.Unix() + 600, "jti": "j", "act": "train.create",
			"booking_id": ent["booking_id"], "manifest_digest": digest, "cost_usd": budget["ceiling_usd"], "run_id": ""},
		"ledger": map[string]any{"confirmation_consumed": false, "idempotency": map[string]any{"seen": false, "same_request": false}},
	}
}

// BenchmarkDecide measures one evaluation of the embedded bundle per fixture:
// an allow (llama3-8b) and a deny that computes a fix (llama2-70b on V100).
func BenchmarkDecide(b *testing.B) {
	for _, name := range []string{"llama3-8b", "llama2-70b-v100-fsdp", "gpt3-175b-megatron"} {
		b.Run(name, func(b *testing.B) {
			e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			in := input(b, name)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Decide(context.Background(), in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

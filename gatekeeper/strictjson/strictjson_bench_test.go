package strictjson_test

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/strictjson"
	"github.com/itocompute/itogate/gatekeeper/token"
)

// BenchmarkDecodeAdmission decodes a real POST /v1/admissions body (the
// llama3-8b manifest in base64, its signature, a real entitlement token) as
// the server does: strictjson.DecodeObject with depth 8.
func BenchmarkDecodeAdmission(b *testing.B) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		b.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		b.Fatal(err)
	}
	d := keys.Dev()
	sig, err := token.SignManifest(d.ManifestECDSA.Private, raw)
	if err != nil {
		b.Fatal(err)
	}
	ent, err := token.Mint(d.Entitlement.Private, d.Entitlement.KeyID, d.Entitlement.Algorithm,
		config.TypeEntitlement, scenario.EntitlementClaims(doc, time.Now()))
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{
		"action": "train.create", "booking_id": scenario.Booking, "idempotency_key": "run-bench-000001",
		"manifest": base64.StdEncoding.EncodeToString(raw), "manifest_signature": sig,
		"entitlement_token": string(ent), "confirmation_ref": "cfr_5d0c0a8e4f5b4a7c9e1d2f3a4b5c6d7e",
	})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := strictjson.DecodeObject(body, 8); err != nil {
			b.Fatal(err)
		}
	}
}

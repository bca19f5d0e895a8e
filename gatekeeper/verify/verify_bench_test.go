//go:build unix

package verify_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// benchFixture is what one train.create admission verifies: a caller token,
// an entitlement and a confirmation (development keys, ES256) and the
// llama3-8b manifest signed with the ECDSA and Ed25519 development keys.
type benchFixture struct {
	set                          *trust.Set
	now                          time.Time
	caller, entitlement, confirm []byte
	manifest                     []byte
	ecdsaSig, ed25519Sig         string
}

func newBenchFixture(b *testing.B) benchFixture {
	b.Helper()
	set, err := trust.Dev()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		b.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		b.Fatal(err)
	}
	d, now := keys.Dev(), time.Now()
	mint := func(k keys.Key, typ string, claims map[string]any) []byte {
		c := map[string]any{"iat": now.Unix(), "exp": now.Unix() + 300, "jti": "jti_bench"}
		for key, v := range claims {
			c[key] = v
		}
		tok, err := token.Mint(k.Private, k.KeyID, k.Algorithm, typ, c)
		if err != nil {
			b.Fatal(err)
		}
		return tok
	}
	f := benchFixture{set: set, now: now, manifest: raw}
	f.caller = mint(d.Caller, "", map[string]any{
		"iss": trust.DevCallerIssuer, "aud": trust.DevAudience, "sub": "svc-demo-trainer", "account": scenario.Account,
	})
	f.entitlement = mint(d.Entitlement, config.TypeEntitlement, scenario.EntitlementClaims(doc, now))
	f.confirm = mint(d.Confirmation, config.TypeConfirmation, map[string]any{
		"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": scenario.Account,
		"act": "train.create", "booking_id": scenario.Booking, "manifest_digest": manifest.Digest(raw), "cost_usd": "2000.00",
	})
	if f.ecdsaSig, err = token.SignManifest(d.ManifestECDSA.Private, raw); err != nil {
		b.Fatal(err)
	}
	if f.ed25519Sig, err = token.SignManifest(d.ManifestEd25519.Private, raw); err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkTokenVerify is one Verify per token an admission carries.
func BenchmarkTokenVerify(b *testing.B) {
	f := newBenchFixture(b)
	for _, tc := range []struct {
		name string
		v    *verify.TokenVerifier
		tok  []byte
	}{
		{"caller", f.set.Callers, f.caller},
		{"entitlement", f.set.Entitlement, f.entitlement},
		{"confirmation", f.set.Confirmation, f.confirm},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := tc.v.Verify(tc.tok, f.now); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.v.Verify(tc.tok, f.now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkManifestVerify is the detached manifest signature check, per
// pinned algorithm (the development trust pins ECDSA P-256 then Ed25519).
func BenchmarkManifestVerify(b *testing.B) {
	f := newBenchFixture(b)
	for _, tc := range []struct{ name, sig string }{{"ecdsa-p256", f.ecdsaSig}, {"ed25519", f.ed25519Sig}} {
		b.Run(tc.name, func(b *testing.B) {
			if _, err := f.set.Manifests.Verify(f.manifest, tc.sig); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f.set.Manifests.Verify(f.manifest, tc.sig); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFloor is the verification work no admission can skip: caller,
// entitlement and confirmation tokens and the manifest signature (ECDSA),
// one of each per op. docs/performance.md calls this the floor.
func BenchmarkFloor(b *testing.B) {
	f := newBenchFixture(b)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		if _, err := f.set.Callers.Verify(f.caller, f.now); err != nil {
			b.Fatal(err)
		}
		if _, err := f.set.Entitlement.Verify(f.entitlement, f.now); err != nil {
			b.Fatal(err)
		}
		if _, err := f.set.Confirmation.Verify(f.confirm, f.now); err != nil {
			b.Fatal(err)
		}
		if _, err := f.set.Manifests.Verify(f.manifest, f.ecdsaSig); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is this process's user+system CPU time in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

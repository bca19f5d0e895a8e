//go:build unix

package verify_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
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
//
// The token verifiers are built here with the development trust settings,
// full (CacheEntries 0) and cached (CacheEntriesFor), so each benchmark
// measures what its name says whatever trust.Dev configures.
type benchFixture struct {
	set                                           *trust.Set
	fullCaller, fullEntitlement, fullConfirmation *verify.TokenVerifier
	cachedCaller, cachedEntitlement               *verify.TokenVerifier
	now                                           time.Time
	caller, entitlement, confirm                  []byte
	manifest                                      []byte
	spread                                        [][]byte // 64 distinct entitlements
	ecdsaSig, ed25519Sig                          string
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
	cfg := trust.DevConfig()
	tv := func(p verify.Purpose, tt config.TokenTrust, k keys.Key, entries int) *verify.TokenVerifier {
		ks, err := k.KeySet()
		if err != nil {
			b.Fatal(err)
		}
		v, err := verify.NewTokenVerifier(verify.TokenOptions{
			Purpose: p, Issuer: tt.Issuer, Audience: tt.Audience, Type: tt.Type, Keys: ks,
			Leeway: time.Duration(tt.Leeway), RequireJTI: p != verify.PurposeCaller, CacheEntries: entries,
		})
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	f.fullCaller = tv(verify.PurposeCaller, cfg.Callers, d.Caller, 0)
	f.fullEntitlement = tv(verify.PurposeEntitlement, cfg.Entitlement, d.Entitlement, 0)
	f.fullConfirmation = tv(verify.PurposeConfirmation, cfg.Confirmation, d.Confirmation, 0)
	f.cachedCaller = tv(verify.PurposeCaller, cfg.Callers, d.Caller, verify.CacheEntriesFor(verify.PurposeCaller))
	f.cachedEntitlement = tv(verify.PurposeEntitlement, cfg.Entitlement, d.Entitlement, verify.CacheEntriesFor(verify.PurposeEntitlement))
	f.caller = mint(d.Caller, "", map[string]any{
		"iss": trust.DevCallerIssuer, "aud": trust.DevAudience, "sub": "svc-demo-trainer", "account": scenario.Account,
	})
	f.entitlement = mint(d.Entitlement, config.TypeEntitlement, scenario.EntitlementClaims(doc, now))
	for range 64 { // EntitlementClaims draws a new jti each time
		f.spread = append(f.spread, mint(d.Entitlement, config.TypeEntitlement, scenario.EntitlementClaims(doc, now)))
	}
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

// BenchmarkTokenVerify is one Verify per token an admission carries: a full
// verification, and for the tokens callers reuse (caller, entitlement) a
// cache hit ("-cached": hash, lookup, time checks and a deep copy of the
// claims) and a cache miss ("-miss": a one-entry cache fed two tokens in
// turn, so each op is a full verification, a copy stored and an eviction).
func BenchmarkTokenVerify(b *testing.B) {
	f := newBenchFixture(b)
	d := keys.Dev()
	ks, err := d.Entitlement.KeySet()
	if err != nil {
		b.Fatal(err)
	}
	cfg := trust.DevConfig().Entitlement
	oneEntry, err := verify.NewTokenVerifier(verify.TokenOptions{
		Purpose: verify.PurposeEntitlement, Issuer: cfg.Issuer, Audience: cfg.Audience, Type: cfg.Type,
		Keys: ks, RequireJTI: true, CacheEntries: 1,
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		v    *verify.TokenVerifier
		toks [][]byte
	}{
		{"caller", f.fullCaller, [][]byte{f.caller}},
		{"entitlement", f.fullEntitlement, [][]byte{f.entitlement}},
		{"confirmation", f.fullConfirmation, [][]byte{f.confirm}},
		{"caller-cached", f.cachedCaller, [][]byte{f.caller}},
		{"entitlement-cached", f.cachedEntitlement, [][]byte{f.entitlement}},
		{"entitlement-miss", oneEntry, [][]byte{f.entitlement, f.spread[0]}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for _, tok := range tc.toks {
				if _, err := tc.v.Verify(tok, f.now); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := tc.v.Verify(tc.toks[i%len(tc.toks)], f.now); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkTokenVerifyParallel is BenchmarkTokenVerify's cache hits from 16
// goroutines (8 per GOMAXPROCS on the 2-core reference machine; -cpu changes
// it): the cache's one mutex against the single-goroutine figure. "-spread"
// cycles 64 distinct tokens, so the goroutines hit different entries and
// move them in the recency list.
func BenchmarkTokenVerifyParallel(b *testing.B) {
	f := newBenchFixture(b)
	for _, tc := range []struct {
		name string
		v    *verify.TokenVerifier
		toks [][]byte
	}{
		{"entitlement-cached", f.cachedEntitlement, [][]byte{f.entitlement}},
		{"entitlement-cached-spread", f.cachedEntitlement, f.spread},
		{"caller-cached", f.cachedCaller, [][]byte{f.caller}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for _, tok := range tc.toks {
				if _, err := tc.v.Verify(tok, f.now); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.SetParallelism(16 / max(1, runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := tc.v.Verify(tc.toks[i%len(tc.toks)], f.now); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
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

// BenchmarkFloor is the verification work of one admission: caller,
// entitlement and confirmation tokens and the manifest signature (ECDSA),
// one of each per op. docs/performance.md calls this the floor. "cold"
// verifies everything in full; "cached" is real traffic, where the caller
// and entitlement tokens repeat and hit the verification cache (times
// re-checked) while the confirmation and the manifest are new every time.
func BenchmarkFloor(b *testing.B) {
	f := newBenchFixture(b)
	for _, tc := range []struct {
		name                string
		caller, entitlement *verify.TokenVerifier
	}{
		{"cold", f.fullCaller, f.fullEntitlement},
		{"cached", f.cachedCaller, f.cachedEntitlement},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if _, err := tc.caller.Verify(f.caller, f.now); err != nil {
					b.Fatal(err)
				}
				if _, err := tc.entitlement.Verify(f.entitlement, f.now); err != nil {
					b.Fatal(err)
				}
				if _, err := f.fullConfirmation.Verify(f.confirm, f.now); err != nil {
					b.Fatal(err)
				}
				if _, err := f.set.Manifests.Verify(f.manifest, f.ecdsaSig); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is this process's user+system CPU time in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

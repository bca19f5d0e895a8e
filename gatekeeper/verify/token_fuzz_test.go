package verify_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/fixtures/signatures"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// signES256 signs input as JWS ES256 (r||s) without a *testing.T.
func signES256(priv *ecdsa.PrivateKey, input []byte) []byte {
	sum := sha256.Sum256(input)
	r, s, err := ecdsa.Sign(rand.Reader, priv, sum[:])
	if err != nil {
		panic(err)
	}
	out := make([]byte, 64)
	r.FillBytes(out[:32])
	s.FillBytes(out[32:])
	return out
}

// FuzzSignedTokenVerify fuzzes the JOSE header and the claims of a token
// that is always correctly signed with the configured entitlement key, so
// the fuzzer explores everything behind the signature: header checks, alg
// and kid resolution, typ, strict claims decoding, dates. Invariants: every
// failure is a *verify.Error; a success means the header named the
// configured key and alg, carried no forbidden member and the right typ,
// and the claims are exactly what encoding/json reads from the payload,
// with the configured issuer and audience and a valid exp.
func FuzzSignedTokenVerify(f *testing.F) {
	dev := keys.Dev()
	priv := dev.Entitlement.Private.(*ecdsa.PrivateKey)
	goodHdr, _ := json.Marshal(baseHeader())
	goodClaims, _ := json.Marshal(baseClaims())
	f.Add(goodHdr, goodClaims)
	f.Add([]byte(`{"alg":"ES256","kid":"dev-entitlement-1","typ":"ito-entitlement+jwt","alg":"none"}`), goodClaims)
	f.Add([]byte(`{"alg":"ES256","kid":"dev-entitlement-1","typ":"ito-entitlement+jwt","jwk":{}}`), goodClaims)
	f.Add(goodHdr, []byte(`{"iss":"https://backend.ito.test","aud":"itogate","iat":1799999990,"exp":1800000300,"jti":"j","exp":4102444800}`))
	f.Add(goodHdr, []byte(`{"iss":"https://backend.ito.test","aud":["x","itogate"],"iat":1799999990.5,"exp":1.8000003e9,"jti":"j"}`))
	set, err := dev.Entitlement.KeySet()
	if err != nil {
		f.Fatal(err)
	}
	v, err := verify.NewTokenVerifier(verify.TokenOptions{
		Purpose: verify.PurposeEntitlement, Issuer: testIssuer, Audience: testAudience, Type: testTyp, Keys: set,
		RequireJTI: true,
	})
	if err != nil {
		f.Fatal(err)
	}
	cached, err := verify.NewTokenVerifier(verify.TokenOptions{
		Purpose: verify.PurposeEntitlement, Issuer: testIssuer, Audience: testAudience, Type: testTyp, Keys: set,
		RequireJTI: true, CacheEntries: 64,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, hdr, payload []byte) {
		input := base64.RawURLEncoding.EncodeToString(hdr) + "." + base64.RawURLEncoding.EncodeToString(payload)
		raw := []byte(input + "." + base64.RawURLEncoding.EncodeToString(signES256(priv, []byte(input))))
		c, err := v.Verify(raw, now)
		// The cache changes no result: at now, then (a hit, when now
		// succeeded) one nanosecond either side of each time edge.
		cc, cerr := cached.Verify(raw, now)
		sameResult(t, cc, cerr, c, err)
		if err == nil {
			lee := verify.DefaultLeeway
			for _, edge := range []time.Time{c.Expiry.Add(lee), c.NotBefore.Add(-lee), c.IssuedAt.Add(-lee)} {
				for _, at := range []time.Time{edge.Add(-time.Nanosecond), edge} {
					if _, err := cached.Verify(raw, now); err != nil { // keep it cached
						t.Fatalf("cached verification at now: %v", err)
					}
					cc, cerr := cached.Verify(raw, at)
					pc, perr := v.Verify(raw, at)
					sameResult(t, cc, cerr, pc, perr)
				}
			}
		}
		if err != nil {
			k, ok := verify.KindOf(err)
			if !ok {
				t.Fatalf("error %v (%T) is not a *verify.Error", err, err)
			}
			if k == verify.KindSignature {
				// The signature is always valid here: a header the
				// checks let through but jwx refuses must not pass for
				// a bad signature.
				t.Fatalf("a validly signed token failed as %v (header %s)", err, hdr)
			}
			for _, part := range tokenParts(raw) {
				if len(part) >= 16 && strings.Contains(err.Error(), part) {
					t.Fatalf("error %q leaks token bytes", err)
				}
			}
			return
		}
		var h map[string]any
		if err := json.Unmarshal(hdr, &h); err != nil {
			t.Fatalf("accepted a header encoding/json refuses: %v", err)
		}
		if h["alg"] != "ES256" || h["kid"] != keys.EntitlementKeyID || c.KeyID != keys.EntitlementKeyID {
			t.Fatalf("accepted header %s", hdr)
		}
		if typ, _ := h["typ"].(string); !strings.EqualFold(strings.TrimPrefix(strings.ToLower(typ), "application/"), testTyp) {
			t.Fatalf("accepted typ %q", typ)
		}
		for _, name := range []string{"jwk", "jku", "x5u", "x5c", "crit", "b64", "zip", "enc"} {
			if _, ok := h[name]; ok {
				t.Fatalf("accepted forbidden header %s", name)
			}
		}
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.UseNumber()
		var std map[string]any
		if err := dec.Decode(&std); err != nil {
			t.Fatalf("accepted claims encoding/json refuses: %v", err)
		}
		if len(std) != len(c.Raw) {
			t.Fatalf("claims differ: %v vs %v", c.Raw, std)
		}
		for k := range std {
			if _, ok := c.Raw[k]; !ok {
				t.Fatalf("claim %q missing from the verified claims", k)
			}
		}
		if c.Issuer != testIssuer || !contains(c.Audience, testAudience) || !now.Before(c.Expiry.Add(verify.DefaultLeeway)) {
			t.Fatalf("accepted claims %+v", c)
		}
		if !reflect.DeepEqual(std["iss"], c.Raw["iss"]) {
			t.Fatalf("iss differs: %v vs %v", std["iss"], c.Raw["iss"])
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// FuzzManifestVerify fuzzes the manifest bytes and the signature string.
// Invariants: every failure is a *verify.Error of purpose manifest; a
// success names a pinned signer and the standard library independently
// verifies the same DER ECDSA (or Ed25519) signature over the same bytes
// with that signer's key.
func FuzzManifestVerify(f *testing.F) {
	dev := keys.Dev()
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, k := range []keys.Key{dev.ManifestECDSA, dev.ManifestEd25519} {
		sig, err := token.SignManifest(k.Private, raw)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw, sig)
		f.Add(raw, sig+"\n")
	}
	cosignSig, err := signatures.Signature("llama3-8b.json.cosign.sig")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw, cosignSig)
	f.Add([]byte("{}"), base64.StdEncoding.EncodeToString(make([]byte, 64)))
	cosignPub, err := verify.LoadPublicKeyPEM(signatures.CosignPublicKeyPEM())
	if err != nil {
		f.Fatal(err)
	}
	pinned := map[string]any{
		dev.ManifestECDSA.KeyID: dev.ManifestECDSA.Public, dev.ManifestEd25519.KeyID: dev.ManifestEd25519.Public,
		signatures.CosignKeyID: cosignPub,
	}
	mv, err := verify.NewManifestVerifier([]verify.Signer{
		dev.ManifestECDSA.Signer(), dev.ManifestEd25519.Signer(), {KeyID: signatures.CosignKeyID, PublicKey: cosignPub},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, manifest []byte, sig string) {
		keyID, err := mv.Verify(manifest, sig)
		if err != nil {
			var ve *verify.Error
			if k, ok := verify.KindOf(err); !ok || k == 0 || !asManifestErr(err, &ve) {
				t.Fatalf("error %v (%T) is not a manifest *verify.Error", err, err)
			}
			return
		}
		b, derr := base64.StdEncoding.DecodeString(strings.TrimSpace(sig))
		if derr != nil {
			t.Fatalf("accepted a signature that is not base64: %q", sig)
		}
		switch pub := pinned[keyID].(type) {
		case *ecdsa.PublicKey:
			var rs struct{ R, S *big.Int }
			if rest, err := asn1.Unmarshal(b, &rs); err != nil || len(rest) != 0 {
				t.Fatalf("accepted a non-DER ECDSA signature %x", b)
			}
			sum := sha256.Sum256(manifest)
			if !ecdsa.VerifyASN1(pub, sum[:], b) {
				t.Fatalf("accepted a signature crypto/ecdsa refuses (signer %s)", keyID)
			}
		case ed25519.PublicKey:
			if !ed25519.Verify(pub, manifest, b) {
				t.Fatalf("accepted a signature crypto/ed25519 refuses (signer %s)", keyID)
			}
		default:
			t.Fatalf("verified by unknown signer %q", keyID)
		}
	})
}

func asManifestErr(err error, ve **verify.Error) bool {
	e, ok := err.(*verify.Error)
	if ok {
		*ve = e
	}
	return ok && e.Purpose == verify.PurposeManifest
}

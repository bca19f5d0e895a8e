package verify_test

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// TestManifestVerifyRefusesRawRS: sigstore's ECDSA verifier also accepts the
// IEEE P1363 form (raw r||s) of a signature; cosign writes ASN.1 DER and the
// contract is one encoding, so the same (r, s) as r||s is refused — and so
// are DER encodings with trailing bytes.
func TestManifestVerifyRefusesRawRS(t *testing.T) {
	dev := keys.Dev()
	manifest := readManifest(t)
	mv, err := verify.NewManifestVerifier([]verify.Signer{dev.ManifestECDSA.Signer(), dev.ManifestEd25519.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(manifest)
	r, s, err := ecdsa.Sign(rand.Reader, dev.ManifestECDSA.Private.(*ecdsa.PrivateKey), sum[:])
	if err != nil {
		t.Fatal(err)
	}
	der, err := ecdsa.SignASN1(rand.Reader, dev.ManifestECDSA.Private.(*ecdsa.PrivateKey), sum[:])
	if err != nil {
		t.Fatal(err)
	}
	if id, err := mv.Verify(manifest, base64.StdEncoding.EncodeToString(der)); err != nil || id != dev.ManifestECDSA.KeyID {
		t.Fatalf("DER: %q, %v", id, err)
	}
	rs := make([]byte, 64)
	r.FillBytes(rs[:32])
	s.FillBytes(rs[32:])
	for name, sig := range map[string][]byte{
		"raw r||s":         rs,
		"raw r||s, 66+66":  append(append(make([]byte, 34), rs[:32]...), append(make([]byte, 34), rs[32:]...)...),
		"DER + 1 byte":     append(append([]byte(nil), der...), 0),
		"DER, long length": append([]byte{0x30, 0x81, byte(len(der) - 2)}, der[2:]...),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := mv.Verify(manifest, base64.StdEncoding.EncodeToString(sig))
			wantKind(t, err, verify.PurposeManifest, verify.KindSignature)
		})
	}
}

// TestLoadJWKSRefusesAmbiguousDocuments: a JWKS is decoded strictly before
// jwk.Parse, which resolves duplicate members last-wins.
func TestLoadJWKSRefusesAmbiguousDocuments(t *testing.T) {
	dev := keys.Dev()
	k, err := jwk.Import(dev.Entitlement.Public)
	if err != nil {
		t.Fatal(err)
	}
	_ = k.Set(jwk.KeyIDKey, "e1")
	_ = k.Set(jwk.AlgorithmKey, "ES256")
	key, _ := json.Marshal(k)
	good := `{"keys":[` + string(key) + `]}`
	if _, err := verify.LoadJWKS([]byte(good)); err != nil {
		t.Fatalf("good JWKS: %v", err)
	}
	for name, doc := range map[string]string{
		"duplicate keys":      `{"keys":[],` + good[1:],
		"duplicate alg":       `{"keys":[{"alg":"ES384",` + string(key[1:]) + `]}`,
		"duplicate kid":       `{"keys":[{"kid":"other",` + string(key[1:]) + `]}`,
		"case-variant member": `{"KEYS":[],` + good[1:],
		"trailing document":   good + `{"keys":[]}`,
		"not an object":       `[` + good + `]`,
		"invalid UTF-8":       `{"keys":[],"x":"` + "\xff" + `"}`,
		"number beyond float": `{"keys":[` + string(key[:len(key)-1]) + `,"n":1e400}]}`,
	} {
		if _, err := verify.LoadJWKS([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE") {
			t.Errorf("%s: error echoes key bytes: %v", name, err)
		}
	}
}

package verify_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

func readManifest(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", "llama3-8b.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestManifestVerify(t *testing.T) {
	dev := keys.Dev()
	manifest := readManifest(t)
	changed := append([]byte(nil), manifest...)
	changed[len(changed)/2] ^= 0x20

	sign := func(k keys.Key, m []byte) string {
		s, err := token.SignManifest(k.Private, m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ecSig := sign(dev.ManifestECDSA, manifest)
	edSig := sign(dev.ManifestEd25519, manifest)
	otherSig := sign(dev.Entitlement, manifest) // a P-256 key that is not a manifest signer

	both, err := verify.NewManifestVerifier([]verify.Signer{dev.ManifestECDSA.Signer(), dev.ManifestEd25519.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	ecOnly, err := verify.NewManifestVerifier([]verify.Signer{dev.ManifestECDSA.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	rawSig, _ := base64.StdEncoding.DecodeString(ecSig)

	tests := []struct {
		name     string
		v        *verify.ManifestVerifier
		manifest []byte
		sig      string
		wantKey  string
		want     verify.Kind
	}{
		{"ECDSA", both, manifest, ecSig, keys.ManifestECDSAKeyID, 0},
		{"Ed25519", both, manifest, edSig, keys.ManifestEd25519KeyID, 0},
		{"trailing newline as cosign files may have", both, manifest, ecSig + "\n", keys.ManifestECDSAKeyID, 0},
		{"surrounding whitespace", both, manifest, "  " + edSig + "\r\n", keys.ManifestEd25519KeyID, 0},
		{"ECDSA one byte changed", both, changed, ecSig, "", verify.KindSignature},
		{"Ed25519 one byte changed", both, changed, edSig, "", verify.KindSignature},
		{"one byte appended", both, append(append([]byte(nil), manifest...), '\n'), ecSig, "", verify.KindSignature},
		{"empty manifest", both, nil, ecSig, "", verify.KindSignature},
		{"Ed25519 signature against ECDSA key", ecOnly, manifest, edSig, "", verify.KindSignature},
		{"signature by a non-manifest key", both, manifest, otherSig, "", verify.KindSignature},
		{"all-zero 64 bytes", both, manifest, base64.StdEncoding.EncodeToString(make([]byte, 64)), "", verify.KindSignature},
		{"all-zero 72 bytes", both, manifest, base64.StdEncoding.EncodeToString(make([]byte, 72)), "", verify.KindSignature},
		{"DER signature with trailing byte", both, manifest, base64.StdEncoding.EncodeToString(append(append([]byte(nil), rawSig...), 0)), "", verify.KindSignature},
		{"bad base64", both, manifest, "not base64!", "", verify.KindMalformed},
		{"unpadded", both, manifest, strings.TrimRight(edSig, "="), "", verify.KindMalformed},
		{"newline inside", both, manifest, ecSig[:10] + "\n" + ecSig[10:], "", verify.KindMalformed},
		{"empty", both, manifest, "", "", verify.KindMalformed},
		{"whitespace only", both, manifest, " \n", "", verify.KindMalformed},
		{"longer than 1 KiB", both, manifest, strings.Repeat("A", verify.MaxSignatureChars+4), "", verify.KindMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := tc.v.Verify(tc.manifest, tc.sig)
			if tc.want == 0 {
				if err != nil || got != tc.wantKey {
					t.Fatalf("Verify = %q, %v; want %q", got, err, tc.wantKey)
				}
				return
			}
			if got != "" {
				t.Fatalf("key id %q returned with an error", got)
			}
			wantKind(t, err, verify.PurposeManifest, tc.want, strings.TrimSpace(tc.sig))
		})
	}
}

func TestManifestVerifyRejectsURLAlphabet(t *testing.T) {
	// A base64url signature differs from standard base64 only where it
	// holds '-' or '_'; find a signature with '+' or '/' and convert it.
	dev := keys.Dev()
	v, err := verify.NewManifestVerifier([]verify.Signer{dev.ManifestEd25519.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		m := []byte{byte(i)}
		sig, err := token.SignManifest(dev.ManifestEd25519.Private, m)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.ContainsAny(sig, "+/") {
			continue
		}
		_, err = v.Verify(m, strings.NewReplacer("+", "-", "/", "_").Replace(sig))
		wantKind(t, err, verify.PurposeManifest, verify.KindMalformed)
		return
	}
	t.Fatal("no signature with '+' or '/' found")
}

func TestNewManifestVerifierErrors(t *testing.T) {
	dev := keys.Dev()
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		signers []verify.Signer
	}{
		{"none", nil},
		{"empty key id", []verify.Signer{{PublicKey: dev.ManifestECDSA.Public}}},
		{"duplicate key id", []verify.Signer{dev.ManifestECDSA.Signer(), {KeyID: keys.ManifestECDSAKeyID, PublicKey: dev.ManifestEd25519.Public}}},
		{"P-384", []verify.Signer{{KeyID: "p384", PublicKey: p384.Public()}}},
		{"RSA", []verify.Signer{{KeyID: "rsa", PublicKey: dev.Bundle.Public}}},
		{"private key", []verify.Signer{{KeyID: "priv", PublicKey: dev.ManifestECDSA.Private}}},
		{"nil key", []verify.Signer{{KeyID: "nil"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := verify.NewManifestVerifier(tc.signers); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

func TestLoadPublicKeyPEM(t *testing.T) {
	dev := keys.Dev()
	pub := dev.ManifestECDSA.PublicPEM
	certLike := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{0x30, 0x00}})
	withHeaders := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: mustDER(t, dev.ManifestECDSA.Public)})
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rsa1024 := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: mustDER(t, small.Public())})
	tests := []struct {
		name    string
		data    []byte
		wantErr bool
	}{
		{"ECDSA", pub, false},
		{"Ed25519", dev.ManifestEd25519.PublicPEM, false},
		{"RSA 2048", dev.Bundle.PublicPEM, false},
		{"surrounding whitespace", append(append([]byte("\n  "), pub...), "\n\n"...), false},
		{"two blocks", append(append([]byte(nil), pub...), dev.ManifestEd25519.PublicPEM...), true},
		{"trailing garbage", append(append([]byte(nil), pub...), "garbage\n"...), true},
		{"leading garbage", append([]byte("comment\n"), pub...), true},
		{"private key", dev.ManifestECDSA.PrivatePEM, true},
		{"certificate block", certLike, true},
		{"PEM headers", withHeaders, true},
		{"RSA 1024", rsa1024, true},
		{"empty", nil, true},
		{"truncated", pub[:len(pub)/2], true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := verify.LoadPublicKeyPEM(tc.data)
			if (err != nil) != tc.wantErr {
				t.Fatalf("LoadPublicKeyPEM = %T, %v; wantErr %v", k, err, tc.wantErr)
			}
			if err != nil && len(tc.data) > 40 && strings.Contains(err.Error(), string(tc.data[30:40])) {
				t.Fatalf("error leaks input: %v", err)
			}
		})
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "k.pub.pem")
	if err := os.WriteFile(path, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := verify.LoadPublicKeyPEMFile(path); err != nil {
		t.Fatalf("LoadPublicKeyPEMFile: %v", err)
	}
	if _, err := verify.LoadPublicKeyPEMFile(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file: want error")
	}
}

func TestFingerprint(t *testing.T) {
	dev := keys.Dev()
	der := mustDER(t, dev.Entitlement.Public)
	sum := sha256.Sum256(der)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := verify.Fingerprint(dev.Entitlement.Public); got != want {
		t.Fatalf("Fingerprint = %q, want %q", got, want)
	}
	if got := verify.Fingerprint(dev.Entitlement.Private); got != want {
		t.Fatalf("Fingerprint(private) = %q, want the public key's %q", got, want)
	}
	if got := verify.Fingerprint(dev.Confirmation.Public); got == want {
		t.Fatal("two keys share a fingerprint")
	}
	if got := verify.Fingerprint("not a key"); got != "" {
		t.Fatalf("Fingerprint(string) = %q, want empty", got)
	}
	set, err := dev.Entitlement.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	k, _ := set.Key(0)
	if got, err := verify.FingerprintJWK(k); err != nil || got != want {
		t.Fatalf("FingerprintJWK = %q, %v", got, err)
	}
}

func TestLoadJWKSAndKeySetFromPEM(t *testing.T) {
	dev := keys.Dev()
	jwks := func(members ...string) []byte {
		return []byte(`{"keys":[` + strings.Join(members, ",") + `]}`)
	}
	ecPub := func(extra string) string {
		k := dev.Entitlement.Public.(*ecdsa.PublicKey)
		x, y := make([]byte, 32), make([]byte, 32)
		k.X.FillBytes(x)
		k.Y.FillBytes(y)
		return `{"kty":"EC","crv":"P-256","x":"` + b64(x) + `","y":"` + b64(y) + `"` + extra + `}`
	}
	ecPriv := func() string {
		k := dev.Entitlement.Private.(*ecdsa.PrivateKey)
		d := make([]byte, 32)
		k.D.FillBytes(d)
		return strings.TrimSuffix(ecPub(`,"kid":"p","alg":"ES256"`), "}") + `,"d":"` + b64(d) + `"}`
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr bool
	}{
		{"public with kid and alg", jwks(ecPub(`,"kid":"a","alg":"ES256","use":"sig"`)), false},
		{"no alg", jwks(ecPub(`,"kid":"a"`)), true},
		{"no kid", jwks(ecPub(`,"alg":"ES256"`)), true},
		{"HS256 alg on EC key", jwks(ecPub(`,"kid":"a","alg":"HS256"`)), true},
		{"private", jwks(ecPriv()), true},
		{"symmetric", jwks(`{"kty":"oct","k":"c2VjcmV0","kid":"s","alg":"HS256"}`), true},
		{"duplicate kid", jwks(ecPub(`,"kid":"a","alg":"ES256"`), ecPub(`,"kid":"a","alg":"ES256"`)), true},
		{"empty set", jwks(), true},
		{"not JSON", []byte("keys"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			set, err := verify.LoadJWKS(tc.data)
			if (err != nil) != tc.wantErr {
				t.Fatalf("LoadJWKS = %v, %v; wantErr %v", set, err, tc.wantErr)
			}
		})
	}

	for _, tc := range []struct {
		name, kid, alg string
		pem            []byte
		wantErr        bool
	}{
		{"ES256", "k", "ES256", dev.Entitlement.PublicPEM, false},
		{"EdDSA", "k", "EdDSA", dev.ManifestEd25519.PublicPEM, false},
		{"RS256", "k", "RS256", dev.Bundle.PublicPEM, false},
		{"ES384 on P-256", "k", "ES384", dev.Entitlement.PublicPEM, true},
		{"HS256", "k", "HS256", dev.Entitlement.PublicPEM, true},
		{"none", "k", "none", dev.Entitlement.PublicPEM, true},
		{"empty kid", "", "ES256", dev.Entitlement.PublicPEM, true},
		{"private PEM", "k", "ES256", dev.Entitlement.PrivatePEM, true},
	} {
		t.Run("KeySetFromPEM/"+tc.name, func(t *testing.T) {
			set, err := verify.KeySetFromPEM(tc.kid, tc.alg, tc.pem)
			if (err != nil) != tc.wantErr {
				t.Fatalf("KeySetFromPEM = %v, %v; wantErr %v", set, err, tc.wantErr)
			}
			if err != nil {
				return
			}
			k, _ := set.Key(0)
			if kid, _ := k.KeyID(); kid != tc.kid {
				t.Errorf("kid = %q", kid)
			}
			if alg, _ := k.Algorithm(); alg.String() != tc.alg {
				t.Errorf("alg = %v", alg)
			}
		})
	}
}

func mustDER(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

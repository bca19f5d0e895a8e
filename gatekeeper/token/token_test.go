package token_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

func TestMintVerifies(t *testing.T) {
	dev := keys.Dev()
	now := time.Unix(1_800_000_000, 0)
	claims := map[string]any{
		"iss": "https://desk.ito.test", "aud": "itogate", "sub": "acct_1", "jti": "c-1",
		"iat": now.Unix(), "exp": now.Unix() + 900, "act": "train.create",
	}
	for _, tc := range []struct {
		key keys.Key
		typ string
	}{
		{dev.Confirmation, "ito-confirmation+jwt"},
		{dev.ManifestEd25519, ""},
		{dev.Bundle, "JWT"},
	} {
		t.Run(tc.key.KeyID, func(t *testing.T) {
			raw, err := token.Mint(tc.key.Private, tc.key.KeyID, tc.key.Algorithm, tc.typ, claims)
			if err != nil {
				t.Fatal(err)
			}
			hdrB64, _, _ := strings.Cut(string(raw), ".")
			hdrJSON, err := base64.RawURLEncoding.DecodeString(hdrB64)
			if err != nil {
				t.Fatal(err)
			}
			var hdr map[string]any
			if err := json.Unmarshal(hdrJSON, &hdr); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"alg": tc.key.Algorithm, "kid": tc.key.KeyID}
			if tc.typ != "" {
				want["typ"] = tc.typ
			}
			if len(hdr) != len(want) {
				t.Fatalf("header = %v, want exactly %v", hdr, want)
			}
			for k, v := range want {
				if hdr[k] != v {
					t.Fatalf("header[%s] = %v, want %v", k, hdr[k], v)
				}
			}
			set, err := tc.key.KeySet()
			if err != nil {
				t.Fatal(err)
			}
			v, err := verify.NewTokenVerifier(verify.TokenOptions{
				Purpose: verify.PurposeConfirmation, Issuer: "https://desk.ito.test", Audience: "itogate",
				Type: tc.typ, Keys: set, RequireJTI: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			c, err := v.Verify(raw, now)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if c.Raw["act"] != "train.create" || c.KeyID != tc.key.KeyID {
				t.Fatalf("claims = %+v", c)
			}
		})
	}
}

func TestMintRefuses(t *testing.T) {
	dev := keys.Dev()
	claims := map[string]any{"iss": "x"}
	for _, tc := range []struct {
		name, kid, alg string
	}{
		{"none", "k", "none"},
		{"None", "k", "None"},
		{"HS256", "k", "HS256"},
		{"unknown alg", "k", "XS256"},
		{"alg for another key type", "k", "EdDSA"},
		{"empty kid", "", "ES256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := token.Mint(dev.Caller.Private, tc.kid, tc.alg, "", claims); err == nil {
				t.Fatal("want error")
			}
		})
	}
	if _, err := token.Mint(nil, "k", "ES256", "", claims); err == nil {
		t.Fatal("nil key: want error")
	}
	if _, err := token.Mint(dev.Caller.Private, "k", "ES256", "", map[string]any{"f": func() {}}); err == nil {
		t.Fatal("unencodable claims: want error")
	}
}

func TestSignManifest(t *testing.T) {
	dev := keys.Dev()
	m := []byte(`{"schema":"ito.training/v1"}`)
	v, err := verify.NewManifestVerifier([]verify.Signer{dev.ManifestECDSA.Signer(), dev.ManifestEd25519.Signer()})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []keys.Key{dev.ManifestECDSA, dev.ManifestEd25519} {
		sig, err := token.SignManifest(k.Private, m)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := v.Verify(m, sig); err != nil || got != k.KeyID {
			t.Fatalf("Verify = %q, %v", got, err)
		}
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := token.SignManifest(p384, m); err == nil {
		t.Fatal("P-384: want error")
	}
	if _, err := token.SignManifest(dev.Bundle.Private, m); err == nil {
		t.Fatal("RSA: want error")
	}
}

func TestKeygen(t *testing.T) {
	ec, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	ed, err := token.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := token.GenerateRSA(2048)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := token.GenerateRSA(1024); err == nil {
		t.Fatal("RSA 1024: want error")
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		key  crypto.Signer
	}{{"ec", ec}, {"ed", ed}, {"rsa", rsaKey}} {
		t.Run(tc.name, func(t *testing.T) {
			privPath, pubPath, err := token.WriteKeyPair(dir, tc.name, tc.key)
			if err != nil {
				t.Fatal(err)
			}
			if privPath != filepath.Join(dir, tc.name+".key.pem") || pubPath != filepath.Join(dir, tc.name+".pub.pem") {
				t.Fatalf("paths = %s, %s", privPath, pubPath)
			}
			for path, mode := range map[string]os.FileMode{privPath: 0o600, pubPath: 0o644} {
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != mode {
					t.Errorf("%s mode = %v, want %v", path, fi.Mode().Perm(), mode)
				}
			}
			privPEM, _ := os.ReadFile(privPath)
			pubPEM, _ := os.ReadFile(pubPath)
			if !strings.HasPrefix(string(privPEM), "-----BEGIN PRIVATE KEY-----") {
				t.Errorf("private key is not PKCS#8 PEM")
			}
			priv, err := verify.LoadPrivateKeyPEM(privPEM)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := verify.LoadPublicKeyPEM(pubPEM)
			if err != nil {
				t.Fatal(err)
			}
			if verify.Fingerprint(pub) != verify.Fingerprint(tc.key.Public()) || verify.Fingerprint(priv) != verify.Fingerprint(pub) {
				t.Fatal("round trip changed the key")
			}
			if _, _, err := token.WriteKeyPair(dir, tc.name, tc.key); err == nil {
				t.Fatal("overwrite: want error")
			}
		})
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../x"} {
		if _, _, err := token.WriteKeyPair(dir, bad, ec); err == nil {
			t.Errorf("name %q: want error", bad)
		}
	}
	// A directory that does not exist yet is created, for the owner only.
	newDir := filepath.Join(dir, "keys", "release")
	if _, _, err := token.WriteKeyPair(newDir, "ec", ec); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(newDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created dir: %v, %v; want mode 0700", fi, err)
	}
}

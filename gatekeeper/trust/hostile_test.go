package trust

// Hostile trust files (issue 6): every ambiguity in what a key is, or in
// which algorithm it verifies, refuses the start — the process never runs
// with a trust set other than the one the operator meant.

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/token"
)

func pemOf(t *testing.T, typ string, der []byte) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func spki(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// jwksOf is a JWKS holding pub with the given members (nil removes one).
func jwksOf(t *testing.T, key any, members map[string]any) map[string]any {
	t.Helper()
	k, err := jwk.Import(key)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(k)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	m["kid"], m["alg"], m["use"] = "k1", "ES256", "sig"
	for name, v := range members {
		if v == nil {
			delete(m, name)
			continue
		}
		m[name] = v
	}
	return map[string]any{"keys": []any{m}}
}

// TestFromConfigRefusesHostileTrustFiles: several PEM blocks, trailing or
// leading data, PEM headers, certificates or private keys where a public
// key belongs, keys whose type disagrees with the configured algorithm,
// symmetric or private JWKs, ambiguous JWKS documents and negative leeways
// all refuse the start, and no error echoes key bytes.
func TestFromConfigRefusesHostileTrustFiles(t *testing.T) {
	t.Parallel()
	ec, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	ecPub := pemOf(t, "PUBLIC KEY", spki(t, &ec.PublicKey))
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "signer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ec.PublicKey, ec)
	if err != nil {
		t.Fatal(err)
	}
	privPEM, err := token.MarshalPrivateKeyPEM(ec)
	if err != nil {
		t.Fatal(err)
	}
	withHeaders := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"},
		Bytes: spki(t, &ec.PublicKey)})

	dir := t.TempDir()
	n := 0
	file := func(data []byte) string {
		n++
		p := filepath.Join(dir, "f"+strings.Repeat("x", n)+".pem")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jsonFile := func(v any) string {
		raw, _ := json.Marshal(v)
		return file(raw)
	}
	rawFile := func(s string) string { return file([]byte(s)) }
	signer := func(data []byte) func(*config.Trust) {
		return func(tr *config.Trust) { tr.ManifestSigners[0].PEMFile = file(data) }
	}
	entPEM := func(data []byte, alg string) func(*config.Trust) {
		return func(tr *config.Trust) {
			tr.Entitlement.PEMFile, tr.Entitlement.Algorithm = file(data), alg
		}
	}
	entJWKS := func(path string) func(*config.Trust) {
		return func(tr *config.Trust) {
			tr.Entitlement.PEMFile, tr.Entitlement.KeyID, tr.Entitlement.Algorithm = "", "", ""
			tr.Entitlement.JWKSFile = path
		}
	}
	good := jwksOf(t, &ec.PublicKey, nil)
	goodJSON, _ := json.Marshal(good)
	keyJSON, _ := json.Marshal(good["keys"].([]any)[0])

	for _, tc := range []struct {
		name string
		edit func(*config.Trust)
	}{
		{"signer PEM with two blocks", signer(append(append([]byte(nil), ecPub...), ecPub...))},
		{"signer PEM with a second, different block", signer(append(append([]byte(nil), ecPub...), pemOf(t, "PUBLIC KEY", spki(t, &rsaKey.PublicKey))...))},
		{"signer PEM with trailing data", signer(append(append([]byte(nil), ecPub...), "trailing"...))},
		{"signer PEM with leading data", signer(append([]byte("leading\n"), ecPub...))},
		{"signer PEM with headers", signer(withHeaders)},
		{"signer is a certificate", signer(pemOf(t, "CERTIFICATE", certDER))},
		{"signer PUBLIC KEY block holding a certificate", signer(pemOf(t, "PUBLIC KEY", certDER))},
		{"signer CERTIFICATE block holding a bare key", signer(pemOf(t, "CERTIFICATE", spki(t, &ec.PublicKey)))},
		{"signer is a private key", signer(privPEM)},
		{"signer is RSA", signer(pemOf(t, "PUBLIC KEY", spki(t, &rsaKey.PublicKey)))},
		{"signer is P-384", signer(pemOf(t, "PUBLIC KEY", spki(t, &p384.PublicKey)))},
		{"signer DER without armour", signer(spki(t, &ec.PublicKey))},
		{"signer empty", signer(nil)},
		{"entitlement Ed25519 key configured ES256", entPEM(pemOf(t, "PUBLIC KEY", spki(t, edPub)), "ES256")},
		{"entitlement P-256 key configured ES384", entPEM(ecPub, "ES384")},
		{"entitlement EC key configured RS256", entPEM(ecPub, "RS256")},
		{"entitlement RSA key configured ES256", entPEM(pemOf(t, "PUBLIC KEY", spki(t, &rsaKey.PublicKey)), "ES256")},
		{"entitlement EC key configured HS256", entPEM(ecPub, "HS256")},
		{"entitlement EC key configured none", entPEM(ecPub, "none")},
		{"entitlement EC key configured es256", entPEM(ecPub, "es256")},
		{"entitlement PEM with two blocks", entPEM(append(append([]byte(nil), ecPub...), ecPub...), "ES256")},
		{"entitlement certificate", entPEM(pemOf(t, "CERTIFICATE", certDER), "ES256")},
		{"JWKS symmetric key", entJWKS(jsonFile(map[string]any{"keys": []any{map[string]any{
			"kty": "oct", "kid": "k1", "alg": "HS256", "k": base64.RawURLEncoding.EncodeToString(ecPub)}}}))},
		{"JWKS private key", entJWKS(jsonFile(jwksOf(t, ec, nil)))},
		{"JWKS without alg", entJWKS(jsonFile(jwksOf(t, &ec.PublicKey, map[string]any{"alg": nil})))},
		{"JWKS alg HS256 on an EC key", entJWKS(jsonFile(jwksOf(t, &ec.PublicKey, map[string]any{"alg": "HS256"})))},
		{"JWKS alg ES384 on a P-256 key", entJWKS(jsonFile(jwksOf(t, &ec.PublicKey, map[string]any{"alg": "ES384"})))},
		{"JWKS alg RS256 on an EC key", entJWKS(jsonFile(jwksOf(t, &ec.PublicKey, map[string]any{"alg": "RS256"})))},
		{"JWKS without kid", entJWKS(jsonFile(jwksOf(t, &ec.PublicKey, map[string]any{"kid": nil})))},
		{"JWKS use enc", entJWKS(jsonFile(jwksOf(t, &ec.PublicKey, map[string]any{"use": "enc"})))},
		{"JWKS x5c holding a bare public key", entJWKS(jsonFile(jwksOf(t, &ec.PublicKey, map[string]any{
			"x5c": []string{base64.StdEncoding.EncodeToString(spki(t, &ec.PublicKey))}})))},
		{"JWKS duplicate kid", entJWKS(rawFile(`{"keys":[` + string(keyJSON) + `,` + string(keyJSON) + `]}`))},
		{"JWKS duplicate keys member", entJWKS(rawFile(`{"keys":[],` + string(goodJSON[1:])))},
		{"JWKS duplicate alg member", entJWKS(rawFile(`{"keys":[{"alg":"HS256",` + string(keyJSON[1:]) + `]}`))},
		{"JWKS case-variant member", entJWKS(rawFile(`{"Keys":[],` + string(goodJSON[1:])))},
		{"JWKS trailing data", entJWKS(rawFile(string(goodJSON) + `{"keys":[]}`))},
		{"JWKS empty", entJWKS(rawFile(`{"keys":[]}`))},
		{"negative leeway", func(tr *config.Trust) { tr.Callers.Leeway = config.Duration(-time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, _ := prodTrust(t)
			tc.edit(&tr)
			_, err := FromConfig(tr)
			if err == nil {
				t.Fatal("FromConfig accepted it")
			}
			for _, secret := range []string{pemBody(ecPub), pemBody(privPEM), base64.StdEncoding.EncodeToString(certDER)[:40]} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error echoes key bytes: %v", err)
				}
			}
		})
	}
	// The same skeleton with the good forms starts.
	for name, edit := range map[string]func(*config.Trust){
		"good PEM":                     entPEM(ecPub, "ES256"),
		"good PEM without newline":     entPEM([]byte(strings.TrimSpace(string(ecPub))), "ES256"),
		"good JWKS":                    entJWKS(jsonFile(good)),
		"good Ed25519 manifest signer": signer(pemOf(t, "PUBLIC KEY", spki(t, edPub))),
	} {
		tr, _ := prodTrust(t)
		edit(&tr)
		if _, err := FromConfig(tr); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func pemBody(p []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(p), "\n") {
		if !strings.HasPrefix(line, "-----") {
			b.WriteString(line)
		}
	}
	return b.String()
}

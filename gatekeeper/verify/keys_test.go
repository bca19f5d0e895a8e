package verify_test

import (
	"bytes"
	"testing"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// TestLoadPrivateKeyPEM: exactly one PKCS#8 private key block, surrounding
// whitespace allowed; a public key, a second block, any other text or an
// oversized file is refused, and no error repeats the input.
func TestLoadPrivateKeyPEM(t *testing.T) {
	dev := keys.Dev()
	priv := dev.Caller.PrivatePEM
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"public key", dev.Caller.PublicPEM},
		{"two blocks", append(append([]byte(nil), priv...), priv...)},
		{"trailing garbage", append(append([]byte(nil), priv...), "x"...)},
		{"leading garbage", append([]byte("x\n"), priv...)},
		{"empty", nil},
		{"oversized", append(append([]byte(nil), priv...), bytes.Repeat([]byte("\n"), verify.MaxKeyFileBytes)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := verify.LoadPrivateKeyPEM(tc.data)
			if err == nil {
				t.Fatal("want error")
			}
			if len(tc.data) > 0 && bytes.Contains([]byte(err.Error()), bytes.TrimSpace(tc.data)[:40]) {
				t.Fatalf("error repeats the input: %v", err)
			}
		})
	}
	for _, k := range []keys.Key{dev.Caller, dev.ManifestEd25519, dev.Bundle} {
		s, err := verify.LoadPrivateKeyPEM(append([]byte("\n"), k.PrivatePEM...))
		if err != nil {
			t.Fatalf("%s with a leading newline: %v", k.File, err)
		}
		if verify.Fingerprint(s.Public()) != verify.Fingerprint(k.Public) {
			t.Fatalf("%s: parsed key does not match its public key", k.File)
		}
	}
}

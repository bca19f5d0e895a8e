package verify_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/verify"
)

// now is the fixed clock of every token test.
var now = time.Unix(1_800_000_000, 0).UTC()

const (
	testIssuer   = "https://backend.ito.test"
	testAudience = "itogate"
	testTyp      = "ito-entitlement+jwt"
)

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// compact builds header.payload.signature from raw JSON, signing the input
// with sign (nil → empty signature).
func compact(t *testing.T, hdr, payload []byte, sign func(input []byte) []byte) []byte {
	t.Helper()
	input := b64(hdr) + "." + b64(payload)
	var sig []byte
	if sign != nil {
		sig = sign([]byte(input))
	}
	return []byte(input + "." + b64(sig))
}

// es256 signs as JWS ES256: raw r||s, 32 bytes each.
func es256(t *testing.T, priv crypto.Signer) func([]byte) []byte {
	return func(input []byte) []byte {
		t.Helper()
		k, ok := priv.(*ecdsa.PrivateKey)
		if !ok {
			t.Fatalf("es256 needs *ecdsa.PrivateKey, got %T", priv)
		}
		sum := sha256.Sum256(input)
		r, s, err := ecdsa.Sign(rand.Reader, k, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		out := make([]byte, 64)
		r.FillBytes(out[:32])
		s.FillBytes(out[32:])
		return out
	}
}

func hs256(key []byte) func([]byte) []byte {
	return func(input []byte) []byte {
		m := hmac.New(sha256.New, key)
		m.Write(input)
		return m.Sum(nil)
	}
}

func eddsa(priv ed25519.PrivateKey) func([]byte) []byte {
	return func(input []byte) []byte { return ed25519.Sign(priv, input) }
}

func rs256(t *testing.T, priv *rsa.PrivateKey) func([]byte) []byte {
	return func(input []byte) []byte {
		t.Helper()
		sum := sha256.Sum256(input)
		sig, err := rsa.SignPKCS1v15(rand.Reader, priv, crypto.SHA256, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
}

// flip returns a copy of sig with its last byte changed.
func flip(sign func([]byte) []byte) func([]byte) []byte {
	return func(input []byte) []byte {
		sig := sign(input)
		out := append([]byte(nil), sig...)
		out[len(out)-1] ^= 0x01
		return out
	}
}

// wantKind fails unless err is a *verify.Error of purpose p and kind k whose
// message contains none of the secret strings.
func wantKind(t *testing.T, err error, p verify.Purpose, k verify.Kind, secrets ...string) {
	t.Helper()
	var ve *verify.Error
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v (%T), want *verify.Error kind %s", err, err, k)
	}
	if ve.Kind != k || ve.Purpose != p {
		t.Fatalf("err = %q (purpose %s kind %s), want purpose %s kind %s", err, ve.Purpose, ve.Kind, p, k)
	}
	if got, ok := verify.KindOf(err); !ok || got != k {
		t.Fatalf("KindOf = %s, %v", got, ok)
	}
	msg := err.Error()
	for _, s := range secrets {
		if len(s) >= 8 && strings.Contains(msg, s) {
			t.Fatalf("error message %q leaks input bytes", msg)
		}
	}
}

// tokenParts returns the dot-separated parts of raw, to check that error
// messages never contain them.
func tokenParts(raw []byte) []string { return strings.Split(string(raw), ".") }

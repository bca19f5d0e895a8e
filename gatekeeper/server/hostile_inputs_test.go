package server_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/token"
)

// ecdsaDER is the ASN.1 DER ECDSA-Sig-Value {r, s}.
func ecdsaDER(t *testing.T, r, s *big.Int) []byte {
	t.Helper()
	der, err := asn1.Marshal(struct{ R, S *big.Int }{r, s})
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// TestHostileManifestSignatures: a manifest signature that is zero, out of
// range, in another encoding, by an unpinned or another purpose's key, or
// over other bytes answers 403 MANIFEST_SIGNATURE_INVALID; a request that
// tries to bring its own key is 400 REQUEST_INVALID. The pinned signer
// keys always decide. Nothing is consumed and no signature is echoed.
func TestHostileManifestSignatures(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	raw := h.m.Raw
	n := elliptic.P256().Params().N
	sum := sha256.Sum256(raw)
	devECDSA := h.dev.ManifestECDSA.Private.(*ecdsa.PrivateKey)
	r, s, err := ecdsa.Sign(rand.Reader, devECDSA, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	validDER := ecdsaDER(t, r, s)
	rawRS := make([]byte, 64)
	r.FillBytes(rawRS[:32])
	s.FillBytes(rawRS[32:])

	// A valid signature whose standard base64 differs from its base64url
	// form, so the URL alphabet is really exercised.
	var urlForm string
	for i := 0; i < 200 && urlForm == ""; i++ {
		der, err := ecdsa.SignASN1(rand.Reader, devECDSA, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		std := base64.StdEncoding.EncodeToString(der)
		if u := base64.RawURLEncoding.EncodeToString(der); u != std {
			urlForm = u
			h.secret(std)
		}
	}
	edDev := h.dev.ManifestEd25519.Private.(ed25519.PrivateKey)
	edSig := ed25519.Sign(edDev, raw)
	// s + L: the same signature with a non-canonical scalar (malleability).
	l, _ := new(big.Int).SetString("7237005577332262213973186563042994240857116359379907606001950938285454250989", 10)
	sLE := edSig[32:]
	sBE := make([]byte, 32)
	for i := range sLE {
		sBE[31-i] = sLE[i]
	}
	sPlusL := new(big.Int).Add(new(big.Int).SetBytes(sBE), l).FillBytes(make([]byte, 32))
	nonCanonical := append(append([]byte(nil), edSig[:32]...), make([]byte, 32)...)
	for i := range sPlusL {
		nonCanonical[32+31-i] = sPlusL[i]
	}

	attackerKey, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	attackerSig, err := token.SignManifest(attackerKey, raw)
	if err != nil {
		t.Fatal(err)
	}
	_, attackerEd, _ := ed25519.GenerateKey(rand.Reader)
	entSig, err := token.SignManifest(h.dev.Entitlement.Private, raw)
	if err != nil {
		t.Fatal(err)
	}
	otherBytes, err := token.SignManifest(devECDSA, append(append([]byte(nil), raw...), '\n'))
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.StdEncoding.EncodeToString
	pemWrapped := string(pem.EncodeToMemory(&pem.Block{Type: "SIGNATURE", Bytes: validDER}))
	wrapped := b64(validDER)
	wrapped = wrapped[:40] + "\n" + wrapped[40:]
	bad := want{http.StatusForbidden, "MANIFEST_SIGNATURE_INVALID"}
	for _, tc := range []struct {
		name string
		sig  string
	}{
		{"all zero, 70 bytes", b64(make([]byte, 70))},
		{"all zero, 64 bytes (Ed25519 length)", b64(make([]byte, 64))},
		{"all zero, 1 byte", b64([]byte{0})},
		{"DER r = 0", b64(ecdsaDER(t, big.NewInt(0), s))},
		{"DER s = 0", b64(ecdsaDER(t, r, big.NewInt(0)))},
		{"DER r = s = 0", b64(ecdsaDER(t, big.NewInt(0), big.NewInt(0)))},
		{"DER r = n", b64(ecdsaDER(t, n, s))},
		{"DER s = n", b64(ecdsaDER(t, r, n))},
		{"DER r = r + n", b64(ecdsaDER(t, new(big.Int).Add(r, n), s))},
		{"DER s = s + n", b64(ecdsaDER(t, r, new(big.Int).Add(s, n)))},
		{"DER r negative", b64(ecdsaDER(t, new(big.Int).Neg(r), s))},
		{"DER r = s = 1", b64(ecdsaDER(t, big.NewInt(1), big.NewInt(1)))},
		{"DER r = s = n-1", b64(ecdsaDER(t, new(big.Int).Sub(n, big.NewInt(1)), new(big.Int).Sub(n, big.NewInt(1))))},
		{"DER with trailing bytes", b64(append(append([]byte(nil), validDER...), 0))},
		{"raw r and s (IEEE P1363) instead of DER", b64(rawRS)},
		{"base64url of a valid signature", urlForm},
		{"hex of a valid signature", hex.EncodeToString(validDER)},
		{"PEM-wrapped valid signature", pemWrapped},
		{"line-wrapped base64", wrapped},
		{"base64 without padding", strings.TrimRight(b64(validDER[:len(validDER)-1]), "=")},
		{"over the size limit", strings.Repeat("A", 2048)},
		{"empty", ""},
		{"whitespace only", " \n"},
		{"Ed25519 all zero", b64(make([]byte, 64))},
		{"Ed25519 non-canonical s (s+L)", b64(nonCanonical)},
		{"Ed25519 by an unpinned key", b64(ed25519.Sign(attackerEd, raw))},
		{"ECDSA by an unpinned key", attackerSig},
		{"ECDSA by the entitlement key (another purpose)", entSig},
		{"valid signature over other bytes", otherBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.secret(tc.sig)
			h.expect(t, h.admit(t, h.body(t, f, map[string]any{"manifest_signature": tc.sig})), bad, tc.sig)
			h.untouched(t, f.ref, f.key)
		})
	}
	// The request can never bring its own key or certificate: unknown field.
	attackerPEM, err := publicPEM(attackerKey.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{
		"manifest_public_key", "public_key", "manifest_signer", "signer_key_id", "key_id",
		"manifest_certificate", "certificate", "cert", "trusted_root", "rekor_bundle", "keys", "jwks",
	} {
		t.Run("request field "+field, func(t *testing.T) {
			r := h.admit(t, h.body(t, f, map[string]any{"manifest_signature": attackerSig, field: attackerPEM}))
			h.expect(t, r, want{http.StatusBadRequest, "REQUEST_INVALID"}, attackerSig)
			if !strings.Contains(r.message(), "unknown field") {
				t.Fatalf("message %q", r.message())
			}
			h.untouched(t, f.ref, f.key)
		})
	}
	t.Run("attacker-signed manifest alone", func(t *testing.T) {
		h.expect(t, h.admit(t, h.body(t, f, map[string]any{"manifest_signature": attackerSig})), bad, attackerSig)
		h.untouched(t, f.ref, f.key)
	})
	h.secret(attackerSig, entSig, otherBytes, b64(validDER), b64(rawRS), urlForm, hex.EncodeToString(validDER))
	h.allowed(t, f)
	h.finish(t)
}

func publicPEM(pub any) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), nil
}

// TestHostileManifestJSON: manifest bytes that are validly signed but not
// one unambiguous, schema-valid document are refused with
// MANIFEST_MALFORMED or MANIFEST_SCHEMA_INVALID (400) before the policy sees
// them — Go and Rego never see different values — and the manifest
// encoding and size are checked first.
func TestHostileManifestJSON(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	raw := string(h.m.Raw)
	replace := func(old, new string) string {
		t.Helper()
		if !strings.Contains(raw, old) {
			t.Fatalf("fixture changed: %q is gone", old)
		}
		return strings.Replace(raw, old, new, 1)
	}
	malformed := want{http.StatusBadRequest, "MANIFEST_MALFORMED"}
	schema := want{http.StatusBadRequest, "MANIFEST_SCHEMA_INVALID"}
	for _, tc := range []struct {
		name     string
		manifest string
		want     want
	}{
		{"duplicate top-level key", replace(`"schema": "ito.training/v1",`, `"schema": "ito.training/v1", "schema": "ito.training/v0",`), malformed},
		{"duplicate nested key with another value", replace(`"parameters": 8030000000,`, `"parameters": 8030000000, "parameters": 1,`), malformed},
		{"duplicate key in an array element", replace(`"pii": false,`, `"pii": false, "pii": true,`), malformed},
		{"case-variant key", replace(`"schema": "ito.training/v1",`, `"schema": "ito.training/v1", "Schema": "x",`), malformed},
		{"case-variant nested key", replace(`"nodes": 8,`, `"nodes": 8, "Nodes": 1,`), malformed},
		{"escaped key duplicating another", replace(`"nodes": 8,`, `"nodes": 8, "\u006eodes": 1,`), malformed},
		{"escaped key alone (same document once unescaped)", replace(`"nodes": 8,`, `"\u006eodes": 8,`), want{http.StatusOK, ""}},
		{"Kelvin-sign key folding onto another", replace(`"kv_heads": 8,`, `"kv_heads": 8, "\u212av_heads": 1,`), malformed},
		{"long-s key folding onto another", replace(`"schema": "ito.training/v1",`, `"schema": "ito.training/v1", "\u017fchema": "x",`), malformed},
		{"unknown field", replace(`"nodes": 8,`, `"nodes": 8, "signer": "attacker",`), schema},
		{"nested 40 deep", replace(`"pii": false,`, `"pii": false, "x": `+nest(40, "1")+`,`), malformed},
		{"nested 100000 deep", replace(`"pii": false,`, `"pii": false, "x": `+nest(100000, "")+`,`), malformed},
		{"parameters 1e400", replace(`"parameters": 8030000000,`, `"parameters": 1e400,`), malformed},
		{"parameters -1e400", replace(`"parameters": 8030000000,`, `"parameters": -1e400,`), malformed},
		{"parameters 99999999999999999999999", replace(`"parameters": 8030000000,`, `"parameters": 99999999999999999999999,`), schema},
		{"parameters 1e-400", replace(`"parameters": 8030000000,`, `"parameters": 1e-400,`), malformed},
		{"parameters 8.03e9 (integral, exponent form)", replace(`"parameters": 8030000000,`, `"parameters": 8.03e9,`), want{http.StatusOK, ""}},
		{"layers 32.5", replace(`"layers": 32,`, `"layers": 32.5,`), schema},
		{"eval gate min 1e400", replace(`"min": 0.25`, `"min": 1e400`), malformed},
		{"eval gate min -1e400", replace(`"min": 0.25`, `"min": -1e400`), malformed},
		{"eval gate min 1e-400 (underflows to 0 elsewhere)", replace(`"min": 0.25`, `"min": 1e-400`), malformed},
		{"eval gate min 0e-400 (zero)", replace(`"min": 0.25`, `"min": 0e-400`), want{http.StatusOK, ""}},
		{"tokens beyond int64", replace(`"tokens": 350000000000,`, `"tokens": 9223372036854775808,`), schema},
		{"invalid UTF-8 in a value", replace(`"llama3-8b-pretrain"`, "\"llama3-8b-\xff\xfe\""), malformed},
		{"invalid UTF-8 in a key", replace(`"source":`, "\"sour\xc0\xafce\":"), malformed},
		{"overlong UTF-8 slash", replace(`"llama3-8b-pretrain"`, "\"llama3\xc0\xaf8b\""), malformed},
		{"lone high surrogate", replace(`"llama3-8b-pretrain"`, `"llama3-\ud800"`), malformed},
		{"lone low surrogate", replace(`"llama3-8b-pretrain"`, `"llama3-\udc00"`), malformed},
		{"NUL escape in a key", replace(`"nodes": 8,`, `"nodes": 8, "no\u0000des": 1,`), schema},
		{"byte-order mark", "\xef\xbb\xbf" + raw, malformed},
		{"trailing object", raw + `{"schema":"ito.training/v1"}`, malformed},
		{"trailing garbage", raw + "x", malformed},
		{"JSON array", "[" + raw + "]", malformed},
		{"JSON null", "null", malformed},
		{"truncated", raw[:len(raw)/2], malformed},
		{"comment", "// signed\n" + raw, malformed},
		{"single-quoted", strings.ReplaceAll(raw, `"`, `'`), malformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := h.runner.SignManifest([]byte(tc.manifest))
			if err != nil {
				t.Fatal(err)
			}
			h.secret(m.Signature)
			// A confirmation for exactly these bytes: only the manifest
			// itself can be the reason for a deny.
			g := h.fixtureFor(t, m.Raw)
			r := h.admit(t, h.body(t, g, map[string]any{
				"manifest": base64.StdEncoding.EncodeToString(m.Raw), "manifest_signature": m.Signature}))
			h.expect(t, r, tc.want, m.Signature)
			if tc.want.status != http.StatusOK {
				h.untouched(t, g.ref, g.key)
			}
		})
	}
	// The manifest field itself: encoding and size are checked before the
	// signature.
	for _, tc := range []struct {
		name     string
		manifest string
		want     want
	}{
		{"base64url", base64.RawURLEncoding.EncodeToString(h.m.Raw) + "-_", want{http.StatusBadRequest, "MANIFEST_ENCODING_INVALID"}},
		{"base64 without padding", strings.TrimRight(base64.StdEncoding.EncodeToString(h.m.Raw[:len(h.m.Raw)/3*3-1]), "="), want{http.StatusBadRequest, "MANIFEST_ENCODING_INVALID"}},
		{"base64 with a line feed", func() string { s := base64.StdEncoding.EncodeToString(h.m.Raw); return s[:76] + "\n" + s[76:] }(), want{http.StatusBadRequest, "MANIFEST_ENCODING_INVALID"}},
		{"base64 with line breaks", func() string { s := base64.StdEncoding.EncodeToString(h.m.Raw); return s[:76] + "\r\n" + s[76:] }(), want{http.StatusBadRequest, "MANIFEST_ENCODING_INVALID"}},
		{"base64 with trailing garbage bits", base64.StdEncoding.EncodeToString([]byte("ab"))[:2] + "x=", want{http.StatusBadRequest, "MANIFEST_ENCODING_INVALID"}},
		{"raw JSON instead of base64", raw, want{http.StatusBadRequest, "MANIFEST_ENCODING_INVALID"}},
		{"1 MiB + 1 byte", base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(" "), 1<<20+1)), want{http.StatusRequestEntityTooLarge, "MANIFEST_TOO_LARGE"}},
		{"missing", "", want{http.StatusBadRequest, "MANIFEST_REQUIRED"}},
	} {
		t.Run("manifest field "+tc.name, func(t *testing.T) {
			h.expect(t, h.admit(t, h.body(t, f, map[string]any{"manifest": tc.manifest})), tc.want)
			h.untouched(t, f.ref, f.key)
		})
	}
	h.allowed(t, f)
	h.finish(t)
}

func containsCode(codes []string, c string) bool {
	for _, x := range codes {
		if x == c {
			return true
		}
	}
	return false
}

// TestHostileRequestJSON: the admission and deposit bodies are one strict
// JSON object of the documented fields; every ambiguity is 400
// REQUEST_INVALID and no unknown key that could be a secret is echoed.
func TestHostileRequestJSON(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	good := string(h.body(t, f, nil))
	first := `{"action":"train.create",`
	if !strings.HasPrefix(good, first) {
		t.Fatalf("body layout changed: %.60s", good)
	}
	with := func(member string) []byte { return []byte(first + member + "," + good[len(first):]) }
	invalid := want{http.StatusBadRequest, "REQUEST_INVALID"}
	secretKey := "eyJhbGciOiJFUzI1NiJ9.c2VjcmV0LXNlY3JldC1zZWNyZXQ"
	h.secret(secretKey, "AKIAIOSFODNN7EXAMPLE")
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"duplicate action", with(`"action":"booking.release"`)},
		{"duplicate confirmation_ref", with(`"confirmation_ref":"cfr_` + strings.Repeat("0", 32) + `"`)},
		{"case-variant Action", with(`"Action":"booking.release"`)},
		{"upper-case ACTION", with(`"ACTION":"booking.release"`)},
		{"escaped key duplicating action", with(`"\u0061ction":"booking.release"`)},
		{"escaped case variant", with(`"\u0041ction":"booking.release"`)},
		{"Kelvin-sign key folding onto idempotency_key", with(`"idempotency_\u212aey":"other"`)},
		{"long-s key folding onto manifest_signature", with(`"manife\u017ft_signature":"x"`)},
		{"unknown field", with(`"allow":true`)},
		{"unknown field named like a token", with(`"` + secretKey + `":1`)},
		{"unknown field named like an AWS key", with(`"AKIAIOSFODNN7EXAMPLE":1`)},
		{"field null", with(`"run_id":null`)},
		{"field a number", with(`"releases_booking":1`)},
		{"field 1e400", with(`"releases_booking":1e400`)},
		{"field 99999999999999999999999", with(`"run_id":99999999999999999999999`)},
		{"nested 9 deep", with(`"run_id":` + nest(9, `"x"`))},
		{"nested 100000 deep", with(`"run_id":` + nest(100000, ""))},
		{"invalid UTF-8", with("\"booking_id\":\"bk_\xff\"")},
		{"lone surrogate", with(`"booking_id":"bk_\ud800"`)},
		{"NUL in a value", with(`"booking_id":"bk_demo_01\u0000"`)},
		{"byte-order mark", append([]byte("\xef\xbb\xbf"), good...)},
		{"trailing object", []byte(good + `{"action":"booking.release"}`)},
		{"two objects", []byte(good + good)},
		{"array", []byte("[" + good + "]")},
		{"null", []byte("null")},
		{"empty", nil},
		{"truncated", []byte(good[:len(good)/2])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.admit(t, tc.body)
			h.expect(t, r, invalid, secretKey, "AKIAIOSFODNN7EXAMPLE")
			h.untouched(t, f.ref, f.key)
		})
	}
	t.Run("deposit with a duplicate member", func(t *testing.T) {
		conf := h.token(t, purposeConfirmation, nil)
		body := `{"confirmation_token":"x","confirmation_token":"` + conf + `"}`
		h.expect(t, h.do(t, http.MethodPost, "/v1/confirmations", "application/json", h.depositorTok, []byte(body)), invalid, conf)
		h.deposit(t, conf) // it was not stored
	})
	t.Run("deposit with an unknown member", func(t *testing.T) {
		conf := h.token(t, purposeConfirmation, nil)
		body := `{"confirmation_token":"` + conf + `","ref":"cfr_` + strings.Repeat("0", 32) + `"}`
		h.expect(t, h.do(t, http.MethodPost, "/v1/confirmations", "application/json", h.depositorTok, []byte(body)), invalid, conf)
		h.deposit(t, conf)
	})
	h.allowed(t, f)
	h.finish(t)
}

// TestHostileContentTypes: anything but application/json (UTF-8) is 415
// before the body is read or the caller authenticated.
func TestHostileContentTypes(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	for _, ct := range []string{
		"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
		"application/json; charset=iso-8859-1", "application/json; charset=utf-16", "application/jsonx",
		"application/json-patch+json", "application/problem+json", "text/json", "application/json; charset",
		"application/json, text/plain", "*/*",
	} {
		t.Run("admission "+ct, func(t *testing.T) {
			h.expect(t, h.do(t, http.MethodPost, "/v1/admissions", ct, h.callerTok, h.body(t, f, nil)),
				want{http.StatusUnsupportedMediaType, "REQUEST_CONTENT_TYPE_UNSUPPORTED"})
			h.expect(t, h.do(t, http.MethodPost, "/v1/confirmations", ct, h.depositorTok,
				mustMarshal(t, map[string]any{"confirmation_token": h.token(t, purposeConfirmation, nil)})),
				want{http.StatusUnsupportedMediaType, "REQUEST_CONTENT_TYPE_UNSUPPORTED"})
			h.untouched(t, f.ref, f.key)
		})
	}
	// Parameters and case that still name JSON in UTF-8 are accepted.
	g := h.fixture(t)
	r := h.do(t, http.MethodPost, "/v1/admissions", "Application/JSON; charset=UTF-8", h.callerTok, h.body(t, g, nil))
	if r.status != http.StatusOK {
		t.Fatalf("Application/JSON; charset=UTF-8: %d %s", r.status, r.raw)
	}
	h.allowed(t, f)
	h.finish(t)
}

// TestHostileBodyLimits: a body over limits.max_body_bytes is 413
// REQUEST_TOO_LARGE — at once when Content-Length says so, and for a
// chunked body that never ends after at most the limit, with the server
// no longer reading; a body that stalls is cut off at the request deadline.
func TestHostileBodyLimits(t *testing.T) {
	const limit = 64 << 10
	// The stalled body is cut off at the request deadline; it only has to
	// outlast the deposit and the over-limit cases, which never wait.
	h := newHostile(t, hostileOptions{maxBody: limit, requestTimeout: 5 * time.Second})
	f := h.fixture(t)
	tooLarge := want{http.StatusRequestEntityTooLarge, "REQUEST_TOO_LARGE"}

	t.Run("Content-Length over the limit", func(t *testing.T) {
		h.expect(t, h.admit(t, bytes.Repeat([]byte(" "), limit+1)), tooLarge)
	})
	for _, path := range []string{"/v1/admissions", "/v1/confirmations"} {
		t.Run("endless chunked body to "+path, func(t *testing.T) {
			bearer := h.callerTok
			if path == "/v1/confirmations" {
				bearer = h.depositorTok
			}
			// The writer would send 1 GiB; the server must answer long before.
			const capBytes = 1 << 30
			pr, pw := io.Pipe()
			var written atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				chunk := bytes.Repeat([]byte(" "), 4<<10)
				if _, err := pw.Write([]byte(`{"run_id":"`)); err != nil {
					return
				}
				for written.Load() < capBytes {
					n, err := pw.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
				pw.Close()
			}()
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, pr)
			req.ContentLength = -1 // chunked
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+bearer)
			r := h.send(t, req)
			h.expect(t, r, tooLarge)
			pw.CloseWithError(errors.New("test done"))
			<-done
			if w := written.Load(); w >= capBytes {
				t.Fatalf("the server read the whole endless body (%d bytes)", w)
			}
		})
	}
	t.Run("slow body that stalls", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write([]byte(`{"action":"train.create",`)) }() // and then nothing
		req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/admissions", pr)
		req.ContentLength = -1
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+h.callerTok)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r := h.send(t, req.WithContext(ctx))
		h.expect(t, r, want{http.StatusRequestTimeout, "REQUEST_TIMEOUT"})
	})
	if r := h.do(t, http.MethodGet, "/healthz", "", "", nil); r.status != http.StatusOK {
		t.Fatalf("healthz: %d", r.status)
	}
	h.untouched(t, f.ref, f.key)
	h.finish(t)
}

// TestHostileRoutes: hostile idempotency keys in the status route, methods
// a route does not take and unknown paths each get their coded envelope;
// nothing is read from or written to the ledger for them.
func TestHostileRoutes(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	invalid := want{http.StatusBadRequest, "REQUEST_INVALID"}
	for _, tc := range []struct {
		name, method, path string
		want               want
	}{
		{"status key with NUL", http.MethodGet, "/v1/admissions/k%00x", invalid},
		{"status key with a slash", http.MethodGet, "/v1/admissions/k%2F..%2F..", invalid},
		{"status key of 129 characters", http.MethodGet, "/v1/admissions/" + strings.Repeat("k", 129), invalid},
		{"status key of 8 KiB", http.MethodGet, "/v1/admissions/" + strings.Repeat("k", 8<<10), invalid},
		{"status key with unicode", http.MethodGet, "/v1/admissions/k%C3%A9y", invalid},
		{"status key starting with a dot", http.MethodGet, "/v1/admissions/.k", invalid},
		{"status of a key never admitted", http.MethodGet, "/v1/admissions/" + f.key, want{http.StatusNotFound, "ADMISSION_NOT_FOUND"}},
		{"PUT admissions", http.MethodPut, "/v1/admissions", want{http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"}},
		{"DELETE an admission", http.MethodDelete, "/v1/admissions/" + f.key, want{http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"}},
		{"GET confirmations", http.MethodGet, "/v1/confirmations", want{http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"}},
		{"GET a confirmation by ref", http.MethodGet, "/v1/confirmations/" + f.ref, want{http.StatusNotFound, "ROUTE_NOT_FOUND"}},
		{"unknown version", http.MethodPost, "/v2/admissions", want{http.StatusNotFound, "ROUTE_NOT_FOUND"}},
		{"path traversal", http.MethodGet, "/v1/../metrics/../v1/admissions/x", want{http.StatusNotFound, "ROUTE_NOT_FOUND"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, h.srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Opaque = tc.path // sent as written, not cleaned by the client
			req.Header.Set("Authorization", "Bearer "+h.callerTok)
			h.expect(t, h.send(t, req), tc.want)
			h.untouched(t, f.ref, f.key)
		})
	}
	h.allowed(t, f)
	h.finish(t)
}

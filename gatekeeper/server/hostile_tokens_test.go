package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"hash"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// del removes a member in a header or claims edit.
var del = &struct{ deleted bool }{}

// edit applies kv pairs (name, value; del removes) to m.
func edit(m map[string]any, kv ...any) {
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == del {
			delete(m, kv[i].(string))
			continue
		}
		m[kv[i].(string)] = kv[i+1]
	}
}

// tokenCase is one hostile token, built from a valid header and valid
// claims of the purpose under test.
type tokenCase struct {
	name string
	// kind is the verification failure the token must produce; 0 skips
	// the check (it depends on the purpose).
	kind verify.Kind
	// expired: the expired code (ENTITLEMENT_EXPIRED, CONFIRMATION_EXPIRED)
	// instead of the invalid one.
	expired bool
	// only limits the case to these purposes (nil: all four).
	only  []purpose
	build func(h *hostile, p purpose, hdr, claims map[string]any) string
}

// attacker holds keys and endpoints no configuration trusts.
type attacker struct {
	key     *ecdsa.PrivateKey
	jwk     map[string]any // its public JWK
	certDER []byte         // a self-signed certificate for it
	url     string         // an HTTP server counting every hit
	hits    *atomic.Int64
}

func newAttacker(t *testing.T) *attacker {
	t.Helper()
	key, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := jwk.Import(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	var pubJWK map[string]any
	raw, _ := json.Marshal(pub)
	_ = json.Unmarshal(raw, &pubJWK)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "attacker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	a := &attacker{key: key, jwk: pubJWK, certDER: der, hits: &atomic.Int64{}}
	// Any fetch of jku or x5u would land here and find the attacker's key.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a.hits.Add(1)
		jwkWithKid := map[string]any{}
		for k, v := range pubJWK {
			jwkWithKid[k] = v
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{jwkWithKid}})
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

// hmacWith signs as HS256/384/512 with secret.
func hmacWith(newHash func() hash.Hash, secret []byte) func([]byte) []byte {
	return func(input []byte) []byte {
		m := hmac.New(newHash, secret)
		m.Write(input)
		return m.Sum(nil)
	}
}

// publicKeyForms are the encodings of the verifier's public key an HMAC
// key-confusion attack would use as the shared secret.
func publicKeyForms(t *testing.T, k keys.Key) map[string][]byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	j, err := jwk.Import(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	jwkJSON, _ := json.Marshal(j)
	point, err := k.Public.(*ecdsa.PublicKey).ECDH()
	if err != nil {
		t.Fatal(err)
	}
	pemText := string(k.PublicPEM)
	if !strings.HasSuffix(pemText, "\n") {
		t.Fatal("the dev public PEM has no trailing newline; the cases below assume one")
	}
	return map[string][]byte{
		"PEM text with trailing newline":    []byte(pemText),
		"PEM text without trailing newline": []byte(strings.TrimRight(pemText, "\n")),
		"PEM text with CRLF":                []byte(strings.ReplaceAll(pemText, "\n", "\r\n")),
		"PKIX DER":                          der,
		"PEM base64 body":                   []byte(pemBody(k.PublicPEM)),
		"JWK JSON":                          jwkJSON,
		"uncompressed EC point":             point.Bytes(),
	}
}

// signedWith signs hdr and claims with sign. Builders run inside subtests,
// so it panics (failing the subtest) instead of taking a *testing.T.
func signedWith(hdr, claims map[string]any, sign func([]byte) []byte) string {
	return compactJWS(jsonOf(hdr), jsonOf(claims), sign)
}

func jsonOf(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// rawJSON signs raw header and claims JSON with the purpose's own key.
func (h *hostile) rawJSON(p purpose, hdr, claims string) string {
	return compactJWS([]byte(hdr), []byte(claims), es256(h.devKey(p).Private))
}

// prepend inserts member right after the opening brace of a JSON object:
// the result has member first and the original members after it, so a
// duplicate name is seen first by a first-wins parser and last by
// encoding/json.
func prepend(js []byte, member string) string {
	return "{" + member + "," + string(js[1:])
}

// nest is v wrapped in depth arrays.
func nest(depth int, v string) string {
	return strings.Repeat("[", depth) + v + strings.Repeat("]", depth)
}

func tokenCases(t *testing.T, a *attacker) []tokenCase {
	t.Helper()
	typed := []purpose{purposeEntitlement, purposeConfirmation}
	dev := keys.Dev()
	forms := map[string]map[string][]byte{}
	for _, k := range []keys.Key{dev.Entitlement, dev.Confirmation, dev.Caller, dev.Depositor} {
		forms[k.KeyID] = publicKeyForms(t, k)
	}
	own := func(h *hostile, p purpose, hdr, claims map[string]any) string {
		return signedWith(hdr, claims, es256(h.devKey(p).Private))
	}
	// header/claims edits, then signed with the purpose's own key
	hdrEdit := func(kv ...any) func(*hostile, purpose, map[string]any, map[string]any) string {
		return func(h *hostile, p purpose, hdr, claims map[string]any) string {
			edit(hdr, kv...)
			return own(h, p, hdr, claims)
		}
	}
	claimEdit := func(kv ...any) func(*hostile, purpose, map[string]any, map[string]any) string {
		return func(h *hostile, p purpose, hdr, claims map[string]any) string {
			edit(claims, kv...)
			return own(h, p, hdr, claims)
		}
	}
	var cases []tokenCase

	// alg "none", in every letter case, unsigned and signed.
	for _, alg := range []string{"none", "None", "NONE", "nOnE"} {
		cases = append(cases,
			tokenCase{name: "alg " + alg + " unsigned", kind: verify.KindHeader,
				build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
					hdr["alg"] = alg
					return signedWith(hdr, claims, nil)
				}},
			tokenCase{name: "alg " + alg + " with a valid signature", kind: verify.KindHeader, build: hdrEdit("alg", alg)},
		)
	}
	// HMAC keyed with the verifier's own public key, in every form.
	for _, alg := range []struct {
		name string
		hash func() hash.Hash
	}{{"HS256", sha256.New}, {"HS384", sha512.New384}, {"HS512", sha512.New}, {"hs256", sha256.New}} {
		for _, form := range []string{
			"PEM text with trailing newline", "PEM text without trailing newline", "PEM text with CRLF",
			"PKIX DER", "PEM base64 body", "JWK JSON", "uncompressed EC point",
		} {
			if alg.name != "HS256" && form != "PEM text with trailing newline" && form != "PKIX DER" {
				continue
			}
			cases = append(cases, tokenCase{name: alg.name + " keyed with the public key as " + form, kind: verify.KindHeader,
				build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
					hdr["alg"] = alg.name
					return signedWith(hdr, claims, hmacWith(alg.hash, forms[h.devKey(p).KeyID][form]))
				}})
		}
	}
	// Keys embedded in or referenced by the header, signed by the attacker
	// under the real kid: trusting any of them would verify.
	attackerSigned := func(kv ...any) func(*hostile, purpose, map[string]any, map[string]any) string {
		return func(h *hostile, p purpose, hdr, claims map[string]any) string {
			edit(hdr, kv...)
			return signedWith(hdr, claims, es256(a.key))
		}
	}
	cases = append(cases,
		tokenCase{name: "jwk header holding the attacker key", kind: verify.KindHeader, build: attackerSigned("jwk", a.jwk)},
		tokenCase{name: "jwk header with the attacker kid", kind: verify.KindHeader, build: attackerSigned("jwk", a.jwk, "kid", "attacker-1")},
		tokenCase{name: "jku header to an attacker JWKS", kind: verify.KindHeader, build: attackerSigned("jku", a.url+"/jwks.json")},
		tokenCase{name: "jku header with the attacker kid", kind: verify.KindHeader, build: attackerSigned("jku", a.url+"/jwks.json", "kid", "attacker-1")},
		tokenCase{name: "x5u header to an attacker certificate", kind: verify.KindHeader, build: attackerSigned("x5u", a.url+"/cert.pem")},
		tokenCase{name: "x5c header with the attacker certificate", kind: verify.KindHeader,
			build: attackerSigned("x5c", []string{base64.StdEncoding.EncodeToString(a.certDER)})},
		tokenCase{name: "signed by an unknown key under the real kid", kind: verify.KindSignature, build: attackerSigned()},
		tokenCase{name: "signed by an unknown key under its own kid", kind: verify.KindUnknownKey, build: attackerSigned("kid", "attacker-1")},
	)
	// Hostile or missing kid.
	for _, kc := range []struct {
		name string
		kid  any
		kind verify.Kind
	}{
		{"kid missing", del, verify.KindUnknownKey},
		{"kid empty", "", verify.KindUnknownKey},
		{"kid a number", 1, verify.KindUnknownKey},
		{"kid null", nil, verify.KindUnknownKey},
		{"kid an array", []string{"dev-entitlement-1"}, verify.KindUnknownKey},
		{"kid an object", map[string]any{"kid": "x"}, verify.KindUnknownKey},
		{"kid a path", "../../../../../etc/passwd", verify.KindUnknownKey},
		{"kid a URL", a.url + "/key", verify.KindUnknownKey},
		{"kid SQL", "' OR '1'='1", verify.KindUnknownKey},
		{"kid with NUL", "dev-entitlement-1\x00", verify.KindUnknownKey},
		{"kid 8 KiB", strings.Repeat("k", 8<<10), verify.KindUnknownKey},
	} {
		cases = append(cases, tokenCase{name: kc.name, kind: kc.kind, build: hdrEdit("kid", kc.kid)})
	}
	cases = append(cases,
		tokenCase{name: "kid upper-cased", kind: verify.KindUnknownKey,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				hdr["kid"] = strings.ToUpper(hdr["kid"].(string))
				return own(h, p, hdr, claims)
			}},
		tokenCase{name: "kid with trailing space", kind: verify.KindUnknownKey,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				hdr["kid"] = hdr["kid"].(string) + " "
				return own(h, p, hdr, claims)
			}},
	)
	// A token of one purpose signed with another purpose's key.
	for _, other := range []keys.Key{dev.Entitlement, dev.Confirmation, dev.Caller, dev.Depositor, dev.ManifestECDSA} {
		cases = append(cases,
			tokenCase{name: "signed by the " + other.KeyID + " key under its kid", kind: verify.KindUnknownKey,
				build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
					if h.devKey(p).KeyID == other.KeyID {
						return "" // the valid token: skipped
					}
					hdr["kid"] = other.KeyID
					return signedWith(hdr, claims, es256(other.Private))
				}},
			tokenCase{name: "signed by the " + other.KeyID + " key under the purpose's kid", kind: verify.KindSignature,
				build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
					if h.devKey(p).KeyID == other.KeyID {
						return ""
					}
					return signedWith(hdr, claims, es256(other.Private))
				}},
		)
	}
	for _, other := range []purpose{purposeEntitlement, purposeConfirmation, purposeCaller, purposeDepositor} {
		cases = append(cases, tokenCase{name: "a genuine " + string(other) + " token",
			build: func(h *hostile, p purpose, _, _ map[string]any) string {
				if p == other {
					return ""
				}
				return signedWith(h.header(other), h.claims(other), es256(h.devKey(other).Private))
			}})
	}
	// typ is the purpose's, exactly.
	cases = append(cases,
		tokenCase{name: "typ missing", kind: verify.KindHeader, only: typed, build: hdrEdit("typ", del)},
		tokenCase{name: "typ JWT", kind: verify.KindHeader, only: typed, build: hdrEdit("typ", "JWT")},
		tokenCase{name: "typ of the other purpose", kind: verify.KindHeader, only: typed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				hdr["typ"] = config.TypeConfirmation
				if p == purposeConfirmation {
					hdr["typ"] = config.TypeEntitlement
				}
				return own(h, p, hdr, claims)
			}},
		tokenCase{name: "typ a number", kind: verify.KindHeader, only: typed, build: hdrEdit("typ", 1)},
	)
	// Signatures.
	cases = append(cases,
		tokenCase{name: "signature flipped", kind: verify.KindSignature,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				sign := es256(h.devKey(p).Private)
				return signedWith(hdr, claims, func(in []byte) []byte { s := sign(in); s[63] ^= 1; return s })
			}},
		tokenCase{name: "signature truncated", kind: verify.KindSignature,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				sign := es256(h.devKey(p).Private)
				return signedWith(hdr, claims, func(in []byte) []byte { return sign(in)[:63] })
			}},
		tokenCase{name: "signature ASN.1 DER instead of r||s", kind: verify.KindSignature,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				return signedWith(hdr, claims, func(in []byte) []byte {
					sum := sha256.Sum256(in)
					der, _ := ecdsa.SignASN1(rand.Reader, h.devKey(p).Private.(*ecdsa.PrivateKey), sum[:])
					return der
				})
			}},
		tokenCase{name: "signature all zero", kind: verify.KindSignature,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				return signedWith(hdr, claims, func([]byte) []byte { return make([]byte, 64) })
			}},
		tokenCase{name: "signature empty", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				return signedWith(hdr, claims, nil)
			}},
		tokenCase{name: "signature padded base64", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				return own(h, p, hdr, claims) + "=="
			}},
	)
	// Time: expired and badly signed fails on the signature; missing or
	// ill-typed dates are claims failures.
	cases = append(cases,
		tokenCase{name: "expired", kind: verify.KindExpired, expired: true,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				now := h.now().Unix()
				edit(claims, "iat", now-7200, "exp", now-3600)
				return own(h, p, hdr, claims)
			}},
		tokenCase{name: "expired and badly signed", kind: verify.KindSignature,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				now := h.now().Unix()
				edit(claims, "iat", now-7200, "exp", now-3600)
				sign := es256(h.devKey(p).Private)
				return signedWith(hdr, claims, func(in []byte) []byte { s := sign(in); s[0] ^= 1; return s })
			}},
		tokenCase{name: "expired and signed by another key", kind: verify.KindSignature,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				now := h.now().Unix()
				edit(claims, "iat", now-7200, "exp", now-3600)
				return signedWith(hdr, claims, es256(a.key))
			}},
		tokenCase{name: "not yet valid", kind: verify.KindNotYetValid,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				edit(claims, "nbf", h.now().Unix()+3600)
				return own(h, p, hdr, claims)
			}},
		tokenCase{name: "issued in the future", kind: verify.KindIssuedInFuture,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				now := h.now().Unix()
				edit(claims, "iat", now+3600, "exp", now+3900)
				return own(h, p, hdr, claims)
			}},
	)
	for _, c := range []struct {
		name  string
		claim string
		value any
	}{
		{"exp missing", "exp", del}, {"exp a string", "exp", "4102444800"}, {"exp a boolean", "exp", true},
		{"exp null", "exp", nil}, {"exp an array", "exp", []int{4102444800}}, {"exp negative", "exp", -1},
		{"exp past year 9999", "exp", int64(1e14)}, {"exp beyond int64", "exp", json.Number("99999999999999999999")},
		{"exp NaN-like string", "exp", "NaN"},
		{"iat missing", "iat", del}, {"iat a string", "iat", "now"}, {"iat negative", "iat", -100},
		{"iat null", "iat", nil}, {"nbf a string", "nbf", "0"}, {"nbf null", "nbf", nil}, {"nbf an object", "nbf", map[string]any{}},
		{"iss missing", "iss", del}, {"iss a number", "iss", 1}, {"aud missing", "aud", del},
		{"aud a number", "aud", 1}, {"aud array with a number", "aud", []any{"itogate", 1}},
		{"sub a number", "sub", 7}, {"jti a number", "jti", 7},
	} {
		cases = append(cases, tokenCase{name: c.name, kind: verify.KindClaims, build: claimEdit(c.claim, c.value)})
	}
	cases = append(cases,
		tokenCase{name: "iss of another purpose", kind: verify.KindIssuer, build: claimEdit("iss", "https://idp.dev.itogate.invalid/other")},
		tokenCase{name: "iss with trailing slash", kind: verify.KindIssuer,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				claims["iss"] = claims["iss"].(string) + "/"
				return own(h, p, hdr, claims)
			}},
		tokenCase{name: "aud another service", kind: verify.KindAudience, build: claimEdit("aud", "someone-else")},
		tokenCase{name: "aud array without ours", kind: verify.KindAudience, build: claimEdit("aud", []string{"a", "b"})},
		tokenCase{name: "exp beyond float64", kind: verify.KindMalformed, build: claimEdit("exp", json.Number("1e400"))},
		tokenCase{name: "exp underflowing float64", kind: verify.KindMalformed, build: claimEdit("exp", json.Number("1e-400"))},
		tokenCase{name: "jti missing", kind: verify.KindClaims, only: typed, build: claimEdit("jti", del)},
		tokenCase{name: "jti empty", kind: verify.KindClaims, only: typed, build: claimEdit("jti", "")},
	)
	// JSON ambiguity inside the header and the claims: Go and the policy
	// must never see different values, so every ambiguity is refused.
	rawCase := func(name string, kind verify.Kind, f func(h *hostile, p purpose, hdr, claims []byte) string) tokenCase {
		return tokenCase{name: name, kind: kind, build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
			return f(h, p, jsonOf(hdr), jsonOf(claims))
		}}
	}
	cases = append(cases,
		rawCase("header duplicate alg", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, prepend(hdr, `"alg":"none"`), string(c))
		}),
		rawCase("header duplicate kid", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, prepend(hdr, `"kid":"attacker-1"`), string(c))
		}),
		rawCase("header case-variant ALG", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, prepend(hdr, `"ALG":"none"`), string(c))
		}),
		rawCase("header escaped key name duplicating alg", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, prepend(hdr, `"\u0061lg":"HS256"`), string(c))
		}),
		rawCase("header Kelvin-sign KID", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, prepend(hdr, `"\u212aid":"attacker-1"`), string(c))
		}),
		rawCase("header not JSON", verify.KindMalformed, func(h *hostile, p purpose, _, c []byte) string {
			return h.rawJSON(p, `alg=ES256`, string(c))
		}),
		rawCase("header a JSON array", verify.KindMalformed, func(h *hostile, p purpose, _, c []byte) string {
			return h.rawJSON(p, `["ES256"]`, string(c))
		}),
		rawCase("header with trailing data", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr)+`{"alg":"none"}`, string(c))
		}),
		rawCase("claims duplicate sub", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"sub":"acct_victim"`))
		}),
		rawCase("claims duplicate exp", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"exp":4102444800`))
		}),
		rawCase("claims case-variant EXP", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"EXP":4102444800`))
		}),
		rawCase("claims case-variant Sub", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"Sub":"acct_victim"`))
		}),
		rawCase("claims escaped key name duplicating sub", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"\u0073ub":"acct_victim"`))
		}),
		rawCase("claims nested 64 deep", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"deep":`+nest(64, "1")))
		}),
		rawCase("claims nested 5000 deep", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"deep":`+nest(5000, "")))
		}),
		rawCase("claims an array", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), "["+string(c)+"]")
		}),
		rawCase("claims null", verify.KindMalformed, func(h *hostile, p purpose, hdr, _ []byte) string {
			return h.rawJSON(p, string(hdr), "null")
		}),
		rawCase("claims with invalid UTF-8", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, "\"note\":\"\xff\xfe\""))
		}),
		rawCase("claims with a lone surrogate", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"note":"\ud800"`))
		}),
		rawCase("claims with a byte-order mark", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), "\xef\xbb\xbf"+string(c))
		}),
		rawCase("claims with trailing data", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), string(c)+`{"exp":4102444800}`)
		}),
		rawCase("claims number beyond float64", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"big":1e400`))
		}),
		rawCase("claims integer beyond int64", verify.KindClaims, func(h *hostile, p purpose, hdr, c []byte) string {
			return h.rawJSON(p, string(hdr), prepend(c, `"big":99999999999999999999999`))
		}),
	)
	// Other serializations: JSON JWS (validly signed), JWE, extra parts.
	jsonJWS := func(general bool, lead string) func(*hostile, purpose, map[string]any, map[string]any) string {
		return func(h *hostile, p purpose, hdr, claims map[string]any) string {
			parts := strings.Split(own(h, p, hdr, claims), ".")
			var doc map[string]any
			if general {
				doc = map[string]any{"payload": parts[1], "signatures": []any{map[string]any{"protected": parts[0], "signature": parts[2]}}}
			} else {
				doc = map[string]any{"protected": parts[0], "payload": parts[1], "signature": parts[2]}
			}
			return lead + string(jsonOf(doc))
		}
	}
	caller := rawCase("claims case-variant Account", verify.KindMalformed, func(h *hostile, p purpose, hdr, c []byte) string {
		return h.rawJSON(p, string(hdr), prepend(c, `"Account":"acct_victim"`))
	})
	caller.only = []purpose{purposeCaller}
	cases = append(cases, caller)
	cases = append(cases,
		tokenCase{name: "JSON-serialized JWS (flattened)", kind: verify.KindMalformed, build: jsonJWS(false, "")},
		tokenCase{name: "JSON-serialized JWS (general)", kind: verify.KindMalformed, build: jsonJWS(true, "")},
		tokenCase{name: "JSON-serialized JWS after whitespace", kind: verify.KindMalformed, build: jsonJWS(false, " \t")},
		tokenCase{name: "JWE compact (five parts)", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				jweHdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RSA-OAEP-256","enc":"A256GCM","kid":"` + h.devKey(p).KeyID + `"}`))
				return jweHdr + ".ZW5jcnlwdGVka2V5.aXZpdml2aXZpdml2.Y2lwaGVydGV4dA.dGFndGFndGFndGFn"
			}},
		tokenCase{name: "JWE compact with dir and an empty key", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				jweHdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"dir","enc":"A128CBC-HS256"}`))
				return jweHdr + "..aXZpdml2aXZpdml2.Y2lwaGVydGV4dA.dGFndGFndGFndGFn"
			}},
		tokenCase{name: "JWE JSON serialization", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				return `{"protected":"eyJlbmMiOiJBMjU2R0NNIn0","recipients":[{"header":{"alg":"RSA-OAEP"},"encrypted_key":"ZW5j"}],"iv":"aXY","ciphertext":"Y2lw","tag":"dGFn"}`
			}},
		tokenCase{name: "enc header in a JWS", kind: verify.KindHeader, build: hdrEdit("enc", "A256GCM")},
		tokenCase{name: "zip header", kind: verify.KindHeader, build: hdrEdit("zip", "DEF")},
		tokenCase{name: "crit header", kind: verify.KindHeader, build: hdrEdit("crit", []string{"exp"}, "exp", 1)},
		tokenCase{name: "b64 false (unencoded payload)", kind: verify.KindHeader, build: hdrEdit("b64", false, "crit", []string{"b64"})},
		tokenCase{name: "alg RSA-OAEP (an encryption alg)", kind: verify.KindHeader, build: hdrEdit("alg", "RSA-OAEP")},
		tokenCase{name: "alg ES384 on an ES256 key", kind: verify.KindHeader, build: hdrEdit("alg", "ES384")},
		tokenCase{name: "alg EdDSA on an ES256 key", kind: verify.KindHeader, build: hdrEdit("alg", "EdDSA")},
		tokenCase{name: "alg RS256 on an ES256 key", kind: verify.KindHeader, build: hdrEdit("alg", "RS256")},
		tokenCase{name: "cty a number (valid signature)", kind: verify.KindHeader, build: hdrEdit("cty", 1)},
		tokenCase{name: "x5t a number (valid signature)", kind: verify.KindHeader, build: hdrEdit("x5t", 5)},
		tokenCase{name: "alg missing", kind: verify.KindHeader, build: hdrEdit("alg", del)},
		tokenCase{name: "alg a number", kind: verify.KindHeader, build: hdrEdit("alg", 256)},
		tokenCase{name: "four parts", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string { return own(h, p, hdr, claims) + ".e30" }},
		tokenCase{name: "two parts", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				parts := strings.Split(own(h, p, hdr, claims), ".")
				return parts[0] + "." + parts[1]
			}},
		tokenCase{name: "standard base64 alphabet", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				return strings.NewReplacer("-", "+", "_", "/").Replace(own(h, p, hdr, claims)) + "+/"
			}},
		tokenCase{name: "whitespace inside", kind: verify.KindMalformed,
			build: func(h *hostile, p purpose, hdr, claims map[string]any) string {
				s := own(h, p, hdr, claims)
				return s[:10] + " " + s[10:]
			}},
		tokenCase{name: "over the 16 KiB token limit", kind: verify.KindTooLarge, build: claimEdit("pad", strings.Repeat("A", 17<<10))},
	)
	return cases
}

// outcome is what a refused token answers at each place a token enters.
var refusedAt = map[string]want{
	"entitlement":          {http.StatusForbidden, "ENTITLEMENT_INVALID"},
	"confirmation deposit": {http.StatusForbidden, "CONFIRMATION_INVALID"},
	"confirmation at use":  {http.StatusForbidden, "CONFIRMATION_INVALID"},
	"caller bearer":        {http.StatusUnauthorized, "CALLER_UNAUTHENTICATED"},
	"depositor bearer":     {http.StatusUnauthorized, "DEPOSITOR_UNAUTHENTICATED"},
}

// futureAt is refusedAt for a token issued beyond the leeway in the future.
var futureAt = map[string]want{
	"entitlement":          {http.StatusForbidden, "ENTITLEMENT_STALE"},
	"confirmation deposit": {http.StatusForbidden, "CONFIRMATION_INVALID"},
	"confirmation at use":  {http.StatusForbidden, "CONFIRMATION_INVALID"},
	"caller bearer":        {http.StatusUnauthorized, "CALLER_UNAUTHENTICATED"},
	"depositor bearer":     {http.StatusUnauthorized, "DEPOSITOR_UNAUTHENTICATED"},
}

var expiredAt = map[string]want{
	"entitlement":          {http.StatusForbidden, "ENTITLEMENT_EXPIRED"},
	"confirmation deposit": {http.StatusForbidden, "CONFIRMATION_EXPIRED"},
	"confirmation at use":  {http.StatusForbidden, "CONFIRMATION_EXPIRED"},
	"caller bearer":        {http.StatusUnauthorized, "CALLER_UNAUTHENTICATED"},
	"depositor bearer":     {http.StatusUnauthorized, "DEPOSITOR_UNAUTHENTICATED"},
}

var positionPurpose = map[string]purpose{
	"entitlement": purposeEntitlement, "confirmation deposit": purposeConfirmation,
	"confirmation at use": purposeConfirmation, "caller bearer": purposeCaller, "depositor bearer": purposeDepositor,
}

var positions = []string{"entitlement", "confirmation deposit", "confirmation at use", "caller bearer", "depositor bearer"}

// tryToken puts tok where position takes a token, checks the answer, and
// checks that nothing was consumed, stored or reserved.
func (h *hostile) tryToken(t *testing.T, position string, f fixture, tok, jti string, w want, kind verify.Kind) {
	t.Helper()
	ctx := context.Background()
	kindIn := func(r reply) {
		t.Helper()
		if kind != 0 && !strings.HasSuffix(r.message(), "token rejected: "+kind.String()) {
			t.Fatalf("message %q does not name kind %s", r.message(), kind)
		}
	}
	switch position {
	case "entitlement":
		r := h.admit(t, h.body(t, f, map[string]any{"entitlement_token": tok}))
		h.expect(t, r, w, tok)
		kindIn(r)
	case "confirmation deposit":
		r := h.do(t, http.MethodPost, "/v1/confirmations", "application/json", h.depositorTok,
			mustMarshal(t, map[string]any{"confirmation_token": tok}))
		h.expect(t, r, w, tok)
		kindIn(r)
		if jti != "" {
			// Nothing was stored: the jti is still free.
			h.deposit(t, h.token(t, purposeConfirmation, func(c map[string]any) { c["jti"] = jti }))
		}
	case "confirmation at use":
		// As if the token had been stored under an older key set: it is
		// verified again at use.
		ref, key := ledger.NewConfirmationRef(), h.key("k-use")
		now := h.now()
		if err := h.store.DepositConfirmation(ctx, ledger.Confirmation{
			Ref: ref, JTI: "jti_use_" + randomHex(), Account: scenario.Account, Action: "train.create",
			Token: []byte(tok), ExpiresAt: now.Add(10 * time.Minute), DepositedAt: now,
			State: ledger.ConfirmationAvailable,
		}); err != nil {
			t.Fatal(err)
		}
		r := h.admit(t, h.body(t, fixture{ent: f.ent, ref: ref, key: key}, nil))
		h.expect(t, r, w, tok)
		kindIn(r)
		h.untouched(t, ref, key)
	case "caller bearer":
		before := h.logCount(`"err":"caller token: ` + kind.String() + `:`)
		h.expect(t, h.do(t, http.MethodPost, "/v1/admissions", "application/json", tok, h.body(t, f, nil)), w, tok)
		h.expect(t, h.do(t, http.MethodGet, "/v1/admissions/"+f.key, "", tok, nil), w, tok)
		if kind != 0 && h.logCount(`"err":"caller token: `+kind.String()+`:`) != before+2 {
			t.Fatalf("the server log does not name kind %s twice more", kind)
		}
	case "depositor bearer":
		conf := h.token(t, purposeConfirmation, nil)
		before := h.logCount(`"err":"depositor token: ` + kind.String() + `:`)
		h.expect(t, h.do(t, http.MethodPost, "/v1/confirmations", "application/json", tok,
			mustMarshal(t, map[string]any{"confirmation_token": conf})), w, tok)
		if kind != 0 && h.logCount(`"err":"depositor token: `+kind.String()+`:`) != before+1 {
			t.Fatalf("the server log does not name kind %s", kind)
		}
		h.deposit(t, conf) // it was not stored by the refused attempt
	default:
		t.Fatalf("unknown position %q", position)
	}
	h.untouched(t, f.ref, f.key)
}

// TestHostileTokens: every kind of hostile token, at every place a token
// enters (entitlement in the body, confirmation on deposit and again at use,
// caller and depositor bearer), answers its exact code, consumes nothing,
// stores nothing, fetches nothing and logs no token bytes.
func TestHostileTokens(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	a := newAttacker(t)
	f := h.fixture(t)
	cases := tokenCases(t, a)
	for _, position := range positions {
		p := positionPurpose[position]
		t.Run(position, func(t *testing.T) {
			for _, tc := range cases {
				if tc.only != nil && !containsPurpose(tc.only, p) {
					continue
				}
				hdr, claims := h.header(p), h.claims(p)
				tok := tc.build(h, p, hdr, claims)
				if tok == "" {
					continue // the case is the purpose's own valid token
				}
				h.secret(tok)
				jti, _ := claims["jti"].(string)
				w := refusedAt[position]
				switch {
				case tc.expired:
					w = expiredAt[position]
				case tc.kind == verify.KindIssuedInFuture:
					w = futureAt[position]
				}
				t.Run(tc.name, func(t *testing.T) { h.tryToken(t, position, f, tok, jti, w, tc.kind) })
			}
		})
	}
	if n := a.hits.Load(); n != 0 {
		t.Fatalf("the attacker's key server was contacted %d times", n)
	}
	h.allowed(t, f)
	h.finish(t)
}

func containsPurpose(list []purpose, p purpose) bool {
	for _, x := range list {
		if x == p {
			return true
		}
	}
	return false
}

// TestHostileTokenLeeway: exp, nbf and iat just inside the leeway (30 s in
// development) pass verification and meet the policy; just outside, they
// are refused with their code at every place a token enters. The clock is
// pinned.
func TestHostileTokenLeeway(t *testing.T) {
	now := time.Now().Truncate(time.Second)
	h := newHostile(t, hostileOptions{now: now})
	leeway := int64(verify.DefaultLeeway / time.Second)
	n := now.Unix()
	allow := want{http.StatusOK, ""}
	created := want{http.StatusCreated, ""}
	cases := []struct {
		name  string
		edit  func(c map[string]any)
		kind  verify.Kind // outside the leeway
		wants map[string]want
	}{
		{"exp at now-leeway (outside)", func(c map[string]any) { edit(c, "iat", n-200, "exp", n-leeway) },
			verify.KindExpired, expiredAt},
		// One leeway: the policy applies the verifier's own (input.leeway_seconds),
		// so inside it every place accepts (the policy required exp > now).
		{"exp at now-leeway+1 (inside)",
			func(c map[string]any) { edit(c, "iat", n-200, "exp", n-leeway+1) }, 0, map[string]want{
				"entitlement": allow, "confirmation deposit": created,
				"confirmation at use": allow, "caller bearer": allow, "depositor bearer": created,
			}},
		{"nbf at now+leeway+1 (outside)", func(c map[string]any) { edit(c, "nbf", n+leeway+1) },
			verify.KindNotYetValid, refusedAt},
		{"nbf at now+leeway (inside)", func(c map[string]any) { edit(c, "nbf", n+leeway) }, 0, map[string]want{
			"entitlement": allow, "confirmation deposit": created, "confirmation at use": allow,
			"caller bearer": allow, "depositor bearer": created,
		}},
		// Issued in the future beyond the leeway: the entitlement's answer is
		// the documented ENTITLEMENT_STALE (it was ENTITLEMENT_INVALID).
		{"iat at now+leeway+1 (outside)", func(c map[string]any) { edit(c, "iat", n+leeway+1, "exp", n+leeway+300) },
			verify.KindIssuedInFuture, futureAt},
		{"iat at now+45 (outside)", func(c map[string]any) { edit(c, "iat", n+45, "exp", n+345) },
			verify.KindIssuedInFuture, futureAt},
		{"iat at now+leeway (inside)", func(c map[string]any) { edit(c, "iat", n+leeway, "exp", n+leeway+299) }, 0, map[string]want{
			"entitlement": allow, "confirmation deposit": created, "confirmation at use": allow,
			"caller bearer": allow, "depositor bearer": created,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, position := range positions {
				t.Run(position, func(t *testing.T) {
					p := positionPurpose[position]
					f := h.fixture(t)
					tok := h.token(t, p, tc.edit)
					w := tc.wants[position]
					if w.code != "" {
						h.tryToken(t, position, f, tok, "", w, tc.kind)
						return
					}
					h.accepted(t, position, f, tok, w)
				})
			}
		})
	}
	h.finish(t)
}

// accepted puts a token that must pass where position takes it and checks
// the success (an allow consumes the fixture's confirmation, as it should).
func (h *hostile) accepted(t *testing.T, position string, f fixture, tok string, w want) {
	t.Helper()
	var r reply
	switch position {
	case "entitlement":
		r = h.admit(t, h.body(t, f, map[string]any{"entitlement_token": tok}))
	case "confirmation deposit", "depositor bearer":
		bearer, conf := h.depositorTok, tok
		if position == "depositor bearer" {
			bearer, conf = tok, h.token(t, purposeConfirmation, nil)
		}
		r = h.do(t, http.MethodPost, "/v1/confirmations", "application/json", bearer,
			mustMarshal(t, map[string]any{"confirmation_token": conf}))
	case "confirmation at use":
		f.ref = h.deposit(t, tok)
		r = h.admit(t, h.body(t, f, nil))
	case "caller bearer":
		r = h.do(t, http.MethodPost, "/v1/admissions", "application/json", tok, h.body(t, f, nil))
	}
	h.expect(t, r, w, tok)
	if w.status == http.StatusOK && r.data()["decision"] != "allow" {
		t.Fatalf("not an allow: %s", r.raw)
	}
}

// TestHostileOversizeTokens: tokens of megabytes are refused by size before
// anything parses them — in the body by the body limit (413) or the token
// limit (coded 4xx), in a header by the token limit (401) or by net/http's
// header limit (431, before any handler runs) — and the server stays up.
func TestHostileOversizeTokens(t *testing.T) {
	h := newHostile(t, hostileOptions{})
	f := h.fixture(t)
	big := func(n int) string { return strings.Repeat("eyJh", n/4) }
	h.secret(big(64)) // any run of the padding in an output is an echo
	t.Run("entitlement of 1.5 MiB (under the body limit)", func(t *testing.T) {
		r := h.admit(t, h.body(t, f, map[string]any{"entitlement_token": big(3 << 19)}))
		h.expect(t, r, want{http.StatusForbidden, "ENTITLEMENT_INVALID"})
		if !strings.HasSuffix(r.message(), "too_large") {
			t.Fatalf("message %q", r.message())
		}
	})
	t.Run("entitlement of 3 MiB (over the body limit)", func(t *testing.T) {
		h.expect(t, h.admit(t, h.body(t, f, map[string]any{"entitlement_token": big(3 << 20)})),
			want{http.StatusRequestEntityTooLarge, "REQUEST_TOO_LARGE"})
	})
	t.Run("confirmation of 1.5 MiB deposited", func(t *testing.T) {
		h.expect(t, h.do(t, http.MethodPost, "/v1/confirmations", "application/json", h.depositorTok,
			mustMarshal(t, map[string]any{"confirmation_token": big(3 << 19)})), want{http.StatusForbidden, "CONFIRMATION_INVALID"})
	})
	t.Run("confirmation of 3 MiB deposited", func(t *testing.T) {
		h.expect(t, h.do(t, http.MethodPost, "/v1/confirmations", "application/json", h.depositorTok,
			mustMarshal(t, map[string]any{"confirmation_token": big(3 << 20)})), want{http.StatusRequestEntityTooLarge, "REQUEST_TOO_LARGE"})
	})
	for _, size := range []int{20 << 10, 60 << 10} {
		t.Run("caller bearer of "+kib(size), func(t *testing.T) {
			h.expect(t, h.do(t, http.MethodPost, "/v1/admissions", "application/json", big(size), h.body(t, f, nil)),
				want{http.StatusUnauthorized, "CALLER_UNAUTHENTICATED"})
			h.expect(t, h.do(t, http.MethodPost, "/v1/confirmations", "application/json", big(size), []byte(`{}`)),
				want{http.StatusUnauthorized, "DEPOSITOR_UNAUTHENTICATED"})
		})
	}
	if h.logCount(`"err":"caller token: too_large:`) != 2 {
		t.Fatal("the too-large caller tokens were not refused by size")
	}
	for _, size := range []int{server.MaxHeaderBytes + 8<<10, 4 << 20} {
		t.Run("caller bearer of "+kib(size)+" (over MaxHeaderBytes)", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/admissions", strings.NewReader(string(h.body(t, f, nil))))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+big(size))
			resp, err := h.client.Do(req)
			if err != nil {
				// The server refused the header and closed the connection
				// while the client was still writing it: refused, unparsed.
				t.Logf("connection closed while sending %d header bytes: %v", size, err)
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("got %d: %s", resp.StatusCode, raw)
			}
			assertNoSecrets(t, string(raw), big(64))
		})
	}
	// Still up, and nothing was touched.
	if r := h.do(t, http.MethodGet, "/healthz", "", "", nil); r.status != http.StatusOK {
		t.Fatalf("healthz after oversize tokens: %d", r.status)
	}
	h.untouched(t, f.ref, f.key)
	h.allowed(t, f)
	h.finish(t)
}

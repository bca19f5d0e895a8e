package verify_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

func baseHeader() map[string]any {
	return map[string]any{"alg": "ES256", "kid": keys.EntitlementKeyID, "typ": testTyp}
}

func baseClaims() map[string]any {
	return map[string]any{
		"iss":                    testIssuer,
		"sub":                    "acct_123",
		"aud":                    testAudience,
		"iat":                    now.Unix() - 10,
		"exp":                    now.Unix() + 300,
		"jti":                    "jti-1",
		"booking_id":             "bk_1",
		"booking_state":          "completed",
		"training_eligible":      true,
		"gpu":                    map[string]any{"type": "h100-sxm", "nodes": 2, "gpus_per_node": 8},
		"term":                   map[string]any{"start": now.Unix() - 3600, "end": now.Unix() + 86400},
		"price_per_gpu_hour_usd": "2.49",
		"exact":                  int64(9007199254740993), // 2^53+1: not representable as float64
	}
}

func with[M ~map[string]any](m M, kv ...any) M {
	out := maps.Clone(m)
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
			continue
		}
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

func newVerifier(t *testing.T, purpose verify.Purpose, key keys.Key, typ string, mutate func(*verify.TokenOptions)) *verify.TokenVerifier {
	t.Helper()
	set, err := key.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	opts := verify.TokenOptions{
		Purpose:    purpose,
		Issuer:     testIssuer,
		Audience:   testAudience,
		Type:       typ,
		Keys:       set,
		RequireJTI: true,
	}
	if mutate != nil {
		mutate(&opts)
	}
	v, err := verify.NewTokenVerifier(opts)
	if err != nil {
		t.Fatalf("NewTokenVerifier: %v", err)
	}
	return v
}

func TestTokenVerify(t *testing.T) {
	dev := keys.Dev()
	ent := dev.Entitlement.Private
	conf := dev.Confirmation.Private
	attacker, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	attackerJWK, err := jwk.Import(attacker.Public())
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}

	// A key server: any fetch of jku/x5u would hit it.
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		set := jwk.NewSet()
		_ = set.AddKey(attackerJWK)
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(srv.Close)

	ok := func(h, c map[string]any) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return compact(t, mustJSON(t, h), mustJSON(t, c), es256(t, ent)) }
	}
	signed := func(h, c map[string]any, sign func(*testing.T) func([]byte) []byte) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return compact(t, mustJSON(t, h), mustJSON(t, c), sign(t)) }
	}
	rawJSON := func(h, c string) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return compact(t, []byte(h), []byte(c), es256(t, ent)) }
	}
	hdr, cl := baseHeader(), baseClaims()
	lee := int64(verify.DefaultLeeway / time.Second)
	pubPEM := dev.Entitlement.PublicPEM

	tests := []struct {
		name  string
		token func(t *testing.T) []byte
		want  verify.Kind // 0: must verify
	}{
		{"valid", ok(hdr, cl), 0},
		{"valid typ with application/ prefix, other case", ok(with(hdr, "typ", "application/ITO-Entitlement+JWT"), cl), 0},
		{"valid aud array", ok(hdr, with(cl, "aud", []any{"other", testAudience})), 0},
		{"valid nbf within leeway", ok(hdr, with(cl, "nbf", now.Unix()+lee-1)), 0},
		{"valid iat within leeway", ok(hdr, with(cl, "iat", now.Unix()+lee)), 0},
		{"valid exp just inside leeway", ok(hdr, with(cl, "exp", now.Unix()-lee+1)), 0},
		{"valid fractional exp", ok(hdr, with(cl, "exp", float64(now.Unix())+0.5)), 0},

		// alg
		{"alg none", signed(with(hdr, "alg", "none"), cl, func(*testing.T) func([]byte) []byte { return nil }), verify.KindHeader},
		{"alg None", signed(with(hdr, "alg", "None"), cl, func(*testing.T) func([]byte) []byte { return nil }), verify.KindHeader},
		{"alg NONE", signed(with(hdr, "alg", "NONE"), cl, func(*testing.T) func([]byte) []byte { return nil }), verify.KindHeader},
		{"alg none with a signature", signed(with(hdr, "alg", "none"), cl, func(t *testing.T) func([]byte) []byte { return es256(t, ent) }), verify.KindHeader},
		{"HS256 keyed with the public key PEM", signed(with(hdr, "alg", "HS256"), cl, func(*testing.T) func([]byte) []byte { return hs256(pubPEM) }), verify.KindHeader},
		{"hs512 lower case", signed(with(hdr, "alg", "hs512"), cl, func(*testing.T) func([]byte) []byte { return hs256(pubPEM) }), verify.KindHeader},
		{"alg missing", ok(with(hdr, "alg", nil), cl), verify.KindHeader},
		{"alg not a string", ok(with(hdr, "alg", 256), cl), verify.KindHeader},
		{"alg differs from configured (ES384)", ok(with(hdr, "alg", "ES384"), cl), verify.KindHeader},
		{"alg differs from configured (RS256, RSA-signed)", signed(with(hdr, "alg", "RS256"), cl, func(t *testing.T) func([]byte) []byte { return rs256(t, rsaKey) }), verify.KindHeader},
		{"alg unknown", ok(with(hdr, "alg", "XS999"), cl), verify.KindHeader},

		// embedded and remote keys, crit
		{"jwk header with attacker key", signed(with(hdr, "jwk", attackerJWK), cl, func(t *testing.T) func([]byte) []byte { return es256(t, attacker) }), verify.KindHeader},
		{"jku header", signed(with(hdr, "jku", srv.URL), cl, func(t *testing.T) func([]byte) []byte { return es256(t, attacker) }), verify.KindHeader},
		{"x5u header", signed(with(hdr, "x5u", srv.URL), cl, func(t *testing.T) func([]byte) []byte { return es256(t, attacker) }), verify.KindHeader},
		{"x5c header", ok(with(hdr, "x5c", []any{"MIIB"}), cl), verify.KindHeader},
		{"crit header", ok(with(hdr, "crit", []any{"exp"}, "exp", now.Unix()+300), cl), verify.KindHeader},
		{"b64 header", ok(with(hdr, "b64", false), cl), verify.KindHeader},

		// typ
		{"typ wrong", ok(with(hdr, "typ", "ito-confirmation+jwt"), cl), verify.KindHeader},
		{"typ JWT", ok(with(hdr, "typ", "JWT"), cl), verify.KindHeader},
		{"typ missing", ok(with(hdr, "typ", nil), cl), verify.KindHeader},

		// kid and purpose separation
		{"kid unknown", ok(with(hdr, "kid", "dev-entitlement-2"), cl), verify.KindUnknownKey},
		{"kid missing", ok(with(hdr, "kid", nil), cl), verify.KindUnknownKey},
		{"kid empty", ok(with(hdr, "kid", ""), cl), verify.KindUnknownKey},
		{"kid not a string", ok(with(hdr, "kid", 1), cl), verify.KindUnknownKey},
		{"confirmation key, own kid", signed(with(hdr, "kid", keys.ConfirmationKeyID), cl, func(t *testing.T) func([]byte) []byte { return es256(t, conf) }), verify.KindUnknownKey},
		{"confirmation key, entitlement kid", signed(hdr, cl, func(t *testing.T) func([]byte) []byte { return es256(t, conf) }), verify.KindSignature},
		{"attacker key, entitlement kid", signed(hdr, cl, func(t *testing.T) func([]byte) []byte { return es256(t, attacker) }), verify.KindSignature},

		// signature
		{"signature flipped", signed(hdr, cl, func(t *testing.T) func([]byte) []byte { return flip(es256(t, ent)) }), verify.KindSignature},
		{"payload swapped after signing", func(t *testing.T) []byte {
			good := compact(t, mustJSON(t, hdr), mustJSON(t, cl), es256(t, ent))
			p := strings.Split(string(good), ".")
			p[1] = b64(mustJSON(t, with(cl, "sub", "acct_evil")))
			return []byte(strings.Join(p, "."))
		}, verify.KindSignature},
		{"expired and badly signed", signed(hdr, with(cl, "exp", now.Unix()-3600), func(t *testing.T) func([]byte) []byte { return flip(es256(t, ent)) }), verify.KindSignature},
		{"wrong iss and badly signed", signed(hdr, with(cl, "iss", "https://evil"), func(t *testing.T) func([]byte) []byte { return es256(t, attacker) }), verify.KindSignature},

		// iss, aud
		{"iss wrong", ok(hdr, with(cl, "iss", "https://evil.test")), verify.KindIssuer},
		{"iss differs by trailing slash", ok(hdr, with(cl, "iss", testIssuer+"/")), verify.KindIssuer},
		{"iss missing", ok(hdr, with(cl, "iss", nil)), verify.KindClaims},
		{"iss not a string", ok(hdr, with(cl, "iss", 1)), verify.KindClaims},
		{"aud wrong", ok(hdr, with(cl, "aud", "other")), verify.KindAudience},
		{"aud array without ours", ok(hdr, with(cl, "aud", []any{"a", "b"})), verify.KindAudience},
		{"aud empty array", ok(hdr, with(cl, "aud", []any{})), verify.KindAudience},
		{"aud missing", ok(hdr, with(cl, "aud", nil)), verify.KindClaims},
		{"aud number", ok(hdr, with(cl, "aud", 7)), verify.KindClaims},
		{"aud array with number", ok(hdr, with(cl, "aud", []any{testAudience, 7})), verify.KindClaims},

		// time
		{"expired", ok(hdr, with(cl, "exp", now.Unix()-3600)), verify.KindExpired},
		{"exp exactly at leeway edge", ok(hdr, with(cl, "exp", now.Unix()-lee)), verify.KindExpired},
		{"exp just outside leeway", ok(hdr, with(cl, "exp", now.Unix()-lee-1)), verify.KindExpired},
		{"nbf in future", ok(hdr, with(cl, "nbf", now.Unix()+3600)), verify.KindNotYetValid},
		{"nbf just outside leeway", ok(hdr, with(cl, "nbf", now.Unix()+lee+1)), verify.KindNotYetValid},
		{"iat in future beyond leeway", ok(hdr, with(cl, "iat", now.Unix()+lee+1)), verify.KindIssuedInFuture},
		{"exp missing", ok(hdr, with(cl, "exp", nil)), verify.KindClaims},
		{"exp as string", ok(hdr, with(cl, "exp", "1800000300")), verify.KindClaims},
		{"exp negative", ok(hdr, with(cl, "exp", -1)), verify.KindClaims},
		{"exp beyond year 9999", ok(hdr, with(cl, "exp", int64(1)<<40)), verify.KindClaims},
		{"iat missing", ok(hdr, with(cl, "iat", nil)), verify.KindClaims},
		{"iat as bool", ok(hdr, with(cl, "iat", true)), verify.KindClaims},
		{"nbf as string", ok(hdr, with(cl, "nbf", "0")), verify.KindClaims},

		// other claims
		{"jti missing", ok(hdr, with(cl, "jti", nil)), verify.KindClaims},
		{"jti not a string", ok(hdr, with(cl, "jti", 5)), verify.KindClaims},
		{"sub not a string", ok(hdr, with(cl, "sub", []any{"a"})), verify.KindClaims},
		{"integer beyond int64", rawJSON(string(mustJSON(t, hdr)), `{"iss":"`+testIssuer+`","aud":"`+testAudience+`","jti":"j","iat":1799999990,"exp":1800000300,"n":9223372036854775808}`), verify.KindClaims},
		{"claims not an object", rawJSON(string(mustJSON(t, hdr)), `["iss"]`), verify.KindMalformed},
		{"claims not JSON", rawJSON(string(mustJSON(t, hdr)), `iss=x`), verify.KindMalformed},
		{"duplicate claim", rawJSON(string(mustJSON(t, hdr)), `{"iss":"`+testIssuer+`","aud":"`+testAudience+`","jti":"j","iat":1799999990,"exp":1800000300,"sub":"a","sub":"b"}`), verify.KindMalformed},

		// shape
		{"duplicate header member", rawJSON(`{"alg":"ES256","kid":"dev-entitlement-1","typ":"`+testTyp+`","alg":"none"}`, string(mustJSON(t, cl))), verify.KindMalformed},
		{"header not JSON", rawJSON(`alg`, string(mustJSON(t, cl))), verify.KindMalformed},
		{"JSON serialization", func(t *testing.T) []byte {
			h := jws.NewHeaders()
			_ = h.Set(jws.KeyIDKey, keys.EntitlementKeyID)
			_ = h.Set(jws.TypeKey, testTyp)
			b, err := jws.Sign(mustJSON(t, cl), jws.WithJSON(), jws.WithKey(jwa.ES256(), ent, jws.WithProtectedHeaders(h)))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}, verify.KindMalformed},
		{"JWE-shaped five parts", func(t *testing.T) []byte {
			return []byte(b64([]byte(`{"alg":"RSA-OAEP","enc":"A256GCM","kid":"dev-entitlement-1"}`)) + ".AAAA.AAAA.AAAA.AAAA")
		}, verify.KindMalformed},
		{"two parts", func(t *testing.T) []byte { return []byte(b64(mustJSON(t, hdr)) + "." + b64(mustJSON(t, cl))) }, verify.KindMalformed},
		{"four parts", func(t *testing.T) []byte { return append(ok(hdr, cl)(t), ".AAAA"...) }, verify.KindMalformed},
		{"padded base64", func(t *testing.T) []byte { return bytes.Replace(ok(hdr, cl)(t), []byte("."), []byte("=."), 1) }, verify.KindMalformed},
		{"standard base64 alphabet", func(t *testing.T) []byte {
			raw := ok(hdr, cl)(t)
			raw[bytes.LastIndexByte(raw, '.')+1] = '+'
			return raw
		}, verify.KindMalformed},
		{"trailing newline", func(t *testing.T) []byte { return append(ok(hdr, cl)(t), '\n') }, verify.KindMalformed},
		{"empty signature", signed(hdr, cl, func(*testing.T) func([]byte) []byte { return nil }), verify.KindMalformed},
		{"empty token", func(*testing.T) []byte { return nil }, verify.KindMalformed},
		{"17 KiB token", ok(hdr, with(cl, "pad", strings.Repeat("x", 17<<10))), verify.KindTooLarge},
	}
	v := newVerifier(t, verify.PurposeEntitlement, dev.Entitlement, testTyp, nil)
	// Cleanup runs after the parallel subtests have finished.
	t.Cleanup(func() {
		if n := hits.Load(); n != 0 {
			t.Errorf("key server was contacted %d times; verification must never fetch", n)
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := tc.token(t)
			got, err := v.Verify(raw, now)
			if tc.want == 0 {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if got.KeyID != keys.EntitlementKeyID || got.Issuer != testIssuer || got.Subject != "acct_123" || got.JTI != "jti-1" {
					t.Fatalf("claims = %+v", got)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify succeeded, want kind %s", tc.want)
			}
			if got != nil {
				t.Fatalf("claims returned with an error")
			}
			wantKind(t, err, verify.PurposeEntitlement, tc.want, tokenParts(raw)...)
		})
	}
}

func TestTokenVerifyClaims(t *testing.T) {
	dev := keys.Dev()
	v := newVerifier(t, verify.PurposeEntitlement, dev.Entitlement, testTyp, nil)
	raw, err := token.Mint(dev.Entitlement.Private, keys.EntitlementKeyID, "ES256", testTyp, with(baseClaims(), "nbf", now.Unix()-5))
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(raw, now)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Expiry.Equal(now.Add(300*time.Second)) || !c.IssuedAt.Equal(now.Add(-10*time.Second)) || !c.NotBefore.Equal(now.Add(-5*time.Second)) {
		t.Errorf("times = exp %v iat %v nbf %v", c.Expiry, c.IssuedAt, c.NotBefore)
	}
	if len(c.Audience) != 1 || c.Audience[0] != testAudience {
		t.Errorf("Audience = %v", c.Audience)
	}
	if got, ok := c.Raw["exact"].(int64); !ok || got != 9007199254740993 {
		t.Errorf("Raw[exact] = %#v, want int64 9007199254740993", c.Raw["exact"])
	}
	gpu, _ := c.Raw["gpu"].(map[string]any)
	if got, ok := gpu["nodes"].(int64); !ok || got != 2 {
		t.Errorf("Raw[gpu][nodes] = %#v, want int64 2", gpu["nodes"])
	}
	if got, ok := c.Raw["training_eligible"].(bool); !ok || !got {
		t.Errorf("Raw[training_eligible] = %#v", c.Raw["training_eligible"])
	}
	if got, ok := c.Raw["price_per_gpu_hour_usd"].(string); !ok || got != "2.49" {
		t.Errorf("Raw[price] = %#v", c.Raw["price_per_gpu_hour_usd"])
	}

	// A fractional number stays float64.
	raw, err = token.Mint(dev.Entitlement.Private, keys.EntitlementKeyID, "ES256", testTyp, with(baseClaims(), "ratio", 0.25))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = v.Verify(raw, now); err != nil {
		t.Fatal(err)
	}
	if got, ok := c.Raw["ratio"].(float64); !ok || got != 0.25 {
		t.Errorf("Raw[ratio] = %#v", c.Raw["ratio"])
	}
}

func TestTokenVerifyOptions(t *testing.T) {
	dev := keys.Dev()
	claims := with(baseClaims(), "jti", nil, "iat", now.Unix()+60)
	raw, err := token.Mint(dev.Caller.Private, keys.CallerKeyID, "ES256", "", claims)
	if err != nil {
		t.Fatal(err)
	}
	// Callers: no typ, no jti required, custom leeway and size.
	v := newVerifier(t, verify.PurposeCaller, dev.Caller, "", func(o *verify.TokenOptions) {
		o.RequireJTI = false
		o.Leeway = 90 * time.Second
	})
	if _, err := v.Verify(raw, now); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if v.Purpose() != verify.PurposeCaller {
		t.Fatalf("Purpose = %s", v.Purpose())
	}
	strict := newVerifier(t, verify.PurposeCaller, dev.Caller, "", func(o *verify.TokenOptions) { o.RequireJTI = false })
	_, err = strict.Verify(raw, now)
	wantKind(t, err, verify.PurposeCaller, verify.KindIssuedInFuture)

	small := newVerifier(t, verify.PurposeCaller, dev.Caller, "", func(o *verify.TokenOptions) { o.MaxBytes = len(raw) - 1 })
	_, err = small.Verify(raw, now)
	wantKind(t, err, verify.PurposeCaller, verify.KindTooLarge)

	// An EdDSA key and an RSA key in one JWKS, each verifying its own tokens.
	rsaKey, err := token.GenerateRSA(2048)
	if err != nil {
		t.Fatal(err)
	}
	set := jwk.NewSet()
	for _, k := range []struct {
		kid, alg string
		pub      any
	}{{"ed-1", "EdDSA", dev.ManifestEd25519.Public}, {"rsa-1", "RS256", rsaKey.Public()}} {
		jk, err := jwk.Import(k.pub)
		if err != nil {
			t.Fatal(err)
		}
		_ = jk.Set(jwk.KeyIDKey, k.kid)
		_ = jk.Set(jwk.AlgorithmKey, k.alg)
		_ = set.AddKey(jk)
	}
	multi, err := verify.NewTokenVerifier(verify.TokenOptions{Purpose: verify.PurposeCaller, Issuer: testIssuer, Audience: testAudience, Keys: set})
	if err != nil {
		t.Fatal(err)
	}
	edTok, err := token.Mint(dev.ManifestEd25519.Private, "ed-1", "EdDSA", "", baseClaims())
	if err != nil {
		t.Fatal(err)
	}
	rsaTok, err := token.Mint(rsaKey, "rsa-1", "RS256", "", baseClaims())
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range [][]byte{edTok, rsaTok} {
		if c, err := multi.Verify(tok, now); err != nil {
			t.Fatalf("Verify: %v", err)
		} else if c.KeyID == "" {
			t.Fatal("no key id")
		}
	}
	// The RSA token relabelled with the EdDSA kid.
	confused, err := token.Mint(rsaKey, "ed-1", "RS256", "", baseClaims())
	if err != nil {
		t.Fatal(err)
	}
	_, err = multi.Verify(confused, now)
	wantKind(t, err, verify.PurposeCaller, verify.KindHeader)
}

func TestNewTokenVerifierErrors(t *testing.T) {
	dev := keys.Dev()
	pubSet, err := dev.Entitlement.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	keyWith := func(raw any, kv ...any) jwk.Set {
		k, err := jwk.Import(raw)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(kv); i += 2 {
			if err := k.Set(kv[i].(string), kv[i+1]); err != nil {
				t.Fatal(err)
			}
		}
		s := jwk.NewSet()
		_ = s.AddKey(k)
		return s
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dup := jwk.NewSet()
	for _, k := range []keys.Key{dev.Entitlement, dev.Confirmation} {
		jk, _ := jwk.Import(k.Public)
		_ = jk.Set(jwk.KeyIDKey, "same")
		_ = jk.Set(jwk.AlgorithmKey, "ES256")
		_ = dup.AddKey(jk)
	}
	base := verify.TokenOptions{Purpose: verify.PurposeEntitlement, Issuer: testIssuer, Audience: testAudience, Type: testTyp, Keys: pubSet}
	tests := []struct {
		name   string
		mutate func(*verify.TokenOptions)
	}{
		{"negative leeway", func(o *verify.TokenOptions) { o.Leeway = -time.Second }},
		{"negative max bytes", func(o *verify.TokenOptions) { o.MaxBytes = -1 }},
		{"negative cache entries", func(o *verify.TokenOptions) { o.CacheEntries = -1 }},
		{"cache for single-use confirmations", func(o *verify.TokenOptions) {
			o.Purpose, o.Type, o.CacheEntries = verify.PurposeConfirmation, "ito-confirmation+jwt", 1
		}},
		{"unknown purpose", func(o *verify.TokenOptions) { o.Purpose = "bundle" }},
		{"manifest purpose", func(o *verify.TokenOptions) { o.Purpose = verify.PurposeManifest }},
		{"no issuer", func(o *verify.TokenOptions) { o.Issuer = "" }},
		{"no audience", func(o *verify.TokenOptions) { o.Audience = "" }},
		{"nil keys", func(o *verify.TokenOptions) { o.Keys = nil }},
		{"empty set", func(o *verify.TokenOptions) { o.Keys = jwk.NewSet() }},
		{"private key in set", func(o *verify.TokenOptions) {
			o.Keys = keyWith(dev.Entitlement.Private, jwk.KeyIDKey, "k", jwk.AlgorithmKey, "ES256")
		}},
		{"private Ed25519 key in set", func(o *verify.TokenOptions) {
			o.Keys = keyWith(dev.ManifestEd25519.Private, jwk.KeyIDKey, "k", jwk.AlgorithmKey, "EdDSA")
		}},
		{"symmetric key", func(o *verify.TokenOptions) {
			o.Keys = keyWith(dev.Entitlement.PublicPEM, jwk.KeyIDKey, "k", jwk.AlgorithmKey, "HS256")
		}},
		{"no kid", func(o *verify.TokenOptions) { o.Keys = keyWith(dev.Entitlement.Public, jwk.AlgorithmKey, "ES256") }},
		{"no alg", func(o *verify.TokenOptions) { o.Keys = keyWith(dev.Entitlement.Public, jwk.KeyIDKey, "k") }},
		{"alg for another curve", func(o *verify.TokenOptions) {
			o.Keys = keyWith(dev.Entitlement.Public, jwk.KeyIDKey, "k", jwk.AlgorithmKey, "ES384")
		}},
		{"P-384 key labelled ES256", func(o *verify.TokenOptions) {
			o.Keys = keyWith(p384.Public(), jwk.KeyIDKey, "k", jwk.AlgorithmKey, "ES256")
		}},
		{"ECDSA key labelled RS256", func(o *verify.TokenOptions) {
			o.Keys = keyWith(dev.Entitlement.Public, jwk.KeyIDKey, "k", jwk.AlgorithmKey, "RS256")
		}},
		{"use enc", func(o *verify.TokenOptions) {
			o.Keys = keyWith(dev.Entitlement.Public, jwk.KeyIDKey, "k", jwk.AlgorithmKey, "ES256", jwk.KeyUsageKey, "enc")
		}},
		{"duplicate kid", func(o *verify.TokenOptions) { o.Keys = dup }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := base
			tc.mutate(&o)
			if v, err := verify.NewTokenVerifier(o); err == nil {
				t.Fatalf("NewTokenVerifier = %v, want error", v)
			}
		})
	}
	if _, err := verify.NewTokenVerifier(base); err != nil {
		t.Fatalf("base options: %v", err)
	}
}

func TestErrorMessage(t *testing.T) {
	err := &verify.Error{Purpose: verify.PurposeConfirmation, Kind: verify.KindExpired}
	if got, want := err.Error(), "confirmation token: expired"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	err = &verify.Error{Purpose: verify.PurposeManifest, Kind: verify.KindSignature}
	if got, want := err.Error(), "manifest signature: signature"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := verify.Kind(0).String(); got != "Kind(0)" {
		t.Errorf("Kind(0) = %q", got)
	}
	if _, ok := verify.KindOf(nil); ok {
		t.Error("KindOf(nil) reported a kind")
	}
}

// FuzzTokenVerify checks that no input panics and every failure is a
// *verify.Error.
func FuzzTokenVerify(f *testing.F) {
	dev := keys.Dev()
	good, err := token.Mint(dev.Entitlement.Private, keys.EntitlementKeyID, "ES256", testTyp, baseClaims())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte("eyJhbGciOiJub25lIn0.e30."))
	f.Add([]byte(`{"payload":"e30","signatures":[]}`))
	f.Add([]byte("a.b.c.d.e"))
	set, err := dev.Entitlement.KeySet()
	if err != nil {
		f.Fatal(err)
	}
	v, err := verify.NewTokenVerifier(verify.TokenOptions{
		Purpose: verify.PurposeEntitlement, Issuer: testIssuer, Audience: testAudience, Type: testTyp, Keys: set,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := v.Verify(raw, now)
		if err == nil {
			if c == nil || c.KeyID != keys.EntitlementKeyID {
				t.Fatalf("success without claims: %+v", c)
			}
			return
		}
		if _, ok := verify.KindOf(err); !ok {
			t.Fatalf("error %v (%T) is not a *verify.Error", err, err)
		}
	})
}

package ticket_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

var t0 = time.Unix(1_790_000_000, 0).UTC()

func claims() ticket.Claims {
	return ticket.Claims{
		Account: "acct-1", ID: "dec_0123456789abcdef0123456789abcdef", RunID: "run_01JDEXAMPLE0000000000000",
		BookingID: "bk-1", Action: "train.create",
		ManifestDigest: "sha256:" + strings.Repeat("ab", 32),
		WorldSize:      16, Nodes: 2, GPUsPerNode: 8, GPUType: "H100-SXM-80GB", Region: "eu-west",
		BundleRevision: "rev-1", IssuedAt: t0, Expiry: t0.Add(time.Hour),
	}
}

func devSigner(t *testing.T) *ticket.Signer {
	t.Helper()
	k := keys.Dev().Ticket
	s, err := ticket.NewSigner(ticket.SignerOptions{Key: k.Private, KeyID: k.KeyID, Algorithm: k.Algorithm, Issuer: "https://itogate.test"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func verifierFor(t *testing.T, s *ticket.Signer) *ticket.Verifier {
	t.Helper()
	return verifierWith(t, s, 0, 0)
}

// verifierWith is verifierFor with a leeway and cache entries (0: the
// defaults of ticket.VerifierOptions).
func verifierWith(t *testing.T, s *ticket.Signer, leeway time.Duration, cacheEntries int) *ticket.Verifier {
	t.Helper()
	set, err := verify.LoadJWKS(s.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	v, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: "https://itogate.test", Keys: set, Leeway: leeway, CacheEntries: cacheEntries})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestIssueVerifyRoundTrip(t *testing.T) {
	for _, alg := range []string{"EdDSA", "ES256"} {
		t.Run(alg, func(t *testing.T) {
			s := devSigner(t)
			if alg == "ES256" {
				k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				var err error
				s, err = ticket.NewSigner(ticket.SignerOptions{Key: k, KeyID: "t-es", Algorithm: "ES256", Issuer: "https://itogate.test"})
				if err != nil {
					t.Fatal(err)
				}
			}
			raw, err := s.Issue(claims())
			if err != nil {
				t.Fatal(err)
			}
			got, err := verifierFor(t, s).Verify([]byte(raw), t0.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			want := claims()
			want.Issuer, want.Audience = "https://itogate.test", ticket.DefaultAudience
			if got != want {
				t.Fatalf("claims\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestEd25519TicketIsDeterministic(t *testing.T) {
	s := devSigner(t)
	a, _ := s.Issue(claims())
	b, _ := s.Issue(claims())
	if a != b {
		t.Fatal("the same claims signed twice gave two tickets")
	}
}

func TestVerifyRefuses(t *testing.T) {
	s := devSigner(t)
	v := verifierFor(t, s)
	raw, err := s.Issue(claims())
	if err != nil {
		t.Fatal(err)
	}
	dev := keys.Dev()
	entitlementTyped, _ := token.Mint(dev.Ticket.Private, dev.Ticket.KeyID, "EdDSA", "ito-entitlement+jwt", claims().Map())
	otherAud := claims().Map()
	otherAud["iss"], otherAud["aud"] = "https://itogate.test", "itogate"
	wrongAud, _ := token.Mint(dev.Ticket.Private, dev.Ticket.KeyID, "EdDSA", ticket.Type, otherAud)
	noRun := claims().Map()
	noRun["iss"], noRun["aud"] = "https://itogate.test", ticket.DefaultAudience
	delete(noRun, "run_id")
	missing, _ := token.Mint(dev.Ticket.Private, dev.Ticket.KeyID, "EdDSA", ticket.Type, noRun)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	forged, _ := token.Mint(other, dev.Ticket.KeyID, "EdDSA", ticket.Type, noRun)

	flip := []byte(raw)
	i := strings.LastIndexByte(raw, '.') + 5
	flip[i] ^= 0x01
	cases := []struct {
		name string
		raw  string
		now  time.Time
		kind verify.Kind
	}{
		{"one byte of the signature changed", string(flip), t0, verify.KindSignature},
		{"expired", raw, t0.Add(time.Hour + time.Minute), verify.KindExpired},
		{"issued in the future", raw, t0.Add(-time.Hour), verify.KindIssuedInFuture},
		{"another purpose's typ", string(entitlementTyped), t0, verify.KindHeader},
		{"itogate's API audience", string(wrongAud), t0, verify.KindAudience},
		{"run_id missing", string(missing), t0, verify.KindClaims},
		{"signed by another key", string(forged), t0, verify.KindSignature},
		{"JSON serialization", `{"payload":"e30","signatures":[]}`, t0, verify.KindMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify([]byte(tc.raw), tc.now)
			var ve *verify.Error
			if !errors.As(err, &ve) || ve.Kind != tc.kind || ve.Purpose != verify.PurposeTicket {
				t.Fatalf("err %v, want ticket %s", err, tc.kind)
			}
			if strings.Contains(err.Error(), tc.raw[:10]) {
				t.Fatal("the error echoes the token")
			}
		})
	}
}

func TestIssueRefusesUndefinedGrants(t *testing.T) {
	s := devSigner(t)
	for name, mut := range map[string]func(*ticket.Claims){
		"world size not nodes × gpus": func(c *ticket.Claims) { c.WorldSize = 64 },
		"exp at iat":                  func(c *ticket.Claims) { c.Expiry = c.IssuedAt },
		"no run":                      func(c *ticket.Claims) { c.RunID = "" },
		"digest not sha256":           func(c *ticket.Claims) { c.ManifestDigest = "md5:00" },
	} {
		c := claims()
		mut(&c)
		if _, err := s.Issue(c); !errors.Is(err, ticket.ErrClaims) {
			t.Errorf("%s: err %v, want ErrClaims", name, err)
		}
	}
}

func TestNewSignerRefusesAlgorithmsAndKeys(t *testing.T) {
	dev := keys.Dev()
	for name, o := range map[string]ticket.SignerOptions{
		"RS256":               {Key: dev.Bundle.Private, KeyID: "k", Algorithm: "RS256", Issuer: "i"},
		"EdDSA with ECDSA":    {Key: dev.Caller.Private, KeyID: "k", Algorithm: "EdDSA", Issuer: "i"},
		"ES256 with Ed25519":  {Key: dev.Ticket.Private, KeyID: "k", Algorithm: "ES256", Issuer: "i"},
		"HS256":               {Key: dev.Ticket.Private, KeyID: "k", Algorithm: "HS256", Issuer: "i"},
		"no issuer":           {Key: dev.Ticket.Private, KeyID: "k", Algorithm: "EdDSA"},
		"previous shares kid": {Key: dev.Ticket.Private, KeyID: dev.Caller.KeyID, Algorithm: "EdDSA", Issuer: "i", Previous: mustSet(t, dev.Caller)},
	} {
		if _, err := ticket.NewSigner(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func mustSet(t *testing.T, k keys.Key) jwk.Set {
	t.Helper()
	set, err := k.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestExpiryIsTheEarlierBound(t *testing.T) {
	term := t0.Add(10 * time.Hour)
	if got := ticket.Expiry(t0, term, 2.5); !got.Equal(t0.Add(150 * time.Minute)) {
		t.Errorf("declared end first: %v", got)
	}
	if got := ticket.Expiry(t0, term, 24); !got.Equal(term) {
		t.Errorf("term end first: %v", got)
	}
	if got := ticket.Expiry(t0, term.Add(900*time.Millisecond), 24); got.After(term.Add(900 * time.Millisecond)) {
		t.Errorf("rounded up past the term: %v", got)
	}
}

func TestCheckExpectations(t *testing.T) {
	c := claims()
	if err := c.Check(ticket.Expect{RunID: c.RunID, BookingID: "bk-1", WorldSize: 16, Account: "acct-1"}); err != nil {
		t.Fatal(err)
	}
	for claim, e := range map[string]ticket.Expect{
		"run_id":     {RunID: "run_other"},
		"world_size": {WorldSize: 8},
		"sub":        {Account: "acct-2"},
		"action":     {Action: "train.cancel"},
	} {
		var me *ticket.MismatchError
		if err := c.Check(e); !errors.As(err, &me) || me.Claim != claim {
			t.Errorf("%s: err %v", claim, err)
		}
	}
}

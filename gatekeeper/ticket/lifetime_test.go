package ticket_test

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// TestCapped: a ticket lives at most its lifetime, never past the exp it
// had (the term's or the run's end), in whole seconds.
func TestCapped(t *testing.T) {
	exp := t0.Add(time.Hour)
	if got := ticket.Capped(exp, t0, ticket.DefaultLifetime); !got.Equal(t0.Add(5 * time.Minute)) {
		t.Fatalf("Capped = %v, want iat + 5 min", got)
	}
	if got := ticket.Capped(t0.Add(2*time.Minute), t0, ticket.DefaultLifetime); !got.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("Capped = %v, want the earlier end kept", got)
	}
	if got := ticket.Capped(exp, t0.Add(700*time.Millisecond), time.Minute); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("Capped = %v, want rounded down to the second", got)
	}
}

// TestOfflineWindow: the window in which an offline verifier (`itogate
// ticket verify`) still accepts a ticket whose run was withdrawn the instant
// it was issued is exactly the ticket lifetime, 300 s with the defaults
// (docs/tickets.md): the verifier allows no leeway on exp, with the default
// leeway, with a verifier given an hour of it, and through its cache (the
// webhook's verifier caches).
func TestOfflineWindow(t *testing.T) {
	s := devSigner(t)
	c := claims()
	c.Expiry = ticket.Capped(t0.Add(6*time.Hour), t0, ticket.DefaultLifetime)
	raw, err := s.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	if ticket.DefaultLifetime != 300*time.Second {
		t.Fatalf("the documented default lifetime is 300 s, got %v", ticket.DefaultLifetime)
	}
	for _, leeway := range []time.Duration{0, verify.DefaultLeeway, time.Hour} {
		for _, cache := range []int{0, 8} {
			v := verifierWith(t, s, leeway, cache)
			if _, err := v.Verify([]byte(raw), t0.Add(ticket.DefaultLifetime-time.Second)); err != nil {
				t.Fatalf("leeway %v, cache %d: 1 s inside the lifetime: %v", leeway, cache, err)
			}
			_, err = v.Verify([]byte(raw), t0.Add(ticket.DefaultLifetime))
			if k, _ := verify.KindOf(err); k != verify.KindExpired {
				t.Fatalf("leeway %v, cache %d: at the lifetime's end: %v, want expired", leeway, cache, err)
			}
		}
	}
}

// TestLeewayOnIssuedAt: the ticket verifier's leeway still covers a
// verifier clock behind the issuer's on iat.
func TestLeewayOnIssuedAt(t *testing.T) {
	s := devSigner(t)
	raw, err := s.Issue(claims())
	if err != nil {
		t.Fatal(err)
	}
	v := verifierWith(t, s, 0, 0)
	if _, err := v.Verify([]byte(raw), t0.Add(-verify.DefaultLeeway)); err != nil {
		t.Fatalf("a clock %v behind: %v", verify.DefaultLeeway, err)
	}
	_, err = v.Verify([]byte(raw), t0.Add(-verify.DefaultLeeway-time.Second))
	if k, _ := verify.KindOf(err); k != verify.KindIssuedInFuture {
		t.Fatalf("a clock past the leeway behind: %v, want issued in the future", err)
	}
}

// TestVerifyAllowExpired: an expired ticket verifies with expired=true and
// its claims; a live one with expired=false; a forged or altered one, or
// one with its exp moved, does not verify at all.
func TestVerifyAllowExpired(t *testing.T) {
	s := devSigner(t)
	v := verifierFor(t, s)
	raw, err := s.Issue(claims())
	if err != nil {
		t.Fatal(err)
	}
	c, expired, err := v.VerifyAllowExpired([]byte(raw), t0.Add(time.Minute))
	if err != nil || expired || c.RunID != claims().RunID {
		t.Fatalf("live: %+v, %v, %v", c, expired, err)
	}
	c, expired, err = v.VerifyAllowExpired([]byte(raw), t0.Add(30*24*time.Hour))
	if err != nil || !expired || c.RunID != claims().RunID || !c.Expiry.Equal(t0.Add(time.Hour)) {
		t.Fatalf("expired: %+v, %v, %v", c, expired, err)
	}
	// The same payload with a later exp, under the old signature.
	parts := strings.Split(raw, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	moved := strings.Replace(string(payload), `"exp":`+itoa(t0.Add(time.Hour).Unix()), `"exp":`+itoa(t0.Add(48*time.Hour).Unix()), 1)
	if moved == string(payload) {
		t.Fatal("the test did not move exp")
	}
	forged := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(moved)) + "." + parts[2]
	for name, tok := range map[string]string{"exp moved": forged, "signature cut": parts[0] + "." + parts[1] + ".AAAA",
		"not a JWS": "x.y"} {
		if _, expired, err := v.VerifyAllowExpired([]byte(tok), t0.Add(30*24*time.Hour)); err == nil || expired {
			t.Fatalf("%s: verified (expired %v)", name, expired)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

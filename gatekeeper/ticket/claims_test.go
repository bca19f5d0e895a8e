package ticket_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ticket"
)

// Claims of docs/tickets.md ("What a ticket is", "Lifetime and renewal")
// that the other tests of this package leave open.

// TestTicketClaim_ProtectedHeaderExactlyAlgKidTyp: "Protected header:
// exactly alg, kid and typ: ito-ticket+jwt", for both ticket algorithms.
func TestTicketClaim_ProtectedHeaderExactlyAlgKidTyp(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	es, err := ticket.NewSigner(ticket.SignerOptions{Key: k, KeyID: "t-es", Algorithm: "ES256", Issuer: "https://itogate.test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		alg, kid string
		s        *ticket.Signer
	}{
		{"EdDSA", "dev-ticket-1", devSigner(t)},
		{"ES256", "t-es", es},
	} {
		t.Run(tc.alg, func(t *testing.T) {
			raw, err := tc.s.Issue(claims())
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(raw, ".")
			if len(parts) != 3 {
				t.Fatalf("not a compact JWS: %d parts", len(parts))
			}
			b, err := base64.RawURLEncoding.DecodeString(parts[0])
			if err != nil {
				t.Fatal(err)
			}
			var hdr map[string]any
			if err := json.Unmarshal(b, &hdr); err != nil {
				t.Fatal(err)
			}
			if names := slices.Sorted(maps.Keys(hdr)); !slices.Equal(names, []string{"alg", "kid", "typ"}) {
				t.Fatalf("protected header members %v, want exactly [alg kid typ]", names)
			}
			if hdr["alg"] != tc.alg || hdr["kid"] != tc.kid || hdr["typ"] != ticket.Type || ticket.Type != "ito-ticket+jwt" {
				t.Fatalf("header %v, want alg %s, kid %s, typ ito-ticket+jwt", hdr, tc.alg, tc.kid)
			}
		})
	}
}

// TestTicketClaim_ExpIsTheEarliestBound: "exp: the earliest of iat +
// tickets.lifetime (300 s by default), the booking term's end and the run's
// declared wall-clock end, rounded down to the second" — the composition
// the admission signs (ticket.Expiry, then ticket.Capped), each bound
// winning in turn, and the documented lifetime bounds (1m to 1h, default
// 5m).
func TestTicketClaim_ExpIsTheEarliestBound(t *testing.T) {
	if ticket.DefaultLifetime != 300*time.Second || ticket.MinLifetime != time.Minute || ticket.MaxLifetime != time.Hour {
		t.Fatalf("lifetimes %v [%v, %v], documented 300 s [1m, 1h]", ticket.DefaultLifetime, ticket.MinLifetime, ticket.MaxLifetime)
	}
	iat := t0.Add(400 * time.Millisecond) // an admission inside a second
	exp := func(termEnd time.Time, hours float64) time.Time {
		return ticket.Capped(ticket.Expiry(iat, termEnd, hours), iat, ticket.DefaultLifetime)
	}
	cases := []struct {
		name    string
		termEnd time.Time
		hours   float64
		want    time.Time
	}{
		{"the lifetime", t0.Add(30 * 24 * time.Hour), 6, t0.Add(300 * time.Second)},
		{"the term's end", t0.Add(90*time.Second + 700*time.Millisecond), 6, t0.Add(90 * time.Second)},
		{"the declared end", t0.Add(30 * 24 * time.Hour), 0.02, t0.Add(72 * time.Second)}, // 0.02 h = 72 s after iat, floored
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := exp(tc.termEnd, tc.hours)
			if !got.Equal(tc.want) || got.Nanosecond() != 0 {
				t.Fatalf("exp %v, want %v (whole seconds)", got, tc.want)
			}
			if got.After(iat.Add(ticket.DefaultLifetime)) || got.After(tc.termEnd) {
				t.Fatalf("exp %v after a bound", got)
			}
		})
	}
}

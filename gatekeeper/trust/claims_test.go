package trust

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Claims of docs/tickets.md ("Keys", "What a ticket is") checked against
// the trust set the runtime builds.

// TestTicketClaim_JWKSSigningKeyFirstThenPrevious: "The public keys are
// served … the signing key first, then the previous keys", and a ticket the
// previous key signed still verifies with the served set while a rotation
// overlaps.
func TestTicketClaim_JWKSSigningKeyFirstThenPrevious(t *testing.T) {
	t.Parallel()
	tr, dir := prodTrust(t)
	s, err := FromConfig(tr)
	if err != nil {
		t.Fatal(err)
	}
	// The key being rotated out: its own signer gives its public JWKS.
	oldKey, err := token.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	old, err := ticket.NewSigner(ticket.SignerOptions{Key: oldKey, KeyID: "t0", Algorithm: "EdDSA", Issuer: "https://itogate.example"})
	if err != nil {
		t.Fatal(err)
	}
	prev := filepath.Join(dir, "ticket-t0.jwks.json")
	if err := os.WriteFile(prev, old.JWKS(), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh, err := token.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	freshPriv, _, err := token.WriteKeyPair(dir, "ticket-t1", fresh)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LoadTickets(config.Tickets{Issuer: "https://itogate.example", PreviousJWKSFile: prev,
		SigningKey: config.TicketKey{PEMFile: freshPriv, KeyID: "t1", Algorithm: "EdDSA"}}); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(s.Tickets.JWKS(), &doc); err != nil {
		t.Fatal(err)
	}
	var kids []any
	for _, k := range doc.Keys {
		kids = append(kids, k["kid"])
		if _, private := k["d"]; private {
			t.Fatalf("the published JWKS holds a private member: %v", k["kid"])
		}
	}
	if len(kids) != 2 || kids[0] != "t1" || kids[1] != "t0" {
		t.Fatalf("published kids %v, want [t1 t0]: the signing key first, then the previous keys", kids)
	}
	// A ticket the previous key signed verifies with the published set.
	set, err := verify.LoadJWKS(s.Tickets.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	v, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: "https://itogate.example", Keys: set})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_790_000_000, 0)
	c := ticket.Claims{Account: "acct-1", ID: "dec_0123456789abcdef0123456789abcdef", RunID: "run_01JDEXAMPLE0000000000000",
		BookingID: "bk-1", Action: "train.create", ManifestDigest: "sha256:" + string(make64('a')),
		WorldSize: 8, Nodes: 1, GPUsPerNode: 8, GPUType: "H100-SXM-80GB", Region: "eu-west", BundleRevision: "rev-1",
		IssuedAt: now, Expiry: now.Add(5 * time.Minute)}
	for name, signer := range map[string]*ticket.Signer{"previous key": old, "signing key": s.Tickets} {
		raw, err := signer.Issue(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify([]byte(raw), now.Add(time.Minute)); err != nil {
			t.Errorf("a ticket signed by the %s does not verify with the published set: %v", name, err)
		}
	}
}

func make64(c byte) []byte {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return b
}

// TestTicketClaim_NoOtherVerifierAcceptsTheTicketTyp: docs/tickets.md
// ("What a ticket is") says "No other purpose's verifier accepts that typ
// [ito-ticket+jwt]". Each purpose's verifier is given a token that is valid
// for that purpose in every respect (its own key, issuer, audience, claims)
// except that its typ is the ticket's (in the spellings RFC 7515 §4.1.9
// makes equal): each refuses it on the header, the purposes configured
// without a typ (callers, depositors, revokers, schedulers) too, since
// every itogate type ("ito-…") is reserved. Those verifiers still take a
// token of their own with any other typ, or none.
func TestTicketClaim_NoOtherVerifierAcceptsTheTicketTyp(t *testing.T) {
	s, err := Dev()
	if err != nil {
		t.Fatal(err)
	}
	d := keys.Dev()
	now := time.Now()
	base := func(iss, aud string) map[string]any {
		return map[string]any{"iss": iss, "aud": aud, "sub": "someone", "account": "acct_a", "jti": "jti-typ-probe",
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	}
	cases := []struct {
		name   string
		v      *verify.TokenVerifier
		key    keys.Key
		claims map[string]any
	}{
		{"callers", s.Callers, d.Caller, base(DevCallerIssuer, DevAudience)},
		{"depositors", s.Depositors, d.Depositor, base(DevDepositorIssuer, DevDepositAudience)},
		{"revokers", s.Revokers, d.Revoker, base(DevRevokerIssuer, DevRevokeAudience)},
		{"schedulers", s.Schedulers, d.Scheduler, base(DevSchedulerIssuer, DevSchedulerAudience)},
		{"entitlement", s.Entitlement, d.Entitlement, base(DevEntitlementIssuer, DevAudience)},
		{"confirmation", s.Confirmation, d.Confirmation, base(DevConfirmationIssuer, DevAudience)},
		{"evals", s.Evals, d.Evals, base(DevEvalsIssuer, DevEvalsAudience)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, typ := range []string{ticket.Type, "application/ITO-Ticket+JWT"} {
				raw, err := token.Mint(tc.key.Private, tc.key.KeyID, tc.key.Algorithm, typ, tc.claims)
				if err != nil {
					t.Fatal(err)
				}
				_, err = tc.v.Verify(raw, now)
				if k, ok := verify.KindOf(err); !ok || k != verify.KindHeader {
					t.Errorf("the %s verifier answered %v to a token of typ %s, want a refusal of kind header",
						tc.name, err, typ)
				}
			}
		})
	}
	// A purpose without a typ still takes its own tokens, typ JWT or none.
	for _, typ := range []string{"JWT", "at+jwt", ""} {
		raw, err := token.Mint(d.Caller.Private, d.Caller.KeyID, d.Caller.Algorithm, typ, base(DevCallerIssuer, DevAudience))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Callers.Verify(raw, now); err != nil {
			t.Errorf("the callers verifier refused its own token of typ %q: %v", typ, err)
		}
	}
}

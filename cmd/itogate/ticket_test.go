package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// TestTicketVerifyOffline: a ticket verifies with nothing but the JWKS (or
// the PEM) and answers each documented exit code; a one-byte change fails.
func TestTicketVerifyOffline(t *testing.T) {
	ts, err := trust.Dev()
	if err != nil {
		t.Fatal(err)
	}
	now := testNow()
	c := testTicketClaims(now)
	raw := issueTestTicket(t, ts)
	expired := c
	expired.IssuedAt, expired.Expiry = now.Add(-3*time.Hour), now.Add(-2*time.Hour)
	rawExpired, _ := ts.Tickets.Issue(expired)

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	jwks := write("jwks.json", string(ts.Tickets.JWKS()))
	pem := write("ticket.pub.pem", string(keys.Dev().Ticket.PublicPEM))
	good := write("good.jws", raw+"\n")
	b := []byte(raw)
	b[len(b)/2] ^= 0x02 // one byte of the payload
	altered := write("altered.jws", string(b))
	old := write("expired.jws", rawExpired)

	base := []string{"ticket", "verify", "--jwks", jwks, "--issuer", trust.DevTicketIssuer}
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"valid with the JWKS", append(base, "--run-id", c.RunID, "--booking", "bk-1", "--world-size", "64", good), 0, "ok: run " + c.RunID},
		{"valid with the PEM", []string{"ticket", "verify", "--pem", pem, "--key-id", keys.TicketKeyID, "--algorithm", "EdDSA",
			"--issuer", trust.DevTicketIssuer, "--account", "acct-1", good}, 0, "ok: run"},
		{"one byte changed", append(base, altered), 1, "ticket token"},
		{"expired", append(base, old), 1, "expired"},
		{"another issuer", []string{"ticket", "verify", "--jwks", jwks, "--issuer", "https://other.invalid", good}, 1, "issuer"},
		{"another run", append(base, "--run-id", "run_01JDOTHER00000000000000000", good), 3, "run_id"},
		{"more GPUs than admitted", append(base, "--world-size", "128", good), 3, "world_size"},
		{"no key", []string{"ticket", "verify", "--issuer", "x", good}, 2, "--jwks or --pem"},
		{"no issuer", []string{"ticket", "verify", "--jwks", jwks, good}, 2, "--issuer"},
		{"missing ticket file", append(base, filepath.Join(dir, "nope")), 2, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			code, out, errOut := r.exit, r.stdout, r.stderr
			if code != tc.code || !strings.Contains(out+errOut, tc.says) {
				t.Fatalf("exit %d, want %d; out %q err %q (want %q)", code, tc.code, out, errOut, tc.says)
			}
			if strings.Contains(out+errOut, raw[:40]) {
				t.Fatal("the ticket was echoed")
			}
		})
	}
}

// testNow is now, to the second.
func testNow() time.Time { return time.Now().UTC().Truncate(time.Second) }

// testTicketClaims are the claims of the test ticket, issued at now.
func testTicketClaims(now time.Time) ticket.Claims {
	return ticket.Claims{
		Account: "acct-1", ID: "dec_00112233445566778899aabbccddeeff", RunID: "run_01JDEXAMPLE0000000000000",
		BookingID: "bk-1", Action: "train.create", ManifestDigest: "sha256:" + strings.Repeat("0f", 32),
		WorldSize: 64, Nodes: 8, GPUsPerNode: 8, GPUType: "H100-SXM-80GB", Region: "eu-west",
		BundleRevision: "rev", IssuedAt: now, Expiry: now.Add(time.Hour),
	}
}

// issueTestTicket issues the test ticket, valid for an hour from now.
func issueTestTicket(t *testing.T, ts *trust.Set) string {
	t.Helper()
	raw, err := ts.Tickets.Issue(testTicketClaims(testNow()))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

package trust

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/token"
)

// TestLoadTickets: a fresh Ed25519 key signs tickets; the published
// development ticket key and a key another purpose uses are refused.
func TestLoadTickets(t *testing.T) {
	t.Parallel()
	tr, dir := prodTrust(t)
	s, err := FromConfig(tr)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := token.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	freshPriv, _, err := token.WriteKeyPair(dir, "ticket", fresh)
	if err != nil {
		t.Fatal(err)
	}
	devPriv := filepath.Join(dir, "dev-ticket.key.pem")
	if err := os.WriteFile(devPriv, keys.Dev().Ticket.PrivatePEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// A pair whose public half is configured for callers.
	shared, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	sharedPriv, sharedPub, err := token.WriteKeyPair(dir, "shared", shared)
	if err != nil {
		t.Fatal(err)
	}
	tr2 := tr
	tr2.Callers.PEMFile = sharedPub
	s2, err := FromConfig(tr2)
	if err != nil {
		t.Fatal(err)
	}

	cfg := func(path, alg string) config.Tickets {
		return config.Tickets{Issuer: "https://itogate.example", SigningKey: config.TicketKey{PEMFile: path, KeyID: "t1", Algorithm: alg}}
	}
	if err := s.LoadTickets(cfg(freshPriv, "EdDSA")); err != nil || s.Tickets == nil {
		t.Fatalf("fresh key: %v", err)
	}
	if !strings.Contains(string(s.Tickets.JWKS()), `"kid":"t1"`) {
		t.Fatalf("jwks %s", s.Tickets.JWKS())
	}
	for name, tc := range map[string]struct {
		set  *Set
		cfg  config.Tickets
		want string
	}{
		"development key":    {s, cfg(devPriv, "EdDSA"), "development key"},
		"shared with caller": {s2, cfg(sharedPriv, "ES256"), "also configured for callers"},
		"algorithm mismatch": {s, cfg(freshPriv, "ES256"), "ES256 needs an ECDSA P-256 key"},
		"missing file":       {s, cfg(filepath.Join(dir, "nope.pem"), "EdDSA"), "no such file"},
	} {
		if err := tc.set.LoadTickets(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

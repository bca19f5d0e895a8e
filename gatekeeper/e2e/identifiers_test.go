package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// TestIdentifierBoundsBeforeTheLedger: a signed jti, sub or account the
// ledger cannot hold (longer than ledger.MaxIDLen, or holding NUL or another
// control character, C1 included) is the token's fault: the same 4xx code on bbolt and
// PostgreSQL, never 503 LEDGER_UNAVAILABLE, and nothing is written. The
// longest acceptable identifier works on both.
func TestIdentifierBoundsBeforeTheLedger(t *testing.T) {
	long := strings.Repeat("j", ledger.MaxIDLen+1)
	longest := strings.Repeat("j", ledger.MaxIDLen)
	forEachBackend(t, func(t *testing.T, base string, store ledger.Store) {
		a := newActor(t, base, "acct_ids", "bk_ids_01")
		ctx := context.Background()
		deposit := func(claims map[string]any) answer {
			t.Helper()
			tok, err := a.mint(a.keys.Confirmation, config.TypeConfirmation, claims)
			if err != nil {
				t.Fatal(err)
			}
			r, err := parse(a.desk.Deposit(ctx, tok))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		now := time.Now().Unix()
		conf := func(edit map[string]any) map[string]any {
			c := map[string]any{
				"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": a.account, "act": "train.create",
				"booking_id": a.booking, "cost_usd": "0.00", "iat": now, "exp": now + 600,
			}
			for k, v := range edit {
				c[k] = v
			}
			return c
		}
		for name, edit := range map[string]map[string]any{
			"jti over the bound": {"jti": long},
			"jti with NUL":       {"jti": "jti-\x00-x"},
			"jti with a newline": {"jti": "jti-\n-x"},
			"jti with a C1 NEL":  {"jti": "jti-\u0085-x"},
			"sub over the bound": {"sub": long},
			"sub with NUL":       {"sub": "acct\x00x"},
		} {
			r := deposit(conf(edit))
			if r.Status != http.StatusForbidden || r.code() != "CONFIRMATION_INVALID" {
				t.Errorf("deposit, %s: %s; want 403 CONFIRMATION_INVALID", name, r)
			}
		}
		if r := deposit(conf(map[string]any{"jti": longest})); r.Status != http.StatusCreated {
			t.Errorf("deposit with a jti of exactly %d bytes: %s", ledger.MaxIDLen, r)
		}

		for name, account := range map[string]string{"account over the bound": long, "account with NUL": "acct\x00x"} {
			bad := newActor(t, base, account, a.booking)
			r, err := bad.status(ctx, "k-ids")
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != http.StatusUnauthorized || r.code() != "CALLER_UNAUTHENTICATED" {
				t.Errorf("status, %s: %s; want 401 CALLER_UNAUTHENTICATED", name, r)
			}
			r, err = bad.admit(ctx, bad.create(a.entitlement(t, nil), "cfr_"+strings.Repeat("0", 32), "k-ids"))
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != http.StatusUnauthorized || r.code() != "CALLER_UNAUTHENTICATED" {
				t.Errorf("admission, %s: %s; want 401 CALLER_UNAUTHENTICATED", name, r)
			}
		}
		// An entitlement jti the ledger cannot hold (it records and revokes
		// entitlements by jti) is refused alike on both backends (it was a 503
		// from the revocation lookup on PostgreSQL, or from the commit).
		ref := a.confirmation(t, "train.create", nil)
		for name, jti := range map[string]string{"entitlement jti with NUL": "ent\x00x", "entitlement jti over the bound": long} {
			ent := a.entitlement(t, func(c map[string]any) { c["jti"] = jti })
			key := "k-ent-" + strings.ReplaceAll(name, " ", "-")
			a.mustAdmit(t, a.create(ent, ref, key), http.StatusForbidden, "ENTITLEMENT_INVALID")
		}
		// The longest account works end to end.
		ok := newActor(t, base, strings.Repeat("a", ledger.MaxIDLen), "bk_ids_02")
		ok.mustAdmit(t, ok.create(ok.entitlement(t, nil), ok.confirmation(t, "train.create", nil), "k-ids-ok"), http.StatusOK, "")
		if rep := checkLedger(t, store); rep.Admissions != 1 || rep.Confirmations != 3 || rep.Consumed != 1 {
			t.Errorf("ledger after the refusals: %+v, want the one admission and the three good deposits", rep)
		}
	})
}

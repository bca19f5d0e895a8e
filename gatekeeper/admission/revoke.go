package admission

import (
	"context"
	"errors"
	"net/http"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// revoked ends an admission when (kind, subject) is revoked in the ledger.
// The ledger checks again inside the commit, so a revocation that lands
// between this read and the commit still denies.
func (s *Service) revoked(ctx context.Context, kind ledger.RevocationKind, subject string) (Outcome, bool) {
	if subject == "" {
		return Outcome{}, false
	}
	r, err := s.opts.Ledger.Revoked(ctx, kind, subject)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return Outcome{}, false
	case err != nil:
		return s.ledgerFault("revocation lookup", err), true
	}
	return revokedOutcome(r), true
}

// revokedOutcome is the deny for a revocation: its own code per kind, 401
// for a withdrawn caller key. The message names the kind and when, never a
// token.
func revokedOutcome(r ledger.Revocation) Outcome {
	at := r.RevokedAt.UTC().Format("2006-01-02T15:04:05Z")
	switch r.Kind {
	case ledger.RevokeConfirmation:
		return Outcome{Status: http.StatusForbidden, Code: CodeConfirmationRevoked,
			Message: "the confirmation was revoked by its authority at " + at,
			Violations: []Finding{{Code: CodeConfirmationRevoked, Gate: "confirmation",
				Message: "the confirmation was revoked before use"}}}
	case ledger.RevokeEntitlement, ledger.RevokeBooking:
		what := "the entitlement"
		if r.Kind == ledger.RevokeBooking {
			what = "every entitlement of this booking"
		}
		return Outcome{Status: http.StatusForbidden, Code: CodeEntitlementRevoked,
			Message: what + " was revoked by its issuer at " + at,
			Violations: []Finding{{Code: CodeEntitlementRevoked, Gate: "entitlement",
				Message: what + " was revoked"}}}
	}
	return Outcome{Status: http.StatusUnauthorized, Code: CodeCallerRevoked,
		Message: "the caller key was withdrawn from trust at " + at}
}

// boundText keeps a claim the ledger stores only when it fits a ledger
// identifier; anything else is stored empty (and so matches nothing).
func boundText(s string) string {
	if len(s) > ledger.MaxIDLen {
		return ""
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return ""
		}
	}
	return s
}

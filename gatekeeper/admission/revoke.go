package admission

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// revoked ends an admission when (kind, subject) is revoked in the ledger.
// The ledger checks again inside the commit, so a revocation that lands
// between this read and the commit still denies.
func (s *Service) revoked(ctx context.Context, kind ledger.RevocationKind, subject string) (Outcome, bool) {
	// An id the ledger cannot hold (over-long, NUL: ledger.IDProblem) was
	// never revoked, because no revocation can name it; asking would be a
	// 503 on PostgreSQL and a miss on bbolt. Answer alike, without asking.
	if subject == "" || ledger.IDProblem(subject) != "" {
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
		return Outcome{Code: api.CodeConfirmationRevoked,
			Message: "the confirmation was revoked by its authority at " + at,
			Violations: []api.Finding{{Code: api.CodeConfirmationRevoked, Gate: "confirmation",
				Message: "the confirmation was revoked before use"}}}
	case ledger.RevokeEntitlement, ledger.RevokeBooking:
		what := "the entitlement"
		if r.Kind == ledger.RevokeBooking {
			what = "every entitlement of this booking"
		}
		return Outcome{Code: api.CodeEntitlementRevoked,
			Message: what + " was revoked by its issuer at " + at,
			Violations: []api.Finding{{Code: api.CodeEntitlementRevoked, Gate: "entitlement",
				Message: what + " was revoked"}}}
	}
	return Outcome{Code: api.CodeCallerRevoked,
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

// MaxRevocationLifetime bounds how long a revocation is kept when the
// revoker names its expiry: a revoked token cannot outlive its own exp, and
// no token itogate verifies lives longer than this.
const MaxRevocationLifetime = 366 * 24 * time.Hour

// Revocation is a revocation request, already authenticated: By is the
// revoker's subject and KeyID the key that verified its bearer token.
type Revocation struct {
	Kind ledger.RevocationKind
	// Subject is the jti, booking id or caller key id; for a confirmation
	// either Subject (its jti) or Ref.
	Subject string
	Ref     string
	// ExpiresAt is when the revoked token expires (unix seconds); for a
	// deposited confirmation named by Ref it is the stored token's exp and
	// may be zero.
	ExpiresAt int64
	Reason    string
	By        string
	KeyID     string
	// Identity is how the server authenticated the request: "depositor"
	// (the confirmation authority) or "revoker" (the entitlement issuer's
	// revocation identity). Revoke authorizes by it: confirmations only by
	// the depositor, everything else only by the revoker.
	Identity string
}

// Revoke stores a revocation. The server has authenticated the revoker with
// the identity its kind requires (the confirmation authority's depositor
// identity for confirmations, the revoker identity for the rest). It is
// idempotent: a second revocation of the same subject answers 200 with the
// stored one. Every revocation, refused or stored, is written to the
// decision log.
func (s *Service) Revoke(ctx context.Context, rv Revocation) Outcome {
	out := s.revoke(ctx, rv)
	s.logRevocation(rv, out)
	return out
}

func (s *Service) revoke(ctx context.Context, rv Revocation) Outcome {
	now := s.opts.Now()
	if !rv.Kind.Valid() {
		return fail(api.CodeRequestInvalid, "kind must be confirmation, entitlement, booking or caller_key")
	}
	switch {
	case rv.Kind == ledger.RevokeConfirmation && rv.Identity != "depositor":
		return fail(api.CodeRevokerUnauthorized,
			"confirmations are revoked by the confirmation authority (POST /v1/confirmations/revocations)")
	case rv.Kind != ledger.RevokeConfirmation && rv.Identity != "revoker":
		return fail(api.CodeRevokerUnauthorized,
			"entitlements, bookings and caller keys are revoked by the revoker identity (POST /v1/revocations)")
	}
	expires := time.Unix(rv.ExpiresAt, 0)
	if rv.Kind == ledger.RevokeConfirmation && rv.Ref != "" {
		if rv.Subject != "" {
			return fail(api.CodeRequestInvalid, "give ref or subject (jti), not both")
		}
		if !reConfRef.MatchString(rv.Ref) {
			return fail(api.CodeRequestInvalid, "ref: cfr_ followed by 32 lowercase hex digits")
		}
		c, err := s.opts.Ledger.Confirmation(ctx, rv.Ref)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
			return fail(api.CodeRevocationRefNotFound, "no confirmation is deposited under this reference")
		case err != nil:
			return s.ledgerFault("revocation", err)
		}
		rv.Subject = c.JTI
		if rv.ExpiresAt == 0 || expires.After(c.ExpiresAt) {
			expires = c.ExpiresAt
		}
	}
	if rv.Subject == "" || len(rv.Subject) > ledger.MaxIDLen || boundText(rv.Subject) != rv.Subject {
		return fail(api.CodeRequestInvalid, "subject: the jti, booking id or key id, at most 256 bytes")
	}
	if rv.ExpiresAt == 0 && expires.Unix() == 0 {
		return fail(api.CodeRequestInvalid, "expires_at (unix seconds, the revoked token's exp) is required")
	}
	if !expires.After(now) {
		return fail(api.CodeRequestInvalid, "expires_at is not in the future: the token no longer verifies anyway")
	}
	if expires.Sub(now) > MaxRevocationLifetime {
		return fail(api.CodeRequestInvalid, "expires_at is more than 366 days ahead")
	}
	if len(rv.Reason) > 512 || boundText(rv.Reason) != rv.Reason {
		return fail(api.CodeRequestInvalid, "reason: at most 512 bytes of text")
	}
	by := rv.By
	if by == "" {
		by = "key:" + rv.KeyID
	}
	stored, created, err := s.opts.Ledger.Revoke(ctx, ledger.Revocation{Kind: rv.Kind, Subject: rv.Subject,
		Reason: rv.Reason, RevokedBy: boundText(by), RevokedAt: now, ExpiresAt: expires})
	switch {
	case errors.Is(err, ledger.ErrInvalid):
		return fail(api.CodeRequestInvalid, "the revocation is malformed")
	case err != nil:
		return s.ledgerFault("revocation", err)
	}
	status, notice := http.StatusCreated, "revoked"
	if !created {
		status, notice = http.StatusOK, "already revoked: the stored revocation is unchanged"
	}
	s.opts.Logger.Info("revocation", "kind", stored.Kind, "subject", stored.Subject, "revoked_by", stored.RevokedBy,
		"created", created, "expires_at", stored.ExpiresAt.Unix())
	return Outcome{Status: status, Notice: notice, Extra: api.Revoked{
		Kind: string(stored.Kind), Subject: stored.Subject, RevokedBy: stored.RevokedBy,
		RevokedAt: stored.RevokedAt.Unix(), ExpiresAt: stored.ExpiresAt.Unix(), Created: created,
	}}
}

// CallerRevoked answers 401 CALLER_REVOKED when the caller's key id was
// withdrawn from trust (a revocation of kind caller_key); ok is false
// otherwise. A ledger fault denies (503).
func (s *Service) CallerRevoked(ctx context.Context, keyID string) (Outcome, bool) {
	return s.revoked(ctx, ledger.RevokeCallerKey, keyID)
}

// logRevocation audits a revocation in the decision log: who (subject and
// key id), what (kind, subject), the outcome. Never a token.
func (s *Service) logRevocation(rv Revocation, out Outcome) {
	if s.opts.DecisionLog == nil {
		return
	}
	ev := decisionlog.Event{DecisionID: NewDecisionID(), Time: s.opts.Now().UTC(), Account: rv.By,
		Action: "revoke." + string(rv.Kind), Status: out.HTTPStatus(), Result: "revoked",
		KeyIDs: map[string]string{"revoker": rv.KeyID}}
	if r, ok := out.Extra.(api.Revoked); ok {
		ev.JTIs = map[string]string{string(rv.Kind): r.Subject}
	}
	if !out.OK() {
		ev.Result, ev.Codes = "refused", []string{string(out.Code)}
	}
	if s.opts.DecisionLog.Prepare(context.Background(), nil, &ev) {
		s.opts.DecisionLog.Log(ev)
	}
}

package ledger

import (
	"fmt"
	"time"
)

// RevocationKind names what a revocation withdraws. Its Subject is:
//
//	confirmation  the confirmation token's jti
//	entitlement   the entitlement token's jti
//	booking       a booking id: every entitlement of that booking
//	caller_key    a caller key id (kid) withdrawn from trust
type RevocationKind string

const (
	RevokeConfirmation RevocationKind = "confirmation"
	RevokeEntitlement  RevocationKind = "entitlement"
	RevokeBooking      RevocationKind = "booking"
	RevokeCallerKey    RevocationKind = "caller_key"
)

// Valid reports whether k is a documented kind.
func (k RevocationKind) Valid() bool {
	switch k {
	case RevokeConfirmation, RevokeEntitlement, RevokeBooking, RevokeCallerKey:
		return true
	}
	return false
}

// Revocation withdraws one token, booking or caller key before its own
// expiry. It is kept until ExpiresAt (the revoked token's exp, or for a
// booking or key the time after which nothing it covered can verify), then
// it may be dropped: the token it names no longer verifies anyway.
type Revocation struct {
	Kind    RevocationKind
	Subject string
	// Reason is free text for operators (at most 1024 bytes, no control
	// characters); never a token.
	Reason string
	// RevokedBy is the authenticated identity that revoked (subject of the
	// revoker's bearer token).
	RevokedBy string
	RevokedAt time.Time
	ExpiresAt time.Time
	// DecisionID names the revocation in the decision log (optional).
	DecisionID string
}

// Validate reports whether r may be stored. The error wraps ErrInvalid.
func (r Revocation) Validate() error {
	bad := func(field, problem string) error {
		return fmt.Errorf("ledger: revocation %s %s: %w", field, problem, ErrInvalid)
	}
	if !r.Kind.Valid() {
		return bad("Kind", "is not a documented kind")
	}
	if p := idProblem(r.Subject); p != "" {
		return bad("Subject", p)
	}
	if p := idProblem(r.RevokedBy); p != "" {
		return bad("RevokedBy", p)
	}
	if p := textProblem(r.Reason); p != "" {
		return bad("Reason", p)
	}
	if p := textProblem(r.DecisionID); p != "" {
		return bad("DecisionID", p)
	}
	if r.RevokedAt.IsZero() || r.ExpiresAt.IsZero() {
		return bad("RevokedAt", "or ExpiresAt is zero")
	}
	return nil
}

// RevocationError is returned by Commit when something the admission rests
// on was revoked. It wraps ErrRevoked.
type RevocationError struct{ Revocation Revocation }

func (e *RevocationError) Error() string {
	return fmt.Sprintf("ledger: commit: %s %s revoked: %v", e.Revocation.Kind, e.Revocation.Subject, ErrRevoked)
}

func (e *RevocationError) Unwrap() error { return ErrRevoked }

// revocationSubjects are what Commit checks for a: its confirmation jti and
// caller key always; for an action that is no teardown (train.create, a
// stage advance, a restart) also its entitlement jti and booking. Teardown
// (cancel, cleanup, release) on a revoked entitlement or booking stays
// admissible, as after the term: stopping a run never needs the booking's
// consent. A step of a run admitted under a revoked entitlement is refused
// by the run's own state (RunRecord.May), whichever entitlement it carries.
func revocationSubjects(a Admission) [][2]string {
	out := [][2]string{{string(RevokeConfirmation), a.ConfirmationJTI}}
	if a.Action.Valid() && !a.Action.Teardown() {
		out = append(out, [2]string{string(RevokeBooking), a.BookingID})
		if a.EntitlementJTI != "" {
			out = append(out, [2]string{string(RevokeEntitlement), a.EntitlementJTI})
		}
	}
	if a.CallerKeyID != "" {
		out = append(out, [2]string{string(RevokeCallerKey), a.CallerKeyID})
	}
	return out
}

// RevocationSubjects lists the (kind, subject) pairs Commit checks for a,
// for implementations.
func RevocationSubjects(a Admission) [][2]string { return revocationSubjects(a) }

// RevokesRuns reports whether a revocation of kind revokes runs: a booking
// revokes its runs, an entitlement the runs admitted under it; a
// confirmation and a caller key halt no run (key rotation stays safe).
func (k RevocationKind) RevokesRuns() bool {
	return k == RevokeBooking || k == RevokeEntitlement
}

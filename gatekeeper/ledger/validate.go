package ledger

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// MaxIDLen bounds, in bytes, every identifier the ledger keys or indexes on
// (account, idempotency key, jti, run id, action). It keeps keys well inside
// every backend's limits (bbolt: 32 KiB keys; PostgreSQL btree: ~2.7 KiB).
const MaxIDLen = 256

// MaxGPUs bounds Admission.GPUs and BookedGPUs (2^31-1): the PostgreSQL
// ledger stores them as integer, the bbolt live index refuses larger
// values, so a larger count is refused before it is written rather than
// committed and then unreadable.
const MaxGPUs = 1<<31 - 1

// maxTextLen bounds the other short string fields (digests, decision ids,
// bundle revisions).
const maxTextLen = 1024

// maxTicketLen bounds Admission.Ticket, a compact JWS: 8 KiB.
const maxTicketLen = 8 << 10

// Validate reports whether c may be deposited: a reference in the
// NewConfirmationRef shape; non-empty JTI, Account and Action within
// MaxIDLen; a token; ExpiresAt and DepositedAt set; State empty or
// ConfirmationAvailable; and no consumption recorded. The error wraps
// ErrInvalid and never includes field values.
func (c Confirmation) Validate() error {
	bad := func(field, problem string) error {
		return fmt.Errorf("ledger: confirmation %s %s: %w", field, problem, ErrInvalid)
	}
	if !IsConfirmationRef(c.Ref) {
		return bad("Ref", "is not cfr_ followed by 32 lowercase hex digits")
	}
	for _, f := range []struct{ name, v string }{{"JTI", c.JTI}, {"Account", c.Account}, {"Action", string(c.Action)}} {
		if p := idProblem(f.v); p != "" {
			return bad(f.name, p)
		}
	}
	switch {
	case len(c.Token) == 0:
		return bad("Token", "is empty")
	case c.ExpiresAt.IsZero():
		return bad("ExpiresAt", "is zero")
	case c.DepositedAt.IsZero():
		return bad("DepositedAt", "is zero")
	case c.State != "" && c.State != ConfirmationAvailable:
		return bad("State", "must be empty or available on deposit")
	case c.ConsumedBy != "" || !c.ConsumedAt.IsZero():
		return bad("ConsumedBy", "must be empty on deposit")
	case c.CostMicroUSD < 0:
		return bad("CostMicroUSD", "is negative")
	}
	// Bindings are text, not required here: a confirmation without them
	// matches no admission (CheckBindings), so it fails closed at commit.
	for _, f := range []struct{ name, v string }{
		{"BookingID", c.BookingID}, {"ManifestDigest", c.ManifestDigest}, {"RunID", c.RunID},
	} {
		if p := textProblem(f.v); p != "" {
			return bad(f.name, p)
		}
	}
	return nil
}

// Validate reports whether a may be committed: Account, IdempotencyKey,
// Action, ConfirmationJTI and BookingID non-empty within MaxIDLen; RequestDigest "sha256:<64 lowercase
// hex>"; ConfirmationRef in the NewConfirmationRef shape; a documented State;
// for api.StateAdmitted a RunID in the NewRunID shape, for cancel and cleanup
// a non-empty RunID; CreatedAt set. Every string must be valid UTF-8 without
// NUL or other control characters, which keeps keys unambiguous (bbolt joins
// account and key with NUL) and storable as PostgreSQL text. The error wraps
// ErrInvalid and never includes field values.
func (a Admission) Validate() error {
	bad := func(field, problem string) error {
		return fmt.Errorf("ledger: admission %s %s: %w", field, problem, ErrInvalid)
	}
	for _, f := range []struct{ name, v string }{
		{"Account", a.Account}, {"IdempotencyKey", a.IdempotencyKey}, {"Action", string(a.Action)},
		{"ConfirmationJTI", a.ConfirmationJTI}, {"BookingID", a.BookingID},
	} {
		if p := idProblem(f.v); p != "" {
			return bad(f.name, p)
		}
	}
	for _, f := range []struct{ name, v string }{
		{"RunID", a.RunID}, {"DecisionID", a.DecisionID},
		{"ManifestDigest", a.ManifestDigest}, {"BundleRevision", a.BundleRevision},
	} {
		if p := textProblem(f.v); p != "" {
			return bad(f.name, p)
		}
	}
	if len(a.Ticket) > maxTicketLen || strings.ContainsFunc(a.Ticket, func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return bad("Ticket", fmt.Sprintf("is not a compact JWS of at most %d bytes", maxTicketLen))
	}
	if !IsSHA256Digest(a.RequestDigest) {
		return bad("RequestDigest", "is not sha256: followed by 64 lowercase hex digits")
	}
	if !IsConfirmationRef(a.ConfirmationRef) {
		return bad("ConfirmationRef", "is not cfr_ followed by 32 lowercase hex digits")
	}
	// What the action carries and does (api.ActionSpec) decides which
	// fields the record must hold.
	spec, ok := a.Action.Spec()
	switch {
	case !a.State.Stored():
		return bad("State", "is not a documented admission state")
	case !ok || a.State != spec.State:
		return bad("State", "is not the state of the admission's action")
	case spec.Effect == api.EffectCreateRun && !IsRunID(a.RunID):
		return bad("RunID", "is not a run id from NewRunID")
	}
	if a.Action.ActsOnRun() {
		if p := idProblem(a.RunID); p != "" {
			return bad("RunID", p)
		}
	}
	if spec.Stage {
		for _, f := range []struct{ name, v string }{{"Stage", a.Stage}, {"FromStage", a.FromStage}} {
			if p := idProblem(f.v); p != "" {
				return bad(f.name, p)
			}
		}
		if a.Stage == a.FromStage {
			return bad("Stage", "equals FromStage")
		}
	}
	if a.CreatedAt.IsZero() {
		return bad("CreatedAt", "is zero")
	}
	for _, f := range []struct{ name, v string }{{"EntitlementJTI", a.EntitlementJTI}, {"CallerKeyID", a.CallerKeyID}} {
		if p := textProblem(f.v); p != "" {
			return bad(f.name, p)
		}
	}
	if a.CostMicroUSD < 0 {
		return bad("CostMicroUSD", "is negative")
	}
	if spec.Effect == api.EffectCreateRun {
		switch {
		case a.GPUs <= 0 || a.GPUs > MaxGPUs:
			return bad("GPUs", "must be positive and at most 2^31-1 for train.create")
		case a.BookedGPUs <= 0 || a.BookedGPUs > MaxGPUs:
			return bad("BookedGPUs", "must be positive and at most 2^31-1 for train.create")
		case !a.LiveUntil.After(a.CreatedAt):
			return bad("LiveUntil", "must be after CreatedAt for train.create")
		}
	} else if a.GPUs != 0 || a.BookedGPUs != 0 || !a.LiveUntil.IsZero() {
		return bad("GPUs", "and BookedGPUs, LiveUntil are only for train.create")
	}
	if p := textProblem(a.Stage); p != "" {
		return bad("Stage", p)
	}
	if a.CheckpointStep < 0 || (a.CheckpointStep != 0 && !spec.CheckpointStep) {
		return bad("CheckpointStep", "is negative or set on an admission that is not a restart")
	}
	if a.FromStage != "" && !spec.Stage {
		return bad("FromStage", "is set on an admission that is not a stage advance")
	}
	if err := a.Plan.Validate(); err != nil {
		return err
	}
	if a.Plan != (RunPlan{}) && spec.Effect != api.EffectCreateRun {
		return bad("Plan", "is only for train.create")
	}
	if a.StageGPUs < 0 || a.StageGPUs > MaxGPUs || (a.StageGPUs != 0 && !spec.Stage) {
		return bad("StageGPUs", "is negative, above 2^31-1, or set on an admission that is not a stage advance")
	}
	if a.RestartBudget < 0 || (a.RestartBudget != 0 && !spec.CheckpointStep) {
		return bad("RestartBudget", "is negative or set on an admission that is not a restart")
	}
	if !a.ReportDue.IsZero() && (!a.ReportDue.After(a.CreatedAt) || (spec.Effect != api.EffectCreateRun && !spec.Stage)) {
		return bad("ReportDue", "is not after CreatedAt, or set on an admission that enters no stage")
	}
	return nil
}

// IsSHA256Digest reports whether s is "sha256:" followed by 64 lowercase hex
// digits.
func IsSHA256Digest(s string) bool {
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for i := range len(h) {
		c := h[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// IDProblem says what makes s unfit as a ledger identifier (empty, longer
// than MaxIDLen bytes, not UTF-8, a control character such as NUL), or ""
// when it is fit. Callers check identifiers they did not choose themselves
// (a token's jti, sub or account claim) with it before any ledger call, so a
// bad one is the caller's 4xx on every backend, never a ledger fault. The
// answer never includes s.
func IDProblem(s string) string { return idProblem(s) }

func idProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	if len(s) > MaxIDLen {
		return fmt.Sprintf("is longer than %d bytes", MaxIDLen)
	}
	return textProblem(s)
}

func textProblem(s string) string {
	if len(s) > maxTextLen {
		return fmt.Sprintf("is longer than %d bytes", maxTextLen)
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	// Cc: C0, DEL and the C1 controls (U+0080–U+009F, NEL among them).
	if strings.ContainsFunc(s, unicode.IsControl) {
		return "contains a control character"
	}
	return ""
}

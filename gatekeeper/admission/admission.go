// Package admission runs one admission end to end (design §1):
// request → verify → facts → policy → ledger → outcome.
//
// It knows nothing about HTTP beyond the status each outcome maps to; the
// server package decodes requests, authenticates callers and renders
// envelopes. Every failing step becomes a deny with a stable code, and no
// step is skipped because an earlier one failed open.
package admission

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Actions an admission may ask for (design §4).
const (
	ActionTrainCreate    = "train.create"
	ActionTrainCancel    = "train.cancel"
	ActionTrainCleanup   = "train.cleanup"
	ActionBookingRelease = "booking.release"
)

var states = map[string]ledger.AdmissionState{
	ActionTrainCreate:    ledger.AdmissionAdmitted,
	ActionTrainCancel:    ledger.AdmissionCancelAdmitted,
	ActionTrainCleanup:   ledger.AdmissionCleanupAdmitted,
	ActionBookingRelease: ledger.AdmissionReleaseAdmitted,
}

// Caller is an authenticated identity. It is identity, never authority: only a
// confirmation authorizes an action.
type Caller struct {
	Subject string
	Account string
	KeyID   string
}

// Request is a decoded admission request. Manifest holds the exact manifest
// bytes (already base64-decoded); it is empty for actions other than
// train.create.
type Request struct {
	Action            string
	BookingID         string
	IdempotencyKey    string
	Manifest          []byte
	ManifestSignature string
	EntitlementToken  string
	ConfirmationRef   string
	RunID             string
	ReleasesBooking   bool
}

// TokenVerifier verifies one purpose's JWTs.
type TokenVerifier interface {
	Verify(raw []byte, now time.Time) (*verify.Claims, error)
}

// ManifestVerifier verifies a detached manifest signature and names the
// pinned key that verified it.
type ManifestVerifier interface {
	Verify(manifest []byte, signature string) (keyID string, err error)
}

// Decider evaluates the policy decision.
type Decider interface {
	Decide(ctx context.Context, input map[string]any) (policy.Decision, error)
	Revision() string
}

// Options wire a Service. Every field but Now, Logger and DecisionLog is
// required.
type Options struct {
	Entitlement  TokenVerifier
	Confirmation TokenVerifier
	Manifests    ManifestVerifier
	Ledger       ledger.Store
	// Policy returns the active decider, or nil when no bundle is active.
	Policy func() Decider
	// Now is the clock (default time.Now); tests pin it.
	Now    func() time.Time
	Logger *slog.Logger
	// DecisionLog, when set, receives one event per admission.
	DecisionLog *decisionlog.Logger
	// Shadow, when set, returns a candidate bundle evaluated beside the
	// enforced one on every admission the policy decides; OnShadow receives
	// each comparison. The candidate never affects an answer.
	Shadow   func() Decider
	OnShadow func(ShadowResult)
	// OnLedgerError, when set, is called with the operation whenever the
	// ledger fails (for the itogate_ledger_errors_total metric).
	OnLedgerError func(op string)
	// Evaluations bounds concurrent policy evaluations (zero: no bound).
	Evaluations Evaluations
}

// Service answers admissions, status lookups and confirmation deposits.
type Service struct {
	opts      Options
	shadowSem chan struct{}
	limit     *limiter
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Entitlement == nil || opts.Confirmation == nil || opts.Manifests == nil ||
		opts.Ledger == nil || opts.Policy == nil {
		return nil, errors.New("admission: incomplete options")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{opts: opts, shadowSem: make(chan struct{}, shadowSlots), limit: newLimiter(opts.Evaluations)}, nil
}

var (
	reKey     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	reID      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	reConfRef = regexp.MustCompile(`^cfr_[0-9a-f]{32}$`)
)

func validate(req Request) error {
	if _, ok := states[req.Action]; !ok {
		return errors.New("action must be train.create, train.cancel, train.cleanup or booking.release")
	}
	if !reID.MatchString(req.BookingID) {
		return errors.New("booking_id: 1-128 characters of [A-Za-z0-9._:-]")
	}
	if !reKey.MatchString(req.IdempotencyKey) {
		return errors.New("idempotency_key: 1-128 characters of [A-Za-z0-9._:-]")
	}
	if !reConfRef.MatchString(req.ConfirmationRef) {
		return errors.New("confirmation_ref: cfr_ followed by 32 lowercase hex digits")
	}
	if req.EntitlementToken == "" {
		return errors.New("entitlement_token is required")
	}
	switch req.Action {
	case ActionTrainCancel, ActionTrainCleanup:
		if !reID.MatchString(req.RunID) {
			return errors.New("run_id is required for " + req.Action)
		}
	default:
		if req.RunID != "" {
			return errors.New("run_id is only for train.cancel and train.cleanup")
		}
	}
	if req.ReleasesBooking && req.Action != ActionTrainCleanup {
		return errors.New("releases_booking is only for train.cleanup")
	}
	if req.Action != ActionTrainCreate && (len(req.Manifest) > 0 || req.ManifestSignature != "") {
		return errors.New("manifest is only for train.create")
	}
	return nil
}

// RequestDigest is "sha256:<hex>" over the fields that make two requests the
// same request: a retry with a freshly minted entitlement token is the same
// request; another manifest, confirmation, booking or run is not.
func RequestDigest(caller Caller, req Request, manifestDigest string) string {
	canon, _ := json.Marshal([]any{
		"itogate.request.v1", req.Action, caller.Account, req.BookingID, manifestDigest,
		req.ConfirmationRef, req.RunID, req.ReleasesBooking,
	})
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Admit runs one admission. It never returns an allow unless every step
// passed and the ledger committed. Every admission, allowed or denied at any
// step, is written to the decision log when one is configured.
func (s *Service) Admit(ctx context.Context, caller Caller, req Request) Outcome {
	start := time.Now()
	tr := &trace{decisionID: NewDecisionID(), jtis: map[string]string{}, keyIDs: map[string]string{}}
	out := s.admit(ctx, caller, req, tr)
	s.logDecision(ctx, caller, req, tr, out, time.Since(start))
	return out
}

// trace collects what the decision log records as the pipeline runs.
type trace struct {
	decisionID     string
	requestDigest  string
	manifestDigest string
	jtis, keyIDs   map[string]string
	input          map[string]any
	decider        Decider
	decision       *policy.Decision
}

func (s *Service) admit(ctx context.Context, caller Caller, req Request, tr *trace) Outcome {
	tr.keyIDs["caller"] = caller.KeyID
	if err := validate(req); err != nil {
		return fail(http.StatusBadRequest, CodeRequestInvalid, err.Error())
	}
	now := s.opts.Now()

	var manifestDigest string
	if req.Action == ActionTrainCreate {
		if len(req.Manifest) == 0 {
			return fail(http.StatusBadRequest, CodeManifestRequired, "train.create needs the manifest bytes")
		}
		if len(req.Manifest) > manifest.MaxBytes {
			return fail(http.StatusRequestEntityTooLarge, manifest.CodeTooLarge,
				fmt.Sprintf("manifest larger than %d bytes", manifest.MaxBytes))
		}
		manifestDigest = manifest.Digest(req.Manifest)
	}
	reqDigest := RequestDigest(caller, req, manifestDigest)
	tr.requestDigest, tr.manifestDigest = reqDigest, manifestDigest

	// Step 8, early part: an exact retry of an admitted request gets the
	// stored allow, whatever happened to its tokens since. Nothing new is
	// verified, evaluated or consumed.
	prior, err := s.opts.Ledger.Admission(ctx, caller.Account, req.IdempotencyKey)
	switch {
	case err == nil && prior.RequestDigest == reqDigest:
		return replayed(prior)
	case err != nil && !errors.Is(err, ledger.ErrNotFound):
		return s.ledgerFault("admission lookup", err)
	}
	keySeen := err == nil

	// Overloaded: every evaluation slot busy and the wait queue full. Shed
	// now, before any verification, so refusing costs next to nothing and
	// the CPU stays with the admissions already admitted to the queue.
	if s.limit.saturated() {
		return overloaded(true)
	}

	// Step 4–5: signature over the exact bytes, then the schema.
	verified := map[string]any{
		"caller": map[string]any{"verified": true, "key_id": caller.KeyID},
	}
	doc := map[string]any{}
	if req.Action == ActionTrainCreate {
		keyID, err := s.opts.Manifests.Verify(req.Manifest, req.ManifestSignature)
		if err != nil {
			o := denied(CodeManifestSignature, "the manifest signature does not verify with any pinned signer key")
			o.Cause = err
			return o
		}
		verified["manifest_signature"] = map[string]any{"verified": true, "key_id": keyID}
		tr.keyIDs["manifest"] = keyID
		doc, err = manifest.Parse(req.Manifest)
		if err != nil {
			var me *manifest.Error
			if errors.As(err, &me) {
				return fail(http.StatusBadRequest, me.Code, me.Error())
			}
			return fail(http.StatusInternalServerError, CodeInternal, "manifest schema unavailable")
		}
	}

	// Step 6: entitlement.
	ent, err := s.opts.Entitlement.Verify([]byte(req.EntitlementToken), now)
	if err != nil {
		return tokenDenied(err, "entitlement")
	}
	verified["entitlement"] = map[string]any{"verified": true, "key_id": ent.KeyID}
	tr.keyIDs["entitlement"], tr.jtis["entitlement"] = ent.KeyID, ent.JTI

	// Step 7: the reference resolves to a stored token, verified again now.
	conf, err := s.opts.Ledger.Confirmation(ctx, req.ConfirmationRef)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return denied(CodeConfirmationNotFound, "no confirmation is deposited under this reference")
	case err != nil:
		return s.ledgerFault("confirmation lookup", err)
	}
	consumed := conf.State == ledger.ConfirmationConsumed
	if len(conf.Token) == 0 {
		// Swept after expiry: only the tombstone is left.
		if consumed {
			return denied(CodeConfirmationReplayed, "this confirmation was already used")
		}
		return denied(CodeConfirmationExpired, "this confirmation expired")
	}
	cc, err := s.opts.Confirmation.Verify(conf.Token, now)
	if err != nil {
		return tokenDenied(err, "confirmation")
	}
	verified["confirmation"] = map[string]any{"verified": true, "key_id": cc.KeyID}
	tr.keyIDs["confirmation"], tr.jtis["confirmation"] = cc.KeyID, cc.JTI

	// Lifecycle actions act on a run this account was admitted for, on the
	// booking the request names: a confirmation and entitlement for another
	// booking of the same account never reach a run elsewhere. Another
	// account's run and a run on another booking answer exactly like an
	// unknown run id, so the answer reveals nothing about them.
	if req.Action == ActionTrainCancel || req.Action == ActionTrainCleanup {
		run, err := s.opts.Ledger.Run(ctx, req.RunID)
		switch {
		case errors.Is(err, ledger.ErrNotFound) ||
			(err == nil && (run.Account != caller.Account || run.BookingID != req.BookingID)):
			return denied(CodeRunNotFound, "no run with this id was admitted for this account on this booking")
		case err != nil:
			return s.ledgerFault("run lookup", err)
		}
	}

	// Step 9–10: facts in, decision out.
	confirmation := copyClaims(cc.Raw)
	confirmation["ref"] = req.ConfirmationRef
	input := map[string]any{
		"now": now.Unix(),
		"request": map[string]any{
			"action":           req.Action,
			"booking_id":       req.BookingID,
			"idempotency_key":  req.IdempotencyKey,
			"request_digest":   reqDigest,
			"run_id":           req.RunID,
			"releases_booking": req.ReleasesBooking,
		},
		"caller":          map[string]any{"sub": caller.Subject, "account": caller.Account, "key_id": caller.KeyID},
		"manifest_digest": manifestDigest,
		"manifest":        doc,
		"verification":    verified,
		"entitlement":     ent.Raw,
		"confirmation":    confirmation,
		"ledger": map[string]any{
			"confirmation_consumed": consumed,
			"idempotency":           map[string]any{"seen": keySeen, "same_request": false},
		},
	}
	decider := s.opts.Policy()
	if decider == nil {
		return fail(http.StatusServiceUnavailable, policy.CodeNotReady, "no verified policy bundle is active")
	}
	decisionID := tr.decisionID
	if !s.limit.acquire(ctx) {
		return overloaded(false)
	}
	tr.input, tr.decider = input, decider
	dec, err := func() (policy.Decision, error) {
		defer s.limit.release() // also when Decide panics (the server recovers)
		return decider.Decide(ctx, input)
	}()
	if err != nil {
		code := policy.CodeEvaluationFailed
		var pe *policy.Error
		if errors.As(err, &pe) {
			code = pe.Code
		}
		s.opts.Logger.Error("policy evaluation failed", "decision_id", decisionID, "code", code, "err", err)
		out := fail(http.StatusServiceUnavailable, code, "the policy produced no usable decision; denied")
		out.Data = &Data{Decision: "deny", DecisionID: decisionID, Action: req.Action, BookingID: req.BookingID,
			ManifestDigest: manifestDigest, IdempotencyKey: req.IdempotencyKey, State: StateDenied,
			BundleRevision: decider.Revision()}
		return out
	}
	tr.decision = &dec
	s.shadow(ctx, tr, dec)
	data := &Data{
		DecisionID: decisionID, Action: req.Action, BookingID: req.BookingID,
		ManifestDigest: manifestDigest, IdempotencyKey: req.IdempotencyKey,
		BundleRevision: decider.Revision(), Warnings: dec.Warnings, Estimates: dec.Estimates,
	}
	if !dec.Allow {
		if onlyReplayed(dec.Violations) {
			if o, ok := s.sameRequestWon(ctx, caller, req.IdempotencyKey, reqDigest); ok {
				return o
			}
		}
		data.Decision, data.State = "deny", StateDenied
		status := http.StatusForbidden
		for _, v := range dec.Violations {
			if v.Code == CodeIdempotencyConflict {
				status = http.StatusConflict
			}
		}
		return Outcome{Status: status, Code: dec.Violations[0].Code,
			Message: "denied by policy: " + dec.Violations[0].Message, Data: data, Violations: dec.Violations}
	}

	// Step 11: one transaction consumes, reserves and records.
	runID := req.RunID
	if req.Action == ActionTrainCreate {
		runID = ledger.NewRunID()
	}
	rec := ledger.Admission{
		Account: caller.Account, IdempotencyKey: req.IdempotencyKey, RequestDigest: reqDigest,
		DecisionID: decisionID, RunID: runID, Action: req.Action, BookingID: req.BookingID,
		ManifestDigest: manifestDigest, ConfirmationRef: req.ConfirmationRef, ConfirmationJTI: cc.JTI,
		BundleRevision: decider.Revision(), State: states[req.Action], CreatedAt: now,
	}
	stored, wasReplay, err := s.opts.Ledger.Commit(context.WithoutCancel(ctx), rec)
	switch {
	case errors.Is(err, ledger.ErrConfirmationConsumed):
		if o, ok := s.sameRequestWon(ctx, caller, req.IdempotencyKey, reqDigest); ok {
			return o
		}
		data.Decision, data.State = "deny", StateDenied
		return Outcome{Status: http.StatusForbidden, Code: CodeConfirmationReplayed,
			Message: "this confirmation was already used", Data: data,
			Violations: []Finding{{Code: CodeConfirmationReplayed, Gate: "confirmation",
				Message: "the confirmation was consumed by another admission"}}}
	case errors.Is(err, ledger.ErrConfirmationExpired):
		data.Decision, data.State = "deny", StateDenied
		return Outcome{Status: http.StatusForbidden, Code: CodeConfirmationExpired,
			Message: "this confirmation expired", Data: data}
	case errors.Is(err, ledger.ErrConfirmationMismatch), errors.Is(err, ledger.ErrNotFound):
		// The stored record changed between lookup and commit, or disagrees
		// with the verified token: never allow on a disagreement.
		data.Decision, data.State = "deny", StateDenied
		return Outcome{Status: http.StatusForbidden, Code: CodeConfirmationInvalid,
			Message: "the stored confirmation does not match this admission", Data: data}
	case errors.Is(err, ledger.ErrKeyConflict):
		data.Decision, data.State = "deny", StateDenied
		return Outcome{Status: http.StatusConflict, Code: CodeIdempotencyConflict,
			Message: "this idempotency key was used for a different request", Data: data,
			Violations: []Finding{{Code: CodeIdempotencyConflict, Gate: "idempotency",
				Message: "the idempotency key is bound to another request"}}}
	case err != nil:
		// A fault during the commit leaves its outcome unknown to us (the
		// transaction may have committed): say so, and point at status.
		o := s.ledgerFault("commit", err)
		o.Message = "the ledger failed during the commit; denied — the outcome is unknown: " +
			"query GET /v1/admissions/{idempotency_key} before retrying"
		return o
	case wasReplay:
		return replayed(stored)
	}
	data.Decision, data.State, data.RunID = "allow", string(stored.State), stored.RunID
	return Outcome{Status: http.StatusOK, Data: data}
}

// Status answers GET /v1/admissions/{key} for the account that owns the key.
func (s *Service) Status(ctx context.Context, caller Caller, key string) Outcome {
	if !reKey.MatchString(key) {
		return fail(http.StatusBadRequest, CodeRequestInvalid, "idempotency_key: 1-128 characters of [A-Za-z0-9._:-]")
	}
	a, err := s.opts.Ledger.Admission(ctx, caller.Account, key)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return fail(http.StatusNotFound, CodeAdmissionNotFound,
			"no admission under this idempotency key for this account; nothing was admitted")
	case err != nil:
		return s.ledgerFault("status lookup", err)
	}
	o := replayed(a)
	o.Notice = "stored admission"
	return o
}

// Deposit verifies a confirmation token and stores it under a new opaque
// reference. The token is verified again when an admission uses it.
func (s *Service) Deposit(ctx context.Context, token string) Outcome {
	if token == "" {
		return fail(http.StatusBadRequest, CodeRequestInvalid, "confirmation_token is required")
	}
	now := s.opts.Now()
	cc, err := s.opts.Confirmation.Verify([]byte(token), now)
	if err != nil {
		return fail(http.StatusBadRequest, tokenCode(err), safeTokenMessage("confirmation", err))
	}
	if cc.JTI == "" || cc.Subject == "" {
		return fail(http.StatusBadRequest, CodeConfirmationInvalid, "confirmation token needs jti and sub")
	}
	act, _ := cc.Raw["act"].(string)
	if _, ok := states[act]; !ok {
		return fail(http.StatusBadRequest, CodeConfirmationInvalid, "confirmation act is not a known action")
	}
	ref := ledger.NewConfirmationRef()
	err = s.opts.Ledger.DepositConfirmation(ctx, ledger.Confirmation{
		Ref: ref, JTI: cc.JTI, Account: cc.Subject, Action: act, Token: []byte(token),
		ExpiresAt: cc.Expiry, DepositedAt: now, State: ledger.ConfirmationAvailable,
	})
	switch {
	case errors.Is(err, ledger.ErrConfirmationDuplicate):
		return fail(http.StatusConflict, CodeConfirmationDuplicate, "a confirmation with this jti was already deposited")
	case err != nil:
		return s.ledgerFault("deposit", err)
	}
	s.opts.Logger.Info("confirmation deposited", "ref", ref, "jti", cc.JTI, "account", cc.Subject, "act", act)
	return Outcome{Status: http.StatusCreated, Extra: map[string]any{
		"confirmation_ref": ref, "jti": cc.JTI, "act": act, "expires_at": cc.Expiry.Unix(),
	}}
}

// sameRequestWon handles two identical requests racing: the loser sees the
// confirmation consumed, but by its own key and request, so it must get the
// winner's allow (design §1), not a CONFIRMATION_REPLAYED a caller would
// take as final.
func (s *Service) sameRequestWon(ctx context.Context, caller Caller, key, digest string) (Outcome, bool) {
	a, err := s.opts.Ledger.Admission(ctx, caller.Account, key)
	if err != nil || a.RequestDigest != digest {
		return Outcome{}, false
	}
	return replayed(a), true
}

func onlyReplayed(vs []Finding) bool {
	return len(vs) == 1 && vs[0].Code == CodeConfirmationReplayed
}

func replayed(a ledger.Admission) Outcome {
	return Outcome{
		Status: http.StatusOK,
		Notice: "idempotent replay: this request was already admitted; nothing new was consumed",
		Data: &Data{
			Decision: "allow", DecisionID: a.DecisionID, Action: a.Action, BookingID: a.BookingID,
			RunID: a.RunID, ManifestDigest: a.ManifestDigest, IdempotencyKey: a.IdempotencyKey,
			State: string(a.State), BundleRevision: a.BundleRevision,
		},
	}
}

func (s *Service) ledgerFault(op string, err error) Outcome {
	s.opts.Logger.Error("ledger unavailable", "op", op, "err", err)
	if s.opts.OnLedgerError != nil {
		s.opts.OnLedgerError(op)
	}
	return fail(http.StatusServiceUnavailable, CodeLedgerUnavailable, "the ledger is unavailable; denied, nothing was written")
}

func tokenDenied(err error, purpose string) Outcome {
	o := denied(tokenCode(err), safeTokenMessage(purpose, err))
	o.Cause = err
	return o
}

// safeTokenMessage names the purpose and the kind of failure only; the token
// bytes never reach a response or a log.
func safeTokenMessage(purpose string, err error) string {
	var ve *verify.Error
	if errors.As(err, &ve) {
		return fmt.Sprintf("%s token rejected: %s", purpose, ve.Kind)
	}
	return purpose + " token rejected"
}

func copyClaims(m map[string]any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// NewDecisionID returns "dec_" + 32 hex digits (128 random bits).
func NewDecisionID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux; a broken RNG must stop the process
	}
	return "dec_" + hex.EncodeToString(b[:])
}

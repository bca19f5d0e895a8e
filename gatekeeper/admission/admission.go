// Package admission runs one admission end to end (docs/architecture.md §1):
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
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/booking"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Caller is an authenticated identity. It is identity, never authority: only a
// confirmation authorizes an action.
type Caller struct {
	Subject string
	Account string
	KeyID   string
}

// Request is a decoded admission request (api.AdmissionRequest): Manifest
// holds the exact manifest bytes, already base64-decoded.
type Request = api.AdmissionRequest

// TokenVerifier verifies one purpose's JWTs.
type TokenVerifier interface {
	Verify(raw []byte, now time.Time) (*verify.Claims, error)
}

// ManifestVerifier verifies a detached manifest signature and names the
// pinned key that verified it.
type ManifestVerifier interface {
	Verify(manifest []byte, signature string) (keyID string, err error)
}

// Decider evaluates the policy decision. It aliases an interface literal
// rather than declaring a type, so that a provider returning the same
// method set (bundle.Manager.Active) fits Options.Policy without importing
// this package.
type Decider = interface {
	Decide(ctx context.Context, input map[string]any) (policy.Decision, error)
	Revision() string
}

// Options wire a Service. Every field but Now, Logger and DecisionLog is
// required.
type Options struct {
	Entitlement  TokenVerifier
	Confirmation TokenVerifier
	// Evals verifies the eval authority's tokens (trust.evals). Optional:
	// nil refuses every eval report and ladder decision.
	Evals     TokenVerifier
	Manifests ManifestVerifier
	Ledger    ledger.Store
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
	// OnRunGPUs, when set, is called after a committed allow that takes or
	// gives back booked GPUs: ("admitted", run GPUs, GPUs the booking holds
	// with it, booked GPUs) for a train.create and for a stage advance
	// that grew its run (the GPUs it grew by), or ("released", GPUs, 0, 0).
	// For aggregate metrics; never per booking.
	OnRunGPUs func(event string, gpus, held, booked int)
	// Evaluations bounds concurrent policy evaluations (zero: no bound).
	Evaluations Evaluations
	// Tickets, when set, signs the admission ticket of every allowed
	// train.create; it is stored with the admission (data.ticket).
	Tickets TicketSigner
	// TicketVerifier verifies tickets for the renewal and the online
	// check (the signer's own key set); without it both answer
	// TICKETS_DISABLED.
	TicketVerifier TicketVerifier
	// TicketLifetime is how long a ticket lives (tickets.lifetime; zero:
	// ticket.DefaultLifetime).
	TicketLifetime time.Duration
	// Jobs binds a run to one scheduler job (the online check with a job
	// id); the ledger implements it.
	Jobs ledger.Jobs
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

// Keys are a Service's verifiers and ticket signing, as in Options (fields
// of the same names): what a reload of the trust keys replaces.
type Keys struct {
	Entitlement, Confirmation, Evals TokenVerifier
	Manifests                        ManifestVerifier
	Tickets                          TicketSigner
	TicketVerifier                   TicketVerifier
	TicketLifetime                   time.Duration
}

// WithKeys returns a Service answering with k in place of s's keys and
// sharing everything else with s — the evaluation slots and their queue,
// the shadow slots, the ledger, the policy, the decision log — so that
// admissions through either count against the same bounds. s itself is
// unchanged: an admission it is answering finishes with its own keys.
// Entitlement, Confirmation and Manifests are required, as in New.
func (s *Service) WithKeys(k Keys) (*Service, error) {
	if k.Entitlement == nil || k.Confirmation == nil || k.Manifests == nil {
		return nil, errors.New("admission: incomplete keys")
	}
	opts := s.opts
	opts.Entitlement, opts.Confirmation, opts.Evals, opts.Manifests = k.Entitlement, k.Confirmation, k.Evals, k.Manifests
	opts.Tickets, opts.TicketVerifier, opts.TicketLifetime = k.Tickets, k.TicketVerifier, k.TicketLifetime
	return &Service{opts: opts, shadowSem: s.shadowSem, limit: s.limit}, nil
}

var (
	reKey     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	reID      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	reConfRef = regexp.MustCompile(`^cfr_[0-9a-f]{32}$`)
	reJobID   = regexp.MustCompile(api.JobIDPattern)
)

func validate(req Request) error {
	spec, ok := req.Action.Spec()
	if !ok {
		return errors.New("action must be " + api.ActionNames())
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
	switch {
	case req.Action.ActsOnRun():
		if !reID.MatchString(req.RunID) {
			return errors.New("run_id is required for " + string(req.Action))
		}
	case req.RunID != "":
		return errors.New("run_id is only for actions on an admitted run")
	}
	if req.ReleasesBooking && !spec.ReleasesBooking {
		return errors.New("releases_booking is only for " + api.ActionsWhere(func(s api.ActionSpec) bool { return s.ReleasesBooking }))
	}
	if !spec.Manifest && (len(req.Manifest) > 0 || req.ManifestSignature != "") {
		return errors.New("manifest is only for " + strings.ReplaceAll(
			api.ActionsWhere(func(s api.ActionSpec) bool { return s.Manifest }), " or ", " and "))
	}
	return validateLifecycle(req, spec)
}

// RequestDigest is "sha256:<hex>" over the fields that make two requests the
// same request: a retry with a freshly minted entitlement token is the same
// request; another manifest, confirmation, booking, run, target stage or
// checkpoint step is not.
func RequestDigest(caller Caller, req Request, manifestDigest string) string {
	fields := []any{
		"itogate.request.v1", req.Action, caller.Account, req.BookingID, manifestDigest,
		req.ConfirmationRef, req.RunID, req.ReleasesBooking,
	}
	// Appended only for the actions that carry them, so every other request
	// keeps the digest it was stored under. The eval reports are left out
	// like the entitlement token: a retry may carry a freshly minted one.
	spec, _ := req.Action.Spec()
	if spec.Stage {
		fields = append(fields, req.Stage)
	}
	if spec.CheckpointStep {
		fields = append(fields, req.Step())
	}
	canon, _ := json.Marshal(fields)
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

// Status answers GET /v1/admissions/{key} for the account that owns the key.
func (s *Service) Status(ctx context.Context, caller Caller, key string) Outcome {
	if !reKey.MatchString(key) {
		return fail(api.CodeRequestInvalid, "idempotency_key: 1-128 characters of [A-Za-z0-9._:-]")
	}
	a, err := s.opts.Ledger.Admission(ctx, caller.Account, key)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return fail(api.CodeAdmissionNotFound,
			"no admission under this idempotency key for this account; nothing was admitted")
	case err != nil:
		return s.ledgerFault("status lookup", err)
	}
	o := replayed(a)
	o.Notice = "stored admission"
	// An admission on a run shows the run's state now beside it: the
	// admission says what was allowed then, the run what holds now.
	if a.RunID != "" {
		r, err := s.opts.Ledger.RunRecord(ctx, a.RunID)
		switch {
		case err == nil:
			o.Data.RunState = r.State(s.opts.Now())
		case !errors.Is(err, ledger.ErrNotFound):
			return s.ledgerFault("status lookup", err)
		}
	}
	return o
}

// Deposit verifies a confirmation token and stores it under a new opaque
// reference. The token is verified again when an admission uses it.
func (s *Service) Deposit(ctx context.Context, token string) Outcome {
	if token == "" {
		return fail(api.CodeRequestInvalid, "confirmation_token is required")
	}
	now := s.opts.Now()
	// A token refused at deposit answers like the same token at use (403,
	// one status per code as docs/codes.md lists it); only a request
	// without any token is malformed (400).
	cc, err := s.opts.Confirmation.Verify([]byte(token), now)
	if err != nil {
		return fail(tokenCode(err), safeTokenMessage("confirmation", err))
	}
	if cc.JTI == "" || cc.Subject == "" {
		return fail(api.CodeConfirmationInvalid, "confirmation token needs jti and sub")
	}
	// The ledger keys on jti and account: one it cannot hold is the
	// token's fault, answered alike on every backend, never a ledger fault.
	for _, f := range []struct{ name, v string }{{"jti", cc.JTI}, {"sub", cc.Subject}} {
		if p := ledger.IDProblem(f.v); p != "" {
			return fail(api.CodeConfirmationInvalid, "confirmation "+f.name+" "+p)
		}
	}
	actClaim, _ := cc.Raw["act"].(string)
	act := api.Action(actClaim)
	if !act.Valid() {
		return fail(api.CodeConfirmationInvalid, "confirmation act is not a known action")
	}
	// A revoked confirmation answers like the same token at use.
	if o, done := s.revoked(ctx, ledger.RevokeConfirmation, cc.JTI); done {
		return o
	}
	// The bindings the ledger re-checks at commit. A claim missing or
	// malformed here is stored empty and matches no admission: the policy
	// explains it at use, the ledger refuses it whatever the policy says.
	bookingID, _ := cc.Raw["booking_id"].(string)
	digest, _ := cc.Raw["manifest_digest"].(string)
	runID, _ := cc.Raw["run_id"].(string)
	costStr, _ := cc.Raw["cost_usd"].(string)
	cost, err := booking.MicroUSD(costStr)
	if err != nil {
		cost = 0
	}
	ref := ledger.NewConfirmationRef()
	err = s.opts.Ledger.DepositConfirmation(ctx, ledger.Confirmation{
		Ref: ref, JTI: cc.JTI, Account: cc.Subject, Action: act, Token: []byte(token),
		ExpiresAt: cc.Expiry, DepositedAt: now, State: ledger.ConfirmationAvailable,
		BookingID: boundText(bookingID), ManifestDigest: boundText(digest), RunID: boundText(runID), CostMicroUSD: cost,
	})
	switch {
	case errors.Is(err, ledger.ErrConfirmationDuplicate):
		return fail(api.CodeConfirmationDuplicate, "a confirmation with this jti was already deposited")
	case err != nil:
		return s.ledgerFault("deposit", err)
	}
	// Not the reference: like the decision log (which masks it), the server
	// log names the confirmation by its jti only.
	s.opts.Logger.Info("confirmation deposited", "jti", decisionlog.Redact(cc.JTI),
		"account", decisionlog.Redact(cc.Subject), "act", act)
	return Outcome{Status: http.StatusCreated, Extra: api.Deposit{
		ConfirmationRef: ref, JTI: cc.JTI, Act: act, ExpiresAt: cc.Expiry.Unix(),
	}}
}

// sameRequestWon handles two identical requests racing: the loser sees the
// confirmation consumed, but by its own key and request, so it must get the
// winner's allow (docs/architecture.md §1), not a CONFIRMATION_REPLAYED a caller would
// take as final.
func (s *Service) sameRequestWon(ctx context.Context, caller Caller, key, digest string) (Outcome, bool) {
	a, err := s.opts.Ledger.Admission(ctx, caller.Account, key)
	if err != nil || a.RequestDigest != digest {
		return Outcome{}, false
	}
	return replayed(a), true
}

func onlyReplayed(vs []api.Finding) bool {
	return len(vs) == 1 && vs[0].Code == api.CodeConfirmationReplayed
}

func replayed(a ledger.Admission) Outcome {
	return Outcome{
		Status: http.StatusOK,
		Notice: "idempotent replay: this request was already admitted; nothing new was consumed",
		Data: &api.AdmissionData{
			Decision: "allow", DecisionID: a.DecisionID, Action: a.Action, BookingID: a.BookingID,
			RunID: a.RunID, ManifestDigest: a.ManifestDigest, IdempotencyKey: a.IdempotencyKey,
			State: a.State, BundleRevision: a.BundleRevision,
			GPUs: a.GPUs, LiveUntil: unixOrZero(a.LiveUntil), Ticket: a.Ticket,
		},
	}
}

func (s *Service) ledgerFault(op string, err error) Outcome {
	s.opts.Logger.Error("ledger unavailable", "op", op, "err", err)
	if s.opts.OnLedgerError != nil {
		s.opts.OnLedgerError(op)
	}
	if he, ok := errors.AsType[*ledger.HoldError](err); ok {
		return fail(api.CodeLedgerUnavailable, "the ledger was restored from a backup: deposits and admissions are held until "+
			he.Until.Format(time.RFC3339)+"; denied, nothing was written")
	}
	return fail(api.CodeLedgerUnavailable, "the ledger is unavailable; denied, nothing was written")
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

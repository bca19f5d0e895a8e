package admission

import (
	"context"
	"maps"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Input is the policy input (docs/policy-input.md, schemas/input.json) as
// typed facts, and Document is the one place that turns them into the
// document the policy evaluates, the decision log records and `itogate
// replay` evaluates again. The server fills it from what verify
// established (Service.facts); the offline callers (itogate eval, the
// policy benchmarks, bench/loadgen: scenario.OfflineFacts) fill the same
// fields from assumed facts. Every field of the document is always set
// except the ones said to be absent below.
type Input struct {
	Now time.Time
	// Leeway is the clock leeway each verifier applied (input.leeway_seconds,
	// whole seconds).
	Leeway Leeway
	// Request is the admission request; the document holds its action,
	// booking, idempotency key, run, releases_booking, stage and
	// checkpoint step, and its confirmation ref as input.confirmation.ref.
	Request       Request
	RequestDigest string
	Caller        Caller
	// ManifestDigest and Manifest are "" and empty for an action without
	// a manifest.
	ManifestDigest string
	Manifest       map[string]any
	Verification   Verification
	// Entitlement and Confirmation are the verified tokens' claims as the
	// verifiers return them (numbers int64 or float64); Document never
	// changes either map.
	Entitlement  map[string]any
	Confirmation map[string]any
	EvalReports  []EvalReport
	Ledger       LedgerFacts
	// Facts is the training-facts model of the bundle that decides
	// (policy.Engine.Facts): Document computes input.facts with it. Nil
	// leaves input.facts out, which an engine with a facts model refuses
	// (api.CodePolicyFactsMismatch).
	Facts *trainfacts.Model
}

// Leeway is input.leeway_seconds.
type Leeway struct {
	Entitlement, Confirmation time.Duration
}

// Verified is one signature established in Go (the policy requires it
// again): whether it verified and the key that did.
type Verified struct {
	Verified bool
	KeyID    string
}

// VerifiedBy is a signature verified by the key keyID.
func VerifiedBy(keyID string) Verified { return Verified{Verified: true, KeyID: keyID} }

// Verification is input.verification.
type Verification struct {
	Caller Verified
	// ManifestSignature is nil for an action without a manifest: the
	// document has no manifest_signature then.
	ManifestSignature *Verified
	Entitlement       Verified
	Confirmation      Verified
}

// EvalReport is one verified token of the eval authority
// (input.eval_reports[i]).
type EvalReport struct {
	Verified
	Claims map[string]any
}

// LedgerFacts is input.ledger: what the ledger held when it was read
// before the policy ran (the commit checks it again).
type LedgerFacts struct {
	ConfirmationConsumed bool
	// SeenKey: the idempotency key is stored for another request (an exact
	// retry of a stored admission never reaches the policy, so
	// idempotency.same_request is always false).
	SeenKey bool
	// Booking is the booking's usage at Now, for train.create and
	// train.stage.advance only (nil, and absent from the document, for
	// every other action): an advance into a stage larger than its run
	// grows the run by GPUs the booking has free.
	Booking *BookingFacts
	// Run is the run a stage advance or restart acts on (nil, and absent,
	// for every other action).
	Run *RunFacts
}

// BookingFacts is input.ledger.booking.
type BookingFacts struct {
	// HeldGPUs are held by the booking's live runs, every account's.
	HeldGPUs int
	// HeldCheckpointGiB is the checkpoint storage (GiB) they keep.
	HeldCheckpointGiB int64
	// LiveRuns are at most ledger.MaxNamedRuns of the caller account's own
	// live runs (ledger.NamedRuns); LiveRunCount counts all of them.
	LiveRuns     []ledger.RunRecord
	LiveRunCount int
	Released     bool
}

// BookingFactsOf is input.ledger.booking for account from the booking's
// usage: runs of other accounts are counted in HeldGPUs, never listed; of
// the account's own, LiveRuns names at most ledger.MaxNamedRuns (oldest
// first) and LiveRunCount counts them all, so the input stays bounded
// however many runs the booking holds.
func BookingFactsOf(account string, u ledger.BookingUsage) *BookingFacts {
	var own []ledger.RunRecord
	for _, r := range u.Runs {
		if r.Account == account {
			own = append(own, r)
		}
	}
	named, _ := ledger.NamedRuns(own)
	return &BookingFacts{HeldGPUs: u.HeldGPUs, HeldCheckpointGiB: u.HeldCheckpointGiB, LiveRuns: named,
		LiveRunCount: len(own), Released: !u.Released.IsZero()}
}

// RunFacts is input.ledger.run: the run's state at Now
// (ledger.RunRecord.State: "live", "halted", "revoked", "cancelled",
// "cleaned_up", "released", "expired"; "unknown" without a record), the
// stage the ledger records it in, the digest of the manifest it was
// admitted with, and for a halted run its halt.
type RunFacts struct {
	State, Stage, ManifestDigest string
	// Halt is input.ledger.run.halt: set, and present, only when State is
	// "halted".
	Halt *HaltFacts
	// Restarts is input.ledger.run.restarts, the restarts admitted so far;
	// Plan is input.ledger.run.checkpoint, the run's checkpoint plan (all
	// zero when none was recorded).
	Restarts int
	Plan     ledger.RunPlan
	// GPUs is input.ledger.run.gpus, the GPUs the run holds of its booking
	// (ledger.RunRecord.GPUs: its world size, grown by a stage advance
	// into a larger stage); 0 without a run record.
	GPUs int
}

// HaltFacts is input.ledger.run.halt: the stage whose eval gate failed,
// the failed evals, the failing report's digest and the decision that
// recorded the halt.
type HaltFacts struct {
	Stage        string
	FailedEvals  []string
	ReportDigest string
	DecisionID   string
}

// Document is the policy input document. Its maps are new, but for the
// manifest, the entitlement claims and the eval reports' claims, which it
// holds as they are; its numbers are int64 (times, leeways, the checkpoint
// step) and int (GPU counts), or what the claims and the manifest hold.
func (in Input) Document() map[string]any {
	req := in.Request
	manifest := in.Manifest
	if manifest == nil {
		manifest = map[string]any{}
	}
	confirmation := make(map[string]any, len(in.Confirmation)+1)
	for k, v := range in.Confirmation {
		confirmation[k] = v
	}
	confirmation["ref"] = req.ConfirmationRef
	reports := make([]any, 0, len(in.EvalReports))
	for _, r := range in.EvalReports {
		reports = append(reports, map[string]any{"verified": r.Verified.Verified, "key_id": r.KeyID, "claims": r.Claims})
	}
	doc := map[string]any{
		"now": in.Now.Unix(),
		"leeway_seconds": map[string]any{
			"entitlement":  seconds(in.Leeway.Entitlement),
			"confirmation": seconds(in.Leeway.Confirmation),
		},
		"request": map[string]any{
			"action":           string(req.Action),
			"booking_id":       req.BookingID,
			"idempotency_key":  req.IdempotencyKey,
			"request_digest":   in.RequestDigest,
			"run_id":           req.RunID,
			"releases_booking": req.ReleasesBooking,
			"stage":            req.Stage,
			"checkpoint_step":  req.Step(),
		},
		"caller":          map[string]any{"sub": in.Caller.Subject, "account": in.Caller.Account, "key_id": in.Caller.KeyID},
		"manifest_digest": in.ManifestDigest,
		"manifest":        manifest,
		"verification":    in.Verification.document(),
		"entitlement":     in.Entitlement,
		"confirmation":    confirmation,
		"eval_reports":    reports,
		"ledger":          in.Ledger.document(),
	}
	return WithFacts(doc, in.Facts)
}

// WithFacts sets input.facts of a policy input document: the training
// facts model computes them from the document's manifest, entitlement and
// now (for train.create; only the version for any other action). A strict
// built-in error the formulas would raise in Rego becomes facts.error, on
// which the engine fails closed (api.CodePolicyEvaluationFailed). With a
// nil model, doc is returned without facts. Document builds every input
// through it; a candidate bundle (shadow evaluation, itogate replay) uses it
// to recompute the facts of a recorded input from its own data, on a copy
// (WithFactsCopy).
func WithFacts(doc map[string]any, model *trainfacts.Model) map[string]any {
	if model == nil {
		delete(doc, "facts")
		return doc
	}
	facts, err := model.Compute(doc)
	if err != nil {
		facts = map[string]any{"version": model.Version(), "error": err.Error()}
	}
	doc["facts"] = facts
	return doc
}

// WithFactsCopy is WithFacts on a shallow copy of doc, which stays as it is.
func WithFactsCopy(doc map[string]any, model *trainfacts.Model) map[string]any {
	return WithFacts(maps.Clone(doc), model)
}

// FactsOf is the training-facts model of a decider that has one
// (policy.Engine), else nil.
func FactsOf(decider any) *trainfacts.Model {
	if f, ok := decider.(interface{ Facts() *trainfacts.Model }); ok {
		return f.Facts()
	}
	return nil
}

// OwnFacts is d deciding every input with the training facts of its own
// bundle, computed again from the input's manifest and entitlement
// (WithFactsCopy), whatever facts the input carries: how a candidate bundle
// evaluates a recorded input (itogate replay), never with the facts another
// bundle's tables made.
func OwnFacts(d Decider) Decider { return ownFacts{d} }

type ownFacts struct{ d Decider }

func (o ownFacts) Decide(ctx context.Context, input map[string]any) (policy.Decision, error) {
	return o.d.Decide(ctx, WithFactsCopy(input, FactsOf(o.d)))
}

func (o ownFacts) Revision() string { return o.d.Revision() }

func (o ownFacts) Facts() *trainfacts.Model { return FactsOf(o.d) }

func (v Verification) document() map[string]any {
	out := map[string]any{
		"caller":       v.Caller.document(),
		"entitlement":  v.Entitlement.document(),
		"confirmation": v.Confirmation.document(),
	}
	if v.ManifestSignature != nil {
		out["manifest_signature"] = v.ManifestSignature.document()
	}
	return out
}

func (v Verified) document() map[string]any {
	return map[string]any{"verified": v.Verified, "key_id": v.KeyID}
}

func (l LedgerFacts) document() map[string]any {
	out := map[string]any{
		"confirmation_consumed": l.ConfirmationConsumed,
		"idempotency":           map[string]any{"seen": l.SeenKey, "same_request": false},
	}
	if b := l.Booking; b != nil {
		runs := make([]any, 0, len(b.LiveRuns))
		for _, r := range b.LiveRuns {
			runs = append(runs, map[string]any{"run_id": r.RunID, "gpus": r.GPUs, "live_until": r.LiveUntil.Unix()})
		}
		out["booking"] = map[string]any{"held_gpus": b.HeldGPUs, "held_checkpoint_gib": b.HeldCheckpointGiB,
			"live_runs": runs, "live_run_count": b.LiveRunCount, "released": b.Released}
	}
	if r := l.Run; r != nil {
		run := map[string]any{"state": r.State, "stage": r.Stage, "manifest_digest": r.ManifestDigest,
			"restarts": r.Restarts, "gpus": r.GPUs, "checkpoint": map[string]any{
				"interval_steps": r.Plan.IntervalSteps, "steps": r.Plan.Steps,
				"wall_clock_seconds": r.Plan.WallClockSeconds, "lost_seconds_per_restart": r.Plan.LostSecondsPerRestart,
			}}
		if h := r.Halt; h != nil {
			evals := make([]any, len(h.FailedEvals))
			for i, e := range h.FailedEvals {
				evals[i] = e
			}
			run["halt"] = map[string]any{"stage": h.Stage, "failed_evals": evals, "report_digest": h.ReportDigest,
				"decision_id": h.DecisionID}
		}
		out["run"] = run
	}
	return out
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// leeway is the clock leeway of v: the tolerance the verifier applied to
// exp and iat, handed to the policy so both agree. A verifier that does
// not say uses verify.DefaultLeeway.
func leeway(v TokenVerifier) time.Duration {
	if l, ok := v.(interface{ Leeway() time.Duration }); ok {
		return l.Leeway()
	}
	return verify.DefaultLeeway
}

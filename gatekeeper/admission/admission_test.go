package admission_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/booking"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// These tests pin what Service.Admit, Status, Deposit and Revoke answer
// today, stage by stage (precheck, verify, facts, decide, commit), and what
// each answer wrote to a real bbolt ledger. Verifiers and the policy are
// fakes: the codes asserted here are the ones Go and the ledger produce
// whatever the bundle says.

// effect is what an admission did to the ledger.
type effect int

const (
	// unchanged: the request's confirmation, the admission under its key,
	// its run and the booking's usage are exactly as before.
	unchanged effect = iota
	// committed: a fresh allow — the confirmation consumed by the key at
	// now, the admission stored under it, and the action's effect on the
	// run or booking.
	committed
	// raced: an admission racing this one (fakeDecider.during) wrote; the
	// case's check says what the ledger holds.
	raced
	// halted: a deny that halted the run (a failed eval gate): nothing
	// consumed or stored under the key; the run's halt names this
	// decision.
	halted
)

type admitCase struct {
	name string
	// setup prepares the ledger and returns the request; it may set
	// e.decider (an allowing fake otherwise).
	setup      func(t *testing.T, e *env) admission.Request
	status     int
	code       api.Code
	violations []api.Code         // codes, in order
	decision   string             // data.decision; "" when the outcome has no data
	state      api.AdmissionState // data.state
	effect     effect
	// cost is the stored cost (µUSD) of a committed train.create: the
	// base run's 958.28 USD when 0
	cost  int64
	check func(t *testing.T, e *env, req admission.Request, out admission.Outcome)
}

func validCreate(t *testing.T, e *env) admission.Request {
	ref := e.confirm(t, "cnf-1", api.TrainCreate, "", costOK)
	return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
}

// onRun admits a run and returns a request for action on it with its own
// confirmation (bound to the run; booking.release binds none).
func onRun(action api.Action) func(t *testing.T, e *env) admission.Request {
	return func(t *testing.T, e *env) admission.Request {
		runID := e.admitRun(t)
		bound := runID
		if action == api.BookingRelease {
			runID, bound = "", ""
		}
		ref := e.confirm(t, "cnf-1", action, bound, "0")
		return e.runReq(action, "key-1", ref, e.entitlement("ent-1", nil), runID)
	}
}

// with applies edit to the request setup returns.
func with(setup func(*testing.T, *env) admission.Request, edit func(*env, *admission.Request)) func(*testing.T, *env) admission.Request {
	return func(t *testing.T, e *env) admission.Request {
		req := setup(t, e)
		edit(e, &req)
		return req
	}
}

// policyInput asserts the decider ran and returns its input.
func policyInput(t *testing.T, e *env) map[string]any {
	t.Helper()
	d, ok := e.decider.(*fakeDecider)
	if !ok {
		t.Fatalf("decider %T, want a *fakeDecider", e.decider)
	}
	if d.calls != 1 {
		t.Fatalf("the policy ran %d times, want once", d.calls)
	}
	return d.input
}

func decidedNot(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
	t.Helper()
	if d, ok := e.decider.(*fakeDecider); ok && d.calls != 0 {
		t.Fatalf("the policy ran %d times; this deny comes before it", d.calls)
	}
}

func verifyErr(p verify.Purpose, k verify.Kind) error {
	return &verify.Error{Purpose: p, Kind: k, Err: errors.New("test")}
}

func admitCases() []admitCase {
	const (
		create  = api.TrainCreate
		cancel  = api.TrainCancel
		cleanup = api.TrainCleanup
		release = api.BookingRelease
		advance = api.TrainStageAdvance
		restart = api.TrainRestart
	)
	shape := func(name string, edit func(*env, *admission.Request)) admitCase {
		return admitCase{name: "request/" + name, setup: with(validCreate, edit),
			status: 400, code: api.CodeRequestInvalid, check: decidedNot}
	}
	shapeOn := func(name string, action api.Action, edit func(*env, *admission.Request)) admitCase {
		return admitCase{name: "request/" + name, setup: with(onRun(action), edit),
			status: 400, code: api.CodeRequestInvalid, check: decidedNot}
	}
	entDenied := func(name string, err error, code api.Code) admitCase {
		return admitCase{name: "entitlement/" + name, setup: with(validCreate, func(e *env, r *admission.Request) {
			r.EntitlementToken = e.entitlementErr(name, err)
		}), status: api.StatusOf(code), code: code, check: decidedNot}
	}
	// confAtUse deposits a valid create confirmation, then makes its
	// stored token verify with err (a key rotated, the clock moved on).
	confAtUse := func(name string, err error, code api.Code) admitCase {
		return admitCase{name: "confirmation/" + name, setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.confs.tokens["cnf.cnf-1"] = tokenAnswer{err: err}
			return req
		}, status: 403, code: code, check: decidedNot}
	}

	return []admitCase{
		// Every action, allowed by the policy and committed.
		{name: "allow/train.create", setup: validCreate,
			status: 200, decision: "allow", state: "admitted", effect: committed,
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				in := policyInput(t, e)
				if got := input(in, "ledger", "booking", "held_gpus"); got != 0 {
					t.Errorf("input.ledger.booking.held_gpus = %v, want 0", got)
				}
				if got := input(in, "verification", "manifest_signature", "key_id"); got != "manifest-key-1" {
					t.Errorf("input.verification.manifest_signature.key_id = %v", got)
				}
				if got := input(in, "confirmation", "ref"); got != req.ConfirmationRef {
					t.Errorf("input.confirmation.ref = %v, want %s", got, req.ConfirmationRef)
				}
				if got := input(in, "now"); got != now.Unix() {
					t.Errorf("input.now = %v, want %d", got, now.Unix())
				}
			}},
		{name: "allow/train.cancel", setup: onRun(cancel),
			status: 200, decision: "allow", state: "cancel_admitted", effect: committed},
		{name: "allow/train.cleanup releases_booking", setup: with(onRun(cleanup), func(_ *env, r *admission.Request) {
			r.ReleasesBooking = true
		}), status: 200, decision: "allow", state: "cleanup_admitted", effect: committed,
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				// releases_booking is only policy input: a cleanup never
				// releases the booking by itself.
				u, _ := e.store.BookingUsage(context.Background(), scenario.Booking, now)
				if !u.Released.IsZero() {
					t.Errorf("booking released at %v by a cleanup", u.Released)
				}
			}},
		{name: "allow/booking.release", setup: onRun(release),
			status: 200, decision: "allow", state: "release_admitted", effect: committed,
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				// The live run of the booking ends with it.
				u, _ := e.store.BookingUsage(context.Background(), scenario.Booking, now.Add(-time.Second))
				if len(u.Runs) != 1 {
					t.Fatalf("runs live before the release: %+v", u.Runs)
				}
				rec, _ := e.store.RunRecord(context.Background(), u.Runs[0].RunID)
				if !rec.EndedAt.Equal(now) || rec.EndedBy != release {
					t.Errorf("run after release: ended %v by %q", rec.EndedAt, rec.EndedBy)
				}
			}},
		{name: "allow/train.stage.advance", setup: onRun(advance),
			status: 200, decision: "allow", state: "stage_advanced", effect: committed,
			check: func(t *testing.T, e *env, req admission.Request, _ admission.Outcome) {
				run := input(policyInput(t, e), "ledger", "run")
				want := map[string]any{"state": "live", "stage": "pretrain", "manifest_digest": e.digest,
					"restarts": 0, "gpus": 64, "checkpoint": fixturePlan}
				if !reflect.DeepEqual(run, want) {
					t.Errorf("input.ledger.run = %v, want %v", run, want)
				}
				a, _ := e.store.Admission(context.Background(), caller.Account, req.IdempotencyKey)
				if a.FromStage != "pretrain" || a.Stage != "midtrain" {
					t.Errorf("stored advance %q -> %q", a.FromStage, a.Stage)
				}
			}},
		{name: "allow/train.restart", setup: with(onRun(restart), func(_ *env, r *admission.Request) {
			r.CheckpointStep = new(int64(500))
		}), status: 200, decision: "allow", state: "restart_admitted", effect: committed,
			check: func(t *testing.T, e *env, req admission.Request, _ admission.Outcome) {
				a, _ := e.store.Admission(context.Background(), caller.Account, req.IdempotencyKey)
				if a.CheckpointStep != 500 {
					t.Errorf("stored checkpoint step %d", a.CheckpointStep)
				}
			}},
		{name: "allow/train.cancel of a run already cancelled keeps its first end",
			setup: func(t *testing.T, e *env) admission.Request {
				runID := e.admitRun(t)
				ref := e.confirm(t, "cnf-0", cancel, runID, "0")
				e.mustAdmit(t, caller, e.runReq(cancel, "key-0", ref, e.entitlement("ent-0", nil), runID))
				ref = e.confirm(t, "cnf-1", cancel, runID, "0")
				return e.runReq(cancel, "key-1", ref, e.entitlement("ent-1", nil), runID)
			}, status: 200, decision: "allow", state: "cancel_admitted", effect: committed},

		// Request shape: 400 before anything is read or verified.
		shape("unknown action", func(_ *env, r *admission.Request) { r.Action = "train.delete" }),
		shape("bad booking id", func(_ *env, r *admission.Request) { r.BookingID = "bk/01" }),
		shape("empty booking id", func(_ *env, r *admission.Request) { r.BookingID = "" }),
		shape("bad idempotency key", func(_ *env, r *admission.Request) { r.IdempotencyKey = "key 1" }),
		shape("idempotency key too long", func(_ *env, r *admission.Request) { r.IdempotencyKey = strings.Repeat("k", 129) }),
		shape("bad confirmation ref", func(_ *env, r *admission.Request) { r.ConfirmationRef = "cfr_NOTHEX" }),
		shape("no entitlement token", func(_ *env, r *admission.Request) { r.EntitlementToken = "" }),
		shape("run_id on train.create", func(_ *env, r *admission.Request) { r.RunID = "run_01" }),
		shape("releases_booking on train.create", func(_ *env, r *admission.Request) { r.ReleasesBooking = true }),
		shape("stage on train.create", func(_ *env, r *admission.Request) { r.Stage = "midtrain" }),
		shape("checkpoint_step on train.create", func(_ *env, r *admission.Request) { r.CheckpointStep = new(int64(1)) }),
		// An explicit 0 is a step, told apart from none.
		shape("checkpoint_step 0 on train.create", func(_ *env, r *admission.Request) { r.CheckpointStep = new(int64(0)) }),
		shape("too many eval reports", func(_ *env, r *admission.Request) {
			r.EvalReports = make([]string, api.MaxEvalReports+1)
			for i := range r.EvalReports {
				r.EvalReports[i] = "eval"
			}
		}),
		shape("empty eval report", func(_ *env, r *admission.Request) { r.EvalReports = []string{""} }),
		shapeOn("no run_id on train.cancel", cancel, func(_ *env, r *admission.Request) { r.RunID = "" }),
		shapeOn("bad run_id on train.cleanup", cleanup, func(_ *env, r *admission.Request) { r.RunID = "run/1" }),
		shapeOn("run_id on booking.release", release, func(_ *env, r *admission.Request) { r.RunID = "run_01" }),
		shapeOn("manifest on train.cancel", cancel, func(e *env, r *admission.Request) { r.Manifest = e.raw }),
		shapeOn("manifest signature on train.cleanup", cleanup, func(_ *env, r *admission.Request) { r.ManifestSignature = sigOK }),
		shapeOn("releases_booking on train.cancel", cancel, func(_ *env, r *admission.Request) { r.ReleasesBooking = true }),
		shapeOn("eval reports on train.cancel", cancel, func(_ *env, r *admission.Request) { r.EvalReports = []string{"eval"} }),
		shapeOn("bad stage on train.stage.advance", advance, func(_ *env, r *admission.Request) { r.Stage = "Mid-Train" }),
		// An advance without its manifest is a shape error, never
		// MANIFEST_REQUIRED: validateLifecycle refuses it first.
		shapeOn("no manifest on train.stage.advance", advance, func(_ *env, r *admission.Request) {
			r.Manifest, r.ManifestSignature = nil, ""
		}),
		shapeOn("negative checkpoint_step on train.restart", restart, func(_ *env, r *admission.Request) { r.CheckpointStep = new(int64(-1)) }),
		shapeOn("no checkpoint_step on train.restart", restart, func(_ *env, r *admission.Request) { r.CheckpointStep = nil }),
		{name: "request/no manifest on train.create", setup: with(validCreate, func(_ *env, r *admission.Request) {
			r.Manifest = nil
		}), status: 400, code: api.CodeManifestRequired, check: decidedNot},
		{name: "request/manifest too large", setup: with(validCreate, func(_ *env, r *admission.Request) {
			r.Manifest = make([]byte, manifest.MaxBytes+1)
		}), status: 413, code: api.CodeManifestTooLarge, check: decidedNot},

		// Manifest: signature over the exact bytes, then the schema.
		{name: "manifest/signature invalid", setup: with(validCreate, func(_ *env, r *admission.Request) {
			r.ManifestSignature = "sig-forged"
		}), status: 403, code: api.CodeManifestSignature, check: decidedNot},
		{name: "manifest/signed but not JSON", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			req.Manifest = []byte("{not json")
			return req
		}, status: 400, code: api.CodeManifestMalformed, check: decidedNot},
		{name: "manifest/signed but off schema", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			req.Manifest = []byte(`{"schema":"ito.training/v1"}`)
			return req
		}, status: 400, code: api.CodeManifestSchemaInvalid, check: decidedNot},

		// Entitlement.
		entDenied("invalid", verifyErr(verify.PurposeEntitlement, verify.KindSignature), api.CodeEntitlementInvalid),
		entDenied("unknown key", verifyErr(verify.PurposeEntitlement, verify.KindUnknownKey), api.CodeEntitlementInvalid),
		entDenied("expired", verifyErr(verify.PurposeEntitlement, verify.KindExpired), api.CodeEntitlementExpired),
		entDenied("issued in future", verifyErr(verify.PurposeEntitlement, verify.KindIssuedInFuture), api.CodeEntitlementStale),
		// A verifier error that is not a *verify.Error maps to
		// INTERNAL_ERROR, yet keeps the deny's 403 (docs/codes.md lists
		// INTERNAL_ERROR as 500). The real verifiers only return
		// *verify.Error.
		// An unexpected verifier fault: 500 INTERNAL_ERROR (a 403 before
		// the registry gave each code one status).
		entDenied("not a verify.Error", errors.New("boom"), api.CodeInternal),
		{name: "entitlement/jti the ledger cannot hold", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			req.EntitlementToken = e.entitlement("ent-nul", func(m map[string]any) { m["jti"] = "bad\x00jti" })
			return req
		}, status: 403, code: api.CodeEntitlementInvalid, check: decidedNot},

		// Confirmation, resolved by reference and verified again at use.
		{name: "confirmation/not found", setup: func(t *testing.T, e *env) admission.Request {
			return e.createReq("key-1", ledger.NewConfirmationRef(), e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationNotFound, check: decidedNot},
		confAtUse("expired at use", verifyErr(verify.PurposeConfirmation, verify.KindExpired), api.CodeConfirmationExpired),
		confAtUse("invalid at use", verifyErr(verify.PurposeConfirmation, verify.KindSignature), api.CodeConfirmationInvalid),
		{name: "confirmation/swept unused", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.deposit(t, e.confirmation("cnf-1", create, "", costOK, func(m map[string]any) {
				m["exp"] = now.Add(-time.Hour).Unix()
			}))
			if _, err := e.store.Sweep(context.Background(), now, 0); err != nil {
				t.Fatal(err)
			}
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationExpired, check: decidedNot},
		{name: "confirmation/swept after use", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.deposit(t, e.confirmation("cnf-1", create, "", costOK, func(m map[string]any) {
				m["exp"] = now.Add(-time.Hour).Unix()
			}))
			e.mustAdmit(t, caller, e.createReq("key-0", ref, e.entitlement("ent-0", nil)))
			if _, err := e.store.Sweep(context.Background(), now, 0); err != nil {
				t.Fatal(err)
			}
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationReplayed, check: decidedNot},
		{name: "confirmation/replayed, policy denies it", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", costOK)
			e.mustAdmit(t, caller, e.createReq("key-0", ref, e.entitlement("ent-0", nil)))
			e.decider = deny(api.CodeConfirmationReplayed)
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationReplayed, violations: []api.Code{api.CodeConfirmationReplayed},
			decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				if got := input(policyInput(t, e), "ledger", "confirmation_consumed"); got != true {
					t.Errorf("input.ledger.confirmation_consumed = %v, want true", got)
				}
			}},
		{name: "confirmation/replayed, policy allows, ledger refuses", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", costOK)
			e.mustAdmit(t, caller, e.createReq("key-0", ref, e.entitlement("ent-0", nil)))
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationReplayed, violations: []api.Code{api.CodeConfirmationReplayed},
			decision: "deny", state: "denied"},
		{name: "confirmation/revoked", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.revoke(t, ledger.RevokeConfirmation, "cnf-1")
			return req
		}, status: 403, code: api.CodeConfirmationRevoked, violations: []api.Code{api.CodeConfirmationRevoked},
			check: decidedNot},
		{name: "confirmation/bound to another booking", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.deposit(t, e.confirmation("cnf-1", create, "", costOK, func(m map[string]any) {
				m["booking_id"] = "bk_other"
			}))
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationInvalid, decision: "deny", state: "denied"},
		{name: "confirmation/bound to another manifest", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.deposit(t, e.confirmation("cnf-1", create, "", costOK, func(m map[string]any) {
				m["manifest_digest"] = "sha256:" + strings.Repeat("0", 64)
			}))
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationInvalid, decision: "deny", state: "denied"},
		{name: "confirmation/for another action", setup: func(t *testing.T, e *env) admission.Request {
			runID := e.admitRun(t)
			ref := e.confirm(t, "cnf-1", cleanup, runID, "0")
			return e.runReq(cancel, "key-1", ref, e.entitlement("ent-1", nil), runID)
		}, status: 403, code: api.CodeConfirmationInvalid, decision: "deny", state: "denied"},

		// Revocations: a create is refused, teardown still admitted.
		{name: "revoked/booking refuses train.create", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.revoke(t, ledger.RevokeBooking, scenario.Booking)
			return req
		}, status: 403, code: api.CodeEntitlementRevoked, violations: []api.Code{api.CodeEntitlementRevoked},
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				decidedNot(t, e, req, out)
				if want := "every entitlement of this booking was revoked by its issuer at 2026-11-30T11:59:00Z"; out.Message != want {
					t.Errorf("message %q, want %q", out.Message, want)
				}
			}},
		{name: "revoked/entitlement refuses train.create", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.revoke(t, ledger.RevokeEntitlement, "ent-1")
			return req
		}, status: 403, code: api.CodeEntitlementRevoked, violations: []api.Code{api.CodeEntitlementRevoked},
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				decidedNot(t, e, req, out)
				if want := "the entitlement was revoked by its issuer at 2026-11-30T11:59:00Z"; out.Message != want {
					t.Errorf("message %q, want %q", out.Message, want)
				}
			}},
		{name: "revoked/booking and entitlement still admit train.cancel", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(cancel)(t, e)
			e.revoke(t, ledger.RevokeBooking, scenario.Booking)
			e.revoke(t, ledger.RevokeEntitlement, "ent-1")
			return req
		}, status: 200, decision: "allow", state: "cancel_admitted", effect: committed},
		{name: "revoked/booking and entitlement still admit booking.release", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(release)(t, e)
			e.revoke(t, ledger.RevokeBooking, scenario.Booking)
			e.revoke(t, ledger.RevokeEntitlement, "ent-1")
			return req
		}, status: 200, decision: "allow", state: "release_admitted", effect: committed},
		// Admit itself does not check the caller key (the server does,
		// through CallerRevoked, before Admit); the commit does.
		{name: "revoked/caller key refused at commit", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.revoke(t, ledger.RevokeCallerKey, caller.KeyID)
			return req
		}, status: 401, code: api.CodeCallerRevoked, decision: "deny", state: "denied"},

		// Policy.
		{name: "policy/deny lists every violation", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.decider = deny("BUDGET_CEILING_EXCEEDED", "DATA_LICENSE_MISSING", "HARDWARE_REGION_MISMATCH")
			return req
		}, status: 403, code: "BUDGET_CEILING_EXCEEDED",
			violations: []api.Code{"BUDGET_CEILING_EXCEEDED", "DATA_LICENSE_MISSING", "HARDWARE_REGION_MISMATCH"},
			decision:   "deny", state: "denied",
			check: func(t *testing.T, _ *env, _ admission.Request, out admission.Outcome) {
				if want := "denied by policy: violated BUDGET_CEILING_EXCEEDED"; out.Message != want {
					t.Errorf("message %q, want %q", out.Message, want)
				}
			}},
		{name: "policy/idempotency conflict among violations is 409", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.decider = deny("BUDGET_CEILING_EXCEEDED", api.CodeIdempotencyConflict, "DATA_LICENSE_MISSING")
			return req
		}, status: 409, code: api.CodeIdempotencyConflict,
			violations: []api.Code{"BUDGET_CEILING_EXCEEDED", api.CodeIdempotencyConflict, "DATA_LICENSE_MISSING"},
			decision:   "deny", state: "denied",
			check: func(t *testing.T, _ *env, _ admission.Request, out admission.Outcome) {
				if want := "denied by policy: violated " + string(api.CodeIdempotencyConflict); out.Message != want {
					t.Errorf("message %q, want %q", out.Message, want)
				}
			}},
		{name: "policy/key bound to another request, permissive policy: ledger 409", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-0", create, "", costOK)
			e.mustAdmit(t, caller, e.createReq("key-1", ref, e.entitlement("ent-0", nil)))
			ref = e.confirm(t, "cnf-1", create, "", costOK)
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 409, code: api.CodeIdempotencyConflict, violations: []api.Code{api.CodeIdempotencyConflict},
			decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				idem := input(policyInput(t, e), "ledger", "idempotency")
				if want := map[string]any{"seen": true, "same_request": false}; !reflect.DeepEqual(idem, want) {
					t.Errorf("input.ledger.idempotency = %v, want %v", idem, want)
				}
			}},
		{name: "policy/not ready", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.decider = nil
			return req
		}, status: 503, code: api.CodePolicyNotReady},
		{name: "policy/timeout", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.decider = &fakeDecider{err: &policy.Error{Code: api.CodePolicyTimeout, Err: context.DeadlineExceeded}}
			return req
		}, status: 503, code: api.CodePolicyTimeout, decision: "deny", state: "denied"},
		{name: "policy/plain error", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.decider = &fakeDecider{err: errors.New("rego: boom")}
			return req
		}, status: 503, code: api.CodePolicyEvaluationFailed, decision: "deny", state: "denied"},

		// Exact retries: the stored allow, nothing verified, evaluated or
		// consumed, whatever happened to the tokens since.
		{name: "retry/fresh entitlement token replays the allow", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.mustAdmit(t, caller, req)
			e.decider = allow()
			req.EntitlementToken = e.entitlement("ent-fresh", nil)
			return req
		}, status: 200, decision: "allow", state: "admitted", check: replayOf("key-1")},
		{name: "retry/revoked and unverifiable tokens replay the allow", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.mustAdmit(t, caller, req)
			e.decider = allow()
			e.revoke(t, ledger.RevokeConfirmation, "cnf-1")
			e.revoke(t, ledger.RevokeBooking, scenario.Booking)
			e.ents.tokens[req.EntitlementToken] = tokenAnswer{err: verifyErr(verify.PurposeEntitlement, verify.KindExpired)}
			e.confs.tokens["cnf.cnf-1"] = tokenAnswer{err: verifyErr(verify.PurposeConfirmation, verify.KindExpired)}
			return req
		}, status: 200, decision: "allow", state: "admitted", check: replayOf("key-1")},
		{name: "retry/train.cancel replays the allow", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(cancel)(t, e)
			e.mustAdmit(t, caller, req)
			e.decider = allow()
			return req
		}, status: 200, decision: "allow", state: "cancel_admitted", check: replayOf("key-1")},

		// Run lookups: another account's run, a run on another booking and
		// an unknown run answer alike.
		{name: "run/another account's run", setup: func(t *testing.T, e *env) admission.Request {
			runID := e.admitRunAs(t, admission.Caller{Subject: "svc-other", Account: "acct_other", KeyID: "caller-key-2"}, "bk_other_acct")
			ref := e.confirm(t, "cnf-1", cancel, runID, "0")
			return e.runReq(cancel, "key-1", ref, e.entitlement("ent-1", nil), runID)
		}, status: 403, code: api.CodeRunNotFound, check: decidedNot},
		{name: "run/own run on another booking", setup: func(t *testing.T, e *env) admission.Request {
			runID := e.admitRunAs(t, caller, "bk_demo_02")
			ref := e.confirm(t, "cnf-1", cancel, runID, "0")
			return e.runReq(cancel, "key-1", ref, e.entitlement("ent-1", nil), runID)
		}, status: 403, code: api.CodeRunNotFound, check: decidedNot},
		{name: "run/unknown run", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", restart, "run_unknown", "0")
			return e.runReq(restart, "key-1", ref, e.entitlement("ent-1", nil), "run_unknown")
		}, status: 403, code: api.CodeRunNotFound, check: decidedNot},

		// Refused at commit after a permissive policy allowed.
		{name: "commit/capacity exceeded", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-0", create, "", costOK)
			e.mustAdmit(t, caller, e.createReq("key-0", ref, e.exactEntitlement("ent-0")))
			ref = e.confirm(t, "cnf-1", create, "", costOK)
			return e.createReq("key-1", ref, e.exactEntitlement("ent-1"))
		}, status: 403, code: api.CodeBookingCapacityExceeded, violations: []api.Code{api.CodeBookingCapacityExceeded},
			decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, _ admission.Request, out admission.Outcome) {
				first, _ := e.store.Admission(context.Background(), caller.Account, "key-0")
				want := fmt.Sprintf("the booking's 64 GPUs cannot hold 64 more: 64 are held by live runs: "+
					"%s (64 GPUs, live until 2026-11-30T19:00:00Z)", first.RunID)
				if out.Message != want || out.Violations[0].Message != want || out.Violations[0].Gate != "booking" {
					t.Errorf("message %q, violation %+v; want %q", out.Message, out.Violations[0], want)
				}
				if got := input(policyInput(t, e), "ledger", "booking", "held_gpus"); got != 64 {
					t.Errorf("input.ledger.booking.held_gpus = %v, want 64", got)
				}
			}},
		{name: "commit/checkpoint quota exceeded", setup: func(t *testing.T, e *env) admission.Request {
			// a permissive bundle: each run keeps 600 GiB of a 1000 GiB quota
			permissive := func() *fakeDecider {
				return &fakeDecider{decision: policy.Decision{Allow: true, Estimates: map[string]any{
					"checkpoint_needed_gib": int64(600), "checkpoint_quota_gib": int64(1000)}}}
			}
			e.decider = permissive()
			ref := e.confirm(t, "cnf-0", create, "", costOK)
			if o := e.svc.Admit(context.Background(), caller, e.createReq("key-0", ref, e.entitlement("ent-0", nil))); o.HTTPStatus() != 200 {
				t.Fatalf("first run: %d %s %s", o.HTTPStatus(), o.Code, o.Message)
			}
			e.decider = permissive()
			ref = e.confirm(t, "cnf-1", create, "", costOK)
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeCheckpointCapacityExceeded, violations: []api.Code{api.CodeCheckpointCapacityExceeded},
			decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, _ admission.Request, out admission.Outcome) {
				want := "the booking's checkpoint quota of 1000 GiB cannot hold 600 GiB more: its live runs keep 600 GiB"
				if out.Message != want || out.Violations[0].Gate != "checkpoint" {
					t.Errorf("message %q, violation %+v; want %q", out.Message, out.Violations[0], want)
				}
				if got := input(policyInput(t, e), "ledger", "booking", "held_checkpoint_gib"); fmt.Sprint(got) != "600" {
					t.Errorf("input.ledger.booking.held_checkpoint_gib = %v, want 600", got)
				}
				if _, err := e.store.Admission(context.Background(), caller.Account, "key-1"); !errors.Is(err, ledger.ErrNotFound) {
					t.Errorf("the refused admission was written: %v", err)
				}
			}},
		// The run's compute: 64 GPUs × 6 h × 2.49 = 956.16, plus the 0.85
		// GPU-hours the training facts expect it to lose to failures (64 ×
		// 6 h × lost_fraction 0.0022124, rounded up to the hundredth) × 2.49
		// = 2.1165 → 2.12: 958.28, whatever the (permissive) bundle said.
		{name: "commit/cost below estimate", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", "958.27")
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationCostBelowEstimate,
			violations: []api.Code{api.CodeConfirmationCostBelowEstimate}, decision: "deny", state: "denied"},
		{name: "commit/cost covering the booked compute but not the expected lost work", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", "956.16")
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeConfirmationCostBelowEstimate,
			violations: []api.Code{api.CodeConfirmationCostBelowEstimate}, decision: "deny", state: "denied"},
		{name: "commit/cost exactly the estimate", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", "958.28")
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 200, decision: "allow", state: "admitted", effect: committed},
		// Signed telemetry moves the lost work the commit prices: 0.001
		// interruptions per GPU-hour lose 43.06 GPU-hours, 107.22 USD.
		{name: "commit/cost below the estimate with the booking's telemetry", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", "1063.37")
			return e.createReq("key-1", ref, e.entitlement("ent-1", withTelemetry(0.001)))
		}, status: 403, code: api.CodeConfirmationCostBelowEstimate,
			violations: []api.Code{api.CodeConfirmationCostBelowEstimate}, decision: "deny", state: "denied"},
		{name: "commit/cost exactly the estimate with the booking's telemetry", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", "1063.38")
			return e.createReq("key-1", ref, e.entitlement("ent-1", withTelemetry(0.001)))
		}, status: 200, decision: "allow", state: "admitted", effect: committed, cost: 1_063_380_000},
		{name: "commit/no training facts, so no lost work", setup: func(t *testing.T, e *env) admission.Request {
			// a permissive decider without a facts model: the commit cannot
			// price the expected lost work and refuses
			e.decider = noFacts{allow()}
			ref := e.confirm(t, "cnf-1", create, "", costOK)
			return e.createReq("key-1", ref, e.entitlement("ent-1", nil))
		}, status: 403, code: api.CodeBookingFactsInvalid, violations: []api.Code{api.CodeBookingFactsInvalid},
			decision: "deny", state: "denied"},
		{name: "commit/bundle estimate above the confirmed cost", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e) // confirms 2000.00
			e.decider = &fakeDecider{decision: policy.Decision{Allow: true,
				Estimates: map[string]any{"total_cost_micro_usd": int64(2_000_000_001)}}}
			return req
		}, status: 403, code: api.CodeConfirmationCostBelowEstimate,
			violations: []api.Code{api.CodeConfirmationCostBelowEstimate}, decision: "deny", state: "denied"},
		{name: "commit/run past the booking term", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", costOK)
			return e.createReq("key-1", ref, e.entitlement("ent-1", func(m map[string]any) {
				m["term"].(map[string]any)["end"] = now.Add(5 * time.Hour).Unix() // the run needs 6
			}))
		}, status: 403, code: api.CodeRunPastTerm, violations: []api.Code{api.CodeRunPastTerm},
			decision: "deny", state: "denied"},
		{name: "commit/booking facts invalid", setup: func(t *testing.T, e *env) admission.Request {
			ref := e.confirm(t, "cnf-1", create, "", costOK)
			return e.createReq("key-1", ref, e.entitlement("ent-1", func(m map[string]any) { delete(m, "gpu") }))
		}, status: 403, code: api.CodeBookingFactsInvalid, violations: []api.Code{api.CodeBookingFactsInvalid},
			decision: "deny", state: "denied"},
		{name: "commit/booking released", setup: func(t *testing.T, e *env) admission.Request {
			e.mustAdmit(t, caller, onRun(release)(t, e))
			ref := e.confirm(t, "cnf-2", create, "", costOK)
			return e.createReq("key-2", ref, e.entitlement("ent-2", nil))
		}, status: 403, code: api.CodeBookingReleased, violations: []api.Code{api.CodeBookingReleased},
			decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				if got := input(policyInput(t, e), "ledger", "booking", "released"); got != true {
					t.Errorf("input.ledger.booking.released = %v, want true", got)
				}
			}},
		{name: "commit/restart of a cancelled run", setup: func(t *testing.T, e *env) admission.Request {
			runID := e.admitRun(t)
			ref := e.confirm(t, "cnf-0", cancel, runID, "0")
			e.mustAdmit(t, caller, e.runReq(cancel, "key-0", ref, e.entitlement("ent-0", nil), runID))
			ref = e.confirm(t, "cnf-1", restart, runID, "0")
			return e.runReq(restart, "key-1", ref, e.entitlement("ent-1", nil), runID)
		}, status: 403, code: api.CodeRunNotLive, violations: []api.Code{api.CodeRunNotLive},
			decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				if got := input(policyInput(t, e), "ledger", "run", "state"); got != "cancelled" {
					t.Errorf("input.ledger.run.state = %v, want cancelled", got)
				}
			}},
		{name: "commit/advance raced by another advance", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(advance)(t, e)
			ref := e.confirm(t, "cnf-2", advance, req.RunID, "0")
			other := e.runReq(advance, "key-2", ref, e.entitlement("ent-2", nil), req.RunID)
			other.Stage = "finetune"
			d := allow()
			d.during = func() { e.mustAdmit(t, caller, other) }
			e.decider = d
			return req
		}, status: 409, code: api.CodeStageConflict, violations: []api.Code{api.CodeStageConflict},
			effect: raced, decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, req admission.Request, _ admission.Outcome) {
				rec, _ := e.store.RunRecord(context.Background(), req.RunID)
				if rec.Stage != "finetune" {
					t.Errorf("run stage %q, want the winner's finetune", rec.Stage)
				}
				assertLost(t, e, req)
			}},
		{name: "commit/confirmation consumed by a racing admission", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			other := e.createReq("key-2", req.ConfirmationRef, e.entitlement("ent-2", nil))
			d := allow()
			d.during = func() { e.mustAdmit(t, caller, other) }
			e.decider = d
			return req
		}, status: 403, code: api.CodeConfirmationReplayed, violations: []api.Code{api.CodeConfirmationReplayed},
			effect: raced, decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, req admission.Request, _ admission.Outcome) {
				c, _ := e.store.Confirmation(context.Background(), req.ConfirmationRef)
				if c.State != ledger.ConfirmationConsumed || c.ConsumedBy != "key-2" {
					t.Errorf("confirmation %s by %q, want consumed by the winner key-2", c.State, c.ConsumedBy)
				}
				if _, err := e.store.Admission(context.Background(), caller.Account, req.IdempotencyKey); !errors.Is(err, ledger.ErrNotFound) {
					t.Errorf("admission under the loser's key: %v", err)
				}
			}},
		{name: "commit/the same request raced and won", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			d := allow()
			d.during = func() { e.mustAdmit(t, caller, req) }
			e.decider = d
			return req
		}, status: 200, effect: raced, decision: "allow", state: "admitted", check: racedAndWon},
		{name: "policy/only CONFIRMATION_REPLAYED by the same request's own allow", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			d := deny(api.CodeConfirmationReplayed)
			d.during = func() { e.mustAdmit(t, caller, req) }
			e.decider = d
			return req
		}, status: 200, effect: raced, decision: "allow", state: "admitted", check: racedAndWon},
		// Revocation reaches the run: every action but a teardown on a run
		// of a revoked booking or entitlement is refused, before the policy
		// and again at commit; teardown stays admissible.
		{name: "revoked/booking refuses train.restart of its run", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(restart)(t, e)
			e.revoke(t, ledger.RevokeBooking, scenario.Booking)
			return req
		}, status: 403, code: api.CodeEntitlementRevoked, violations: []api.Code{api.CodeEntitlementRevoked},
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				decidedNot(t, e, req, out)
				if rec, _ := e.store.RunRecord(context.Background(), req.RunID); rec.State(now) != api.RunRevoked {
					t.Errorf("run state %q, want revoked", rec.State(now))
				}
			}},
		{name: "revoked/the run's entitlement refuses train.stage.advance", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(advance)(t, e) // carries ent-1; the run was admitted under ent-run
			e.revoke(t, ledger.RevokeEntitlement, "ent-run")
			return req
		}, status: 403, code: api.CodeEntitlementRevoked, violations: []api.Code{api.CodeEntitlementRevoked},
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				decidedNot(t, e, req, out)
				if want := "the entitlement was revoked by its issuer at 2026-11-30T11:59:00Z"; out.Message != want {
					t.Errorf("message %q, want %q", out.Message, want)
				}
			}},
		{name: "revoked/the request's own entitlement refuses train.restart", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(restart)(t, e)
			e.revoke(t, ledger.RevokeEntitlement, "ent-1")
			return req
		}, status: 403, code: api.CodeEntitlementRevoked, violations: []api.Code{api.CodeEntitlementRevoked}, check: decidedNot},
		{name: "revoked/booking still admits train.cleanup of its run", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(cleanup)(t, e)
			e.revoke(t, ledger.RevokeBooking, scenario.Booking)
			return req
		}, status: 200, decision: "allow", state: "cleanup_admitted", effect: committed},
		{name: "revoked/booking between policy and commit refuses train.restart", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(restart)(t, e)
			d := allow()
			d.during = func() { e.revoke(t, ledger.RevokeBooking, scenario.Booking) }
			e.decider = d
			return req
		}, status: 403, code: api.CodeEntitlementRevoked, violations: []api.Code{api.CodeEntitlementRevoked},
			effect: raced, decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, req admission.Request, _ admission.Outcome) {
				assertLost(t, e, req)
				if rec, _ := e.store.RunRecord(context.Background(), req.RunID); rec.State(now) != api.RunRevoked || rec.Restarts != 0 {
					t.Errorf("run %+v, want revoked with no restart", rec)
				}
			}},

		// A failed gate halts the run: the deny records the halt and
		// consumes nothing; a halted run gets no advance and no restart.
		{name: "halted/an eval report failing the gate halts the run", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(advance)(t, e)
			req.EvalReports = []string{failingReport(e, req.RunID, "pretrain")}
			e.decider = haltingDeny("mmlu_5shot")
			return req
		}, status: 403, code: "EVAL_FAILED", violations: []api.Code{"EVAL_FAILED"}, decision: "deny", state: "denied",
			effect: halted,
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				rec, _ := e.store.RunRecord(context.Background(), req.RunID)
				sum := sha256.Sum256([]byte(req.EvalReports[0]))
				if h := rec.Halt; h.Stage != "pretrain" || !reflect.DeepEqual(h.FailedEvals, []string{"mmlu_5shot"}) ||
					h.ReportDigest != "sha256:"+hex.EncodeToString(sum[:]) || h.By != "evals:evals-key-1" || !h.At.Equal(now) {
					t.Errorf("halt %+v", h)
				}
				if want := "the run is halted: the eval gate of stage pretrain failed (mmlu_5shot); only train.cancel and train.cleanup are admitted"; out.Notice != want {
					t.Errorf("notice %q, want %q", out.Notice, want)
				}
			}},
		{name: "halted/a failing report for another stage halts nothing", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(advance)(t, e)
			req.EvalReports = []string{failingReport(e, req.RunID, "midtrain")}
			e.decider = haltingDeny("mmlu_5shot")
			return req
		}, status: 403, code: "EVAL_FAILED", violations: []api.Code{"EVAL_FAILED"}, decision: "deny", state: "denied",
			check: func(t *testing.T, _ *env, _ admission.Request, out admission.Outcome) {
				if out.Notice != "" {
					t.Errorf("notice %q on a deny that halted nothing", out.Notice)
				}
			}},
		{name: "halted/a failing report for another run halts nothing", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(advance)(t, e)
			req.EvalReports = []string{failingReport(e, "run_other", "pretrain")}
			e.decider = haltingDeny("mmlu_5shot")
			return req
		}, status: 403, code: "EVAL_FAILED", violations: []api.Code{"EVAL_FAILED"}, decision: "deny", state: "denied"},
		{name: "halted/the policy denies train.restart of a halted run", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(restart)(t, e)
			e.haltRun(t, req.RunID)
			e.decider = deny(api.CodeRunHalted)
			return req
		}, status: 403, code: api.CodeRunHalted, violations: []api.Code{api.CodeRunHalted}, decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				run := input(policyInput(t, e), "ledger", "run")
				want := map[string]any{"state": "halted", "stage": "pretrain", "manifest_digest": e.digest,
					"restarts": 0, "gpus": 64, "checkpoint": fixturePlan,
					"halt": map[string]any{"stage": "pretrain", "failed_evals": []any{"mmlu_5shot"},
						"report_digest": "sha256:" + strings.Repeat("e", 64), "decision_id": "dec_halting"}}
				if !reflect.DeepEqual(run, want) {
					t.Errorf("input.ledger.run = %v, want %v", run, want)
				}
			}},
		{name: "allow/train.stage.advance into a larger stage grows the run", setup: func(t *testing.T, e *env) admission.Request {
			e.withStageNodes(t, "midtrain", 16)
			return onRun(advance)(t, e)
		}, status: 200, decision: "allow", state: "stage_advanced", effect: committed,
			check: func(t *testing.T, e *env, req admission.Request, _ admission.Outcome) {
				if got := input(policyInput(t, e), "ledger", "run", "gpus"); got != 64 {
					t.Errorf("input.ledger.run.gpus = %v, want the 64 the run held", got)
				}
				if got := input(policyInput(t, e), "ledger", "booking", "held_gpus"); got != 64 {
					t.Errorf("input.ledger.booking.held_gpus = %v, want 64", got)
				}
				if r, err := e.store.RunRecord(context.Background(), req.RunID); err != nil || r.GPUs != 128 {
					t.Errorf("run %+v, %v; want 128 GPUs", r, err)
				}
			}},
		{name: "commit/permissive policy: the ledger refuses a stage grow past the booking", setup: func(t *testing.T, e *env) admission.Request {
			e.withStageNodes(t, "midtrain", 16)
			ref := e.confirm(t, "cnf-run", create, "", costOK)
			runID := e.mustAdmit(t, caller, e.createReq("key-run", ref, e.exactEntitlement("ent-run"))).Data.RunID
			ref = e.confirm(t, "cnf-1", advance, runID, "0")
			return e.runReq(advance, "key-1", ref, e.exactEntitlement("ent-1"), runID)
		}, status: 403, code: api.CodeStageWorldSizeExceedsRun, violations: []api.Code{api.CodeStageWorldSizeExceedsRun},
			decision: "deny", state: "denied", effect: unchanged,
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				want := `stage "midtrain" needs 128 GPUs; the run holds 64 and the booking has 0 free ` +
					"(64 booked, 64 held by live runs) when the advance committed; nothing was written"
				if out.Message != want || out.Violations[0].Message != want || out.Violations[0].Gate != "booking" {
					t.Errorf("message %q, violation %+v; want %q", out.Message, out.Violations[0], want)
				}
				if r, err := e.store.RunRecord(context.Background(), req.RunID); err != nil || r.GPUs != 64 || r.Stage != "pretrain" {
					t.Errorf("run %+v, %v; want 64 GPUs in pretrain", r, err)
				}
			}},
		{name: "halted/permissive policy: the ledger refuses train.restart of a halted run", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(restart)(t, e)
			e.haltRun(t, req.RunID)
			return req
		}, status: 403, code: api.CodeRunHalted, violations: []api.Code{api.CodeRunHalted}, decision: "deny", state: "denied",
			check: func(t *testing.T, _ *env, _ admission.Request, out admission.Outcome) {
				if want := "the run is halted: the eval gate of stage pretrain failed (mmlu_5shot); only train.cancel and train.cleanup are admitted"; out.Message != want {
					t.Errorf("message %q, want %q", out.Message, want)
				}
			}},
		{name: "halted/permissive policy: the ledger refuses train.stage.advance of a halted run", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(advance)(t, e)
			e.haltRun(t, req.RunID)
			return req
		}, status: 403, code: api.CodeRunHalted, violations: []api.Code{api.CodeRunHalted}, decision: "deny", state: "denied"},
		{name: "halted/train.cancel of a halted run is admitted", setup: func(t *testing.T, e *env) admission.Request {
			req := onRun(cancel)(t, e)
			e.haltRun(t, req.RunID)
			return req
		}, status: 200, decision: "allow", state: "cancel_admitted", effect: committed},

		// Restarts within the run's checkpoint plan and its budget.
		{name: "restart/permissive policy: the ledger refuses a step off the checkpoint plan", setup: with(onRun(restart), func(_ *env, r *admission.Request) {
			r.CheckpointStep = new(int64(499))
		}), status: 403, code: api.CodeRestartStepOffPlan, violations: []api.Code{api.CodeRestartStepOffPlan},
			decision: "deny", state: "denied",
			check: func(t *testing.T, _ *env, _ admission.Request, out admission.Outcome) {
				if want := "step 499 is no checkpoint of this run: it writes one every 500 steps up to step 1000"; out.Message != want {
					t.Errorf("message %q, want %q", out.Message, want)
				}
			}},
		{name: "restart/the decision's budget holds at commit", setup: func(t *testing.T, e *env) admission.Request {
			runID := e.admitRun(t)
			for i, step := range []int64{500, 1000} {
				ref := e.confirm(t, fmt.Sprintf("cnf-r%d", i), restart, runID, "0")
				r := e.runReq(restart, fmt.Sprintf("key-r%d", i), ref, e.entitlement(fmt.Sprintf("ent-r%d", i), nil), runID)
				r.CheckpointStep = new(step)
				e.mustAdmit(t, caller, r)
			}
			ref := e.confirm(t, "cnf-1", restart, runID, "0")
			req := e.runReq(restart, "key-1", ref, e.entitlement("ent-1", nil), runID)
			req.CheckpointStep = new(int64(500))
			e.decider = &fakeDecider{decision: policy.Decision{Allow: true, Estimates: map[string]any{"restart_budget": int64(2)}}}
			return req
		}, status: 403, code: api.CodeRestartBudgetExceeded, violations: []api.Code{api.CodeRestartBudgetExceeded},
			decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				if want := "restart 3 of this run is past its budget of 2 restarts"; out.Message != want {
					t.Errorf("message %q, want %q", out.Message, want)
				}
				rec, _ := e.store.RunRecord(context.Background(), req.RunID)
				if rec.Restarts != 2 || rec.LastCheckpointStep != 1000 {
					t.Errorf("run %+v, want 2 restarts, the last from 1000", rec)
				}
			}},

		// A booking belongs to one account.
		{name: "booking/train.create on a booking bound to another account", setup: func(t *testing.T, e *env) admission.Request {
			e.admitRunAs(t, otherAccount, scenario.Booking)
			return validCreate(t, e)
		}, status: 403, code: api.CodeBookingAccountMismatch, check: decidedNot},
		{name: "booking/booking.release of a booking bound to another account", setup: func(t *testing.T, e *env) admission.Request {
			run := e.admitRunAs(t, otherAccount, scenario.Booking)
			ref := e.confirm(t, "cnf-1", release, "", "0")
			req := e.runReq(release, "key-1", ref, e.entitlement("ent-1", nil), "")
			e.otherRun = run
			return req
		}, status: 403, code: api.CodeBookingAccountMismatch,
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				decidedNot(t, e, req, out)
				if rec, _ := e.store.RunRecord(context.Background(), e.otherRun); rec.State(now) != api.RunLive {
					t.Errorf("the other account's run is %q after the refused release", rec.State(now))
				}
			}},
		{name: "booking/bound to another account between policy and commit", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			d := allow()
			d.during = func() { e.admitRunAs(t, otherAccount, scenario.Booking) }
			e.decider = d
			return req
		}, status: 403, code: api.CodeBookingAccountMismatch, violations: []api.Code{api.CodeBookingAccountMismatch},
			effect: raced, decision: "deny", state: "denied",
			check: func(t *testing.T, e *env, req admission.Request, _ admission.Outcome) { assertLost(t, e, req) }},

		// Audit is part of the decision (docs/security.md): in production
		// an allow is committed only after its write-ahead line is written
		// and synced.
		{name: "audit/full disk refuses the allow, nothing committed", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.withDecisionLog(t, &disk{full: true}, true)
			return req
		}, status: 503, code: api.CodeDecisionLogUnavailable, decision: "deny", state: "denied", effect: unchanged,
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				policyInput(t, e) // the policy ran and allowed
				if e.dlog.Fault() == nil {
					t.Error("the log is not failing")
				}
				e.dlog.Close()
				if got := e.disk.lines(t); len(got) != 0 || e.disk.drops["write"] != 1 {
					t.Errorf("log %+v, drops %v; want nothing written, the deny's line dropped", got, e.disk.drops)
				}
			}},
		{name: "audit/the write-ahead line is durable before the commit", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			d := &disk{}
			d.onWrite = func(p []byte) {
				if !bytes.Contains(p, []byte(`"phase":"intent"`)) {
					return
				}
				// Called by the log's writer while the admission waits.
				if _, err := e.store.Admission(context.Background(), caller.Account, req.IdempotencyKey); !errors.Is(err, ledger.ErrNotFound) {
					t.Errorf("admission stored before its write-ahead line: %v", err)
				}
			}
			e.withDecisionLog(t, d, true)
			return req
		}, status: 200, decision: "allow", state: "admitted", effect: committed,
			check: func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
				e.dlog.Close()
				lines := e.disk.lines(t)
				if len(lines) != 2 {
					t.Fatalf("log lines %+v, want the write-ahead and the outcome", lines)
				}
				ahead, outcome := lines[0], lines[1]
				if ahead.Phase != decisionlog.PhaseIntent || ahead.Result != "allow" || ahead.DecisionID != out.Data.DecisionID ||
					ahead.RunID != out.Data.RunID || ahead.IdempotencyKey != req.IdempotencyKey || ahead.BundleRevision != bundleRev ||
					ahead.JTIs["confirmation"] != "cnf-1" || ahead.Input != nil {
					t.Errorf("write-ahead line %+v", ahead)
				}
				if outcome.Phase != "" || outcome.Result != "allow" || outcome.DecisionID != out.Data.DecisionID || outcome.Input == nil {
					t.Errorf("outcome line %+v", outcome)
				}
			}},
		{name: "audit/space returns: the same request is admitted", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			d := &disk{full: true}
			l := e.withDecisionLog(t, d, true)
			if o := e.svc.Admit(context.Background(), caller, req); o.Code != api.CodeDecisionLogUnavailable {
				t.Fatalf("on a full disk: %d %s", o.HTTPStatus(), o.Code)
			}
			// The deny's own line, queued behind, is lost too (the probe
			// is answered after it).
			if err := l.Probe(context.Background()); err == nil {
				t.Fatal("probe of a full disk succeeded")
			}
			d.setFull(false)
			return req
		}, status: 200, decision: "allow", state: "admitted", effect: committed,
			check: func(t *testing.T, e *env, _ admission.Request, out admission.Outcome) {
				if e.dlog.Fault() != nil {
					t.Errorf("still failing: %v", e.dlog.Fault())
				}
				e.dlog.Close()
				lines := e.disk.lines(t)
				var phases []string
				for _, l := range lines {
					phases = append(phases, l.Phase+":"+l.Result)
				}
				if got := strings.Join(phases, ","); got != "gap:,intent:allow,:allow" || lines[0].GapLost != 1 {
					t.Errorf("log %s (gap lost %d), want the gap (1 lost), then the allow", got, lines[0].GapLost)
				}
			}},
		{name: "audit/a policy deny on a full disk keeps its own code", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.decider = deny("BUDGET_CEILING_EXCEEDED")
			e.withDecisionLog(t, &disk{full: true}, true)
			return req
		}, status: 403, code: "BUDGET_CEILING_EXCEEDED", violations: []api.Code{"BUDGET_CEILING_EXCEEDED"},
			decision: "deny", state: "denied", effect: unchanged},
		{name: "audit/development: a best-effort log does not hold the allow", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			e.withDecisionLog(t, &disk{full: true}, false)
			return req
		}, status: 200, decision: "allow", state: "admitted", effect: committed,
			check: func(t *testing.T, e *env, _ admission.Request, _ admission.Outcome) {
				e.dlog.Close()
				if e.disk.drops["write"] != 1 {
					t.Errorf("drops %v, want the outcome line dropped as write", e.disk.drops)
				}
			}},
		{name: "commit/entitlement revoked between policy and commit", setup: func(t *testing.T, e *env) admission.Request {
			req := validCreate(t, e)
			d := allow()
			d.during = func() { e.revoke(t, ledger.RevokeEntitlement, "ent-1") }
			e.decider = d
			return req
		}, status: 403, code: api.CodeEntitlementRevoked, violations: []api.Code{api.CodeEntitlementRevoked},
			decision: "deny", state: "denied"},
	}
}

// fixturePlan is input.ledger.run.checkpoint of a run of the fixture
// manifest admitted with the fake decider (no lost-work estimate).
var fixturePlan = map[string]any{"interval_steps": int64(500), "steps": int64(1000), "wall_clock_seconds": int64(21600),
	"lost_seconds_per_restart": int64(0)}

// otherAccount is another account (its own runs, bookings, keys).
var otherAccount = admission.Caller{Subject: "svc-other", Account: "acct_other", KeyID: "caller-key-2"}

// failingReport is an eval report for runID's stage (bound to the
// fixture manifest and the pretrain battery) whose mmlu_5shot fails.
func failingReport(e *env, runID, stage string) string {
	return e.evalToken("report-"+stage, map[string]any{
		"kind": "eval_report", "run_id": runID, "stage": stage, "manifest_digest": e.digest,
		"battery_id": "ito-battery-pretrain-2026.10",
		"results":    map[string]any{"mmlu_5shot": 0.11, "hellaswag_acc": 0.42},
	})
}

// haltingDeny is the policy's deny of an advance whose report fails the
// gate: EVAL_FAILED and the halt naming the failed evals.
func haltingDeny(failed ...string) *fakeDecider {
	d := deny("EVAL_FAILED")
	d.decision.Halt = &policy.Halt{FailedEvals: failed}
	return d
}

// replayOf checks a replay of the allow stored under key: the stored
// decision, nothing evaluated.
func replayOf(key string) func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
	return func(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
		t.Helper()
		decidedNot(t, e, req, out)
		a, err := e.store.Admission(context.Background(), caller.Account, key)
		if err != nil {
			t.Fatal(err)
		}
		assertReplay(t, a, out)
		if !strings.HasPrefix(out.Notice, "idempotent replay") {
			t.Errorf("notice %q", out.Notice)
		}
	}
}

// racedAndWon: the racing copy of this very request committed first; this
// one answers its allow and wrote nothing more.
func racedAndWon(t *testing.T, e *env, req admission.Request, out admission.Outcome) {
	t.Helper()
	a, err := e.store.Admission(context.Background(), caller.Account, req.IdempotencyKey)
	if err != nil {
		t.Fatal(err)
	}
	assertReplay(t, a, out)
	if !strings.HasPrefix(out.Notice, "idempotent replay") {
		t.Errorf("notice %q", out.Notice)
	}
	c, _ := e.store.Confirmation(context.Background(), req.ConfirmationRef)
	if c.State != ledger.ConfirmationConsumed || c.ConsumedBy != req.IdempotencyKey {
		t.Errorf("confirmation %s by %q", c.State, c.ConsumedBy)
	}
	u, _ := e.store.BookingUsage(context.Background(), scenario.Booking, now)
	if len(u.Runs) != 1 || u.Runs[0].RunID != a.RunID {
		t.Errorf("live runs %+v, want only the winner's %s", u.Runs, a.RunID)
	}
}

// assertLost: the loser of a race wrote nothing: its confirmation is still
// available, nothing is stored under its key.
func assertLost(t *testing.T, e *env, req admission.Request) {
	t.Helper()
	c, _ := e.store.Confirmation(context.Background(), req.ConfirmationRef)
	if c.State != ledger.ConfirmationAvailable {
		t.Errorf("the loser's confirmation is %s by %q", c.State, c.ConsumedBy)
	}
	if _, err := e.store.Admission(context.Background(), caller.Account, req.IdempotencyKey); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("admission under the loser's key: %v", err)
	}
}

func assertReplay(t *testing.T, a ledger.Admission, out admission.Outcome) {
	t.Helper()
	d := out.Data
	if d.DecisionID != a.DecisionID || d.RunID != a.RunID || d.State != a.State || d.Ticket != a.Ticket ||
		d.GPUs != a.GPUs || d.LiveUntil != unixOrZero(a.LiveUntil) || d.BundleRevision != a.BundleRevision {
		t.Errorf("replayed data %+v, stored %+v", d, a)
	}
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func TestAdmit(t *testing.T) {
	for _, tc := range admitCases() {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			req := tc.setup(t, e)
			before := e.snap(t, caller, req)
			out := e.svc.Admit(context.Background(), caller, req)
			if out.HTTPStatus() != tc.status || out.Code != tc.code {
				t.Fatalf("got %d %q (%s), want %d %q", out.HTTPStatus(), out.Code, out.Message, tc.status, tc.code)
			}
			if got := violationCodes(out.Violations); !sameStrings(got, tc.violations) {
				t.Errorf("violations %v, want %v", got, tc.violations)
			}
			switch {
			case tc.decision == "" && out.Data != nil:
				t.Errorf("data %+v, want none", out.Data)
			case tc.decision != "" && out.Data == nil:
				t.Errorf("no data, want decision %q", tc.decision)
			case tc.decision != "":
				d := out.Data
				if d.Decision != tc.decision || d.State != tc.state || d.Action != req.Action ||
					d.BookingID != req.BookingID || d.IdempotencyKey != req.IdempotencyKey || d.BundleRevision != bundleRev ||
					!strings.HasPrefix(d.DecisionID, "dec_") {
					t.Errorf("data %+v, want decision %q state %q", d, tc.decision, tc.state)
				}
			}
			if (out.HTTPStatus() == 200) != out.OK() {
				t.Errorf("status %d with OK() %v", out.HTTPStatus(), out.OK())
			}
			after := e.snap(t, caller, req)
			switch tc.effect {
			case unchanged:
				if !reflect.DeepEqual(before, after) {
					t.Errorf("the ledger changed:\nbefore %+v\nafter  %+v", before, after)
				}
			case committed:
				cost := tc.cost
				if cost == 0 {
					cost = 958_280_000
				}
				assertCommitted(t, e, req, out, before, after, cost)
			case halted:
				if after.conf.State != ledger.ConfirmationAvailable || after.admFound || !reflect.DeepEqual(before.usage, after.usage) {
					t.Errorf("a halting deny consumed or stored: %+v", after)
				}
				if after.run.State(now) != api.RunHalted || after.run.Halt.DecisionID != out.Data.DecisionID {
					t.Errorf("run after a halting deny: %+v", after.run)
				}
			}
			if tc.check != nil {
				tc.check(t, e, req, out)
			}
		})
	}
}

// assertCommitted checks a fresh allow: the confirmation consumed by the
// key at now, the admission stored, and the action's effect on the ledger.
func assertCommitted(t *testing.T, e *env, req admission.Request, out admission.Outcome, before, after snapshot, cost int64) {
	t.Helper()
	if out.Notice != "" {
		t.Errorf("notice %q on a fresh allow", out.Notice)
	}
	if before.conf.State != ledger.ConfirmationAvailable {
		t.Errorf("confirmation before: %s", before.conf.State)
	}
	if c := after.conf; c.State != ledger.ConfirmationConsumed || c.ConsumedBy != req.IdempotencyKey || !c.ConsumedAt.Equal(now) {
		t.Errorf("confirmation after: %s by %q at %v", c.State, c.ConsumedBy, c.ConsumedAt)
	}
	var digest string
	if req.Action == api.TrainCreate || req.Action == api.TrainStageAdvance {
		digest = e.digest
	}
	a := after.adm
	switch {
	case before.admFound || !after.admFound:
		t.Fatalf("admission under the key: before %v, after %v", before.admFound, after.admFound)
	case a.DecisionID != out.Data.DecisionID || a.State != out.Data.State || a.Action != req.Action ||
		a.RunID != out.Data.RunID || !a.CreatedAt.Equal(now) || a.ManifestDigest != digest ||
		a.RequestDigest != admission.RequestDigest(caller, req, digest) || a.BundleRevision != bundleRev ||
		a.EntitlementJTI != "ent-1" || a.ConfirmationJTI != "cnf-1" || a.CallerKeyID != caller.KeyID:
		t.Errorf("stored admission %+v for outcome %+v", a, out.Data)
	}
	ctx := context.Background()
	switch req.Action {
	case api.TrainCreate:
		liveUntil := now.Add(6*time.Hour + time.Hour) // max_wall_clock_hours + the default grace
		if !ledger.IsRunID(out.Data.RunID) || out.Data.GPUs != 64 || out.Data.LiveUntil != liveUntil.Unix() {
			t.Errorf("data run %q GPUs %d live until %d", out.Data.RunID, out.Data.GPUs, out.Data.LiveUntil)
		}
		rec, err := e.store.RunRecord(ctx, out.Data.RunID)
		if err != nil {
			t.Fatal(err)
		}
		want := ledger.RunRecord{RunID: out.Data.RunID, Account: caller.Account, BookingID: scenario.Booking,
			ManifestDigest: e.digest, GPUs: 64, BookedGPUs: rec.BookedGPUs, AdmittedAt: now, LiveUntil: liveUntil,
			Stage: "pretrain", EntitlementJTI: "ent-1",
			// the fixture checkpoints every 500 of 1000 steps in 6 h; the
			// fake decider gives no lost-work estimate
			Plan: ledger.RunPlan{IntervalSteps: 500, Steps: 1000, WallClockSeconds: 6 * 3600}}
		if !rec.Equal(want) || rec.BookedGPUs < 64 {
			t.Errorf("run record %+v, want %+v", rec, want)
		}
		// the booked compute (956.16) and the expected lost work
		if a.CostMicroUSD != cost || a.GPUs != 64 {
			t.Errorf("stored cost %d µUSD, %d GPUs; want %d, 64", a.CostMicroUSD, a.GPUs, cost)
		}
	case api.TrainCancel, api.TrainCleanup:
		want := before.run
		if want.EndedAt.IsZero() {
			want.EndedAt, want.EndedBy = now, req.Action
		}
		if !after.runFound || !after.run.Equal(want) {
			t.Errorf("run after %s: %+v, want %+v", req.Action, after.run, want)
		}
	case api.TrainStageAdvance:
		want := before.run
		want.Stage = req.Stage
		// a stage larger than the run grows it (never shrinks it)
		if g, err := booking.WorldSize(trainfacts.StageManifest(e.doc, req.Stage)); err != nil {
			t.Fatal(err)
		} else if g > want.GPUs {
			want.GPUs = g
		}
		if before.run.Stage != "pretrain" || !after.run.Equal(want) {
			t.Errorf("run after advance: %+v, want %+v", after.run, want)
		}
	case api.TrainRestart:
		want := before.run
		want.Restarts, want.LastCheckpointStep = before.run.Restarts+1, req.Step()
		if !after.run.Equal(want) || after.run.State(now) != api.RunLive {
			t.Errorf("run after a restart: %+v -> %+v, want %+v", before.run, after.run, want)
		}
	case api.BookingRelease:
		if !after.usage.Released.Equal(now) || len(after.usage.Runs) != 0 {
			t.Errorf("booking after release: %+v", after.usage)
		}
	}
}

func TestStatus(t *testing.T) {
	e := newEnv(t)
	req := validCreate(t, e)
	admitted := e.mustAdmit(t, caller, req)
	stored, err := e.store.Admission(context.Background(), caller.Account, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		caller admission.Caller
		key    string
		status int
		code   api.Code
	}{
		{"found", caller, "key-1", 200, ""},
		{"not found", caller, "key-2", 404, api.CodeAdmissionNotFound},
		{"another account's key", admission.Caller{Subject: "svc-other", Account: "acct_other"}, "key-1", 404, api.CodeAdmissionNotFound},
		{"bad key", caller, "key 1", 400, api.CodeRequestInvalid},
		{"empty key", caller, "", 400, api.CodeRequestInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := e.svc.Status(context.Background(), tc.caller, tc.key)
			if out.HTTPStatus() != tc.status || out.Code != tc.code {
				t.Fatalf("got %d %q (%s), want %d %q", out.HTTPStatus(), out.Code, out.Message, tc.status, tc.code)
			}
			if tc.code != "" {
				if out.Data != nil || out.Violations != nil {
					t.Errorf("data %+v violations %v on a %s", out.Data, out.Violations, tc.code)
				}
				return
			}
			if out.Notice != "stored admission" {
				t.Errorf("notice %q", out.Notice)
			}
			want := *admitted.Data
			want.Warnings, want.Estimates = nil, nil
			want.RunState = api.RunLive // the run's state now, beside the admission
			if !reflect.DeepEqual(*out.Data, want) {
				t.Errorf("status data %+v, want the admission's %+v", *out.Data, want)
			}
			assertReplay(t, stored, out)
		})
	}
	// Status reads only: the run is still live, nothing else consumed.
	u, _ := e.store.BookingUsage(context.Background(), scenario.Booking, now)
	if len(u.Runs) != 1 {
		t.Errorf("live runs after status lookups: %+v", u.Runs)
	}
}

func TestDeposit(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup registers (and may deposit) tokens; returns the token to
		// deposit.
		setup      func(t *testing.T, e *env) string
		status     int
		code       api.Code
		violations []api.Code
		stored     bool // a confirmation with jti cnf-1 is in the ledger afterwards
		check      func(t *testing.T, e *env, out admission.Outcome)
	}{
		{name: "ok", setup: func(_ *testing.T, e *env) string {
			return e.confirmation("cnf-1", api.TrainCreate, "", costOK, nil)
		}, status: 201, stored: true, check: func(t *testing.T, e *env, out admission.Outcome) {
			d, _ := out.Extra.(api.Deposit)
			ref := d.ConfirmationRef
			if !ledger.IsConfirmationRef(ref) || d.JTI != "cnf-1" || d.Act != api.TrainCreate ||
				d.ExpiresAt != now.Add(10*time.Minute).Unix() {
				t.Errorf("extra %v", out.Extra)
			}
			c, err := e.store.Confirmation(context.Background(), ref)
			if err != nil {
				t.Fatal(err)
			}
			want := ledger.Confirmation{Ref: ref, JTI: "cnf-1", Account: scenario.Account, Action: api.TrainCreate,
				Token: []byte("cnf.cnf-1"), ExpiresAt: now.Add(10 * time.Minute), DepositedAt: now,
				State: ledger.ConfirmationAvailable, BookingID: scenario.Booking, ManifestDigest: e.digest,
				CostMicroUSD: 2_000_000_000}
			if !reflect.DeepEqual(c, want) {
				t.Errorf("stored %+v\nwant   %+v", c, want)
			}
		}},
		{name: "ok with a cost that does not parse: stored as 0", setup: func(_ *testing.T, e *env) string {
			return e.confirmation("cnf-1", api.TrainCancel, "run_01", "lots", nil)
		}, status: 201, stored: true, check: func(t *testing.T, e *env, out admission.Outcome) {
			c, _ := e.store.Confirmation(context.Background(), out.Extra.(api.Deposit).ConfirmationRef)
			if c.CostMicroUSD != 0 || c.RunID != "run_01" || c.ManifestDigest != "" {
				t.Errorf("stored %+v", c)
			}
		}},
		{name: "empty token", setup: func(*testing.T, *env) string { return "" },
			status: 400, code: api.CodeRequestInvalid},
		{name: "invalid token", setup: func(_ *testing.T, e *env) string {
			e.confs.tokens["cnf.bad"] = tokenAnswer{err: verifyErr(verify.PurposeConfirmation, verify.KindSignature)}
			return "cnf.bad"
		}, status: 403, code: api.CodeConfirmationInvalid},
		{name: "unknown token", setup: func(*testing.T, *env) string { return "not-a-token" },
			status: 403, code: api.CodeConfirmationInvalid},
		{name: "expired token", setup: func(_ *testing.T, e *env) string {
			e.confs.tokens["cnf.old"] = tokenAnswer{err: verifyErr(verify.PurposeConfirmation, verify.KindExpired)}
			return "cnf.old"
		}, status: 403, code: api.CodeConfirmationExpired},
		{name: "no jti", setup: func(_ *testing.T, e *env) string {
			return e.confirmation("cnf-1", api.TrainCreate, "", costOK, func(m map[string]any) { m["jti"] = "" })
		}, status: 403, code: api.CodeConfirmationInvalid},
		{name: "sub the ledger cannot hold", setup: func(_ *testing.T, e *env) string {
			return e.confirmation("cnf-1", api.TrainCreate, "", costOK, func(m map[string]any) {
				m["sub"] = strings.Repeat("a", ledger.MaxIDLen+1)
			})
		}, status: 403, code: api.CodeConfirmationInvalid},
		{name: "unknown act", setup: func(_ *testing.T, e *env) string {
			return e.confirmation("cnf-1", "train.delete", "", costOK, nil)
		}, status: 403, code: api.CodeConfirmationInvalid},
		{name: "duplicate jti", setup: func(t *testing.T, e *env) string {
			e.confirm(t, "cnf-1", api.TrainCreate, "", costOK)
			// Another token with the same jti.
			tok := e.confirmation("cnf-1", api.TrainCancel, "run_01", "0", nil)
			e.confs.tokens["cnf.again"] = e.confs.tokens[tok]
			return "cnf.again"
		}, status: 409, code: api.CodeConfirmationDuplicate, stored: true},
		{name: "revoked confirmation", setup: func(t *testing.T, e *env) string {
			e.revoke(t, ledger.RevokeConfirmation, "cnf-1")
			return e.confirmation("cnf-1", api.TrainCreate, "", costOK, nil)
		},
			// Answered like the same token at use (it was 400 before the
			// registry gave each code one status).
			status: 403, code: api.CodeConfirmationRevoked, violations: []api.Code{api.CodeConfirmationRevoked}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			token := tc.setup(t, e)
			out := e.svc.Deposit(context.Background(), token)
			if out.HTTPStatus() != tc.status || out.Code != tc.code {
				t.Fatalf("got %d %q (%s), want %d %q", out.HTTPStatus(), out.Code, out.Message, tc.status, tc.code)
			}
			if got := violationCodes(out.Violations); !sameStrings(got, tc.violations) {
				t.Errorf("violations %v, want %v", got, tc.violations)
			}
			if out.Data != nil {
				t.Errorf("data %+v on a deposit", out.Data)
			}
			if tc.code != "" && out.Extra != nil {
				t.Errorf("extra %v on a refused deposit", out.Extra)
			}
			// A refused deposit stores nothing: the jti is still free
			// (unless the case deposited it before).
			dup := e.store.DepositConfirmation(context.Background(), ledger.Confirmation{
				Ref: ledger.NewConfirmationRef(), JTI: "cnf-1", Account: scenario.Account, Action: api.TrainCreate,
				Token: []byte("probe"), ExpiresAt: now.Add(time.Minute), DepositedAt: now,
			})
			if stored := errors.Is(dup, ledger.ErrConfirmationDuplicate); stored != tc.stored {
				t.Errorf("jti cnf-1 stored: %v (probe: %v), want %v", stored, dup, tc.stored)
			}
			if tc.check != nil {
				tc.check(t, e, out)
			}
		})
	}
}

func TestRevoke(t *testing.T) {
	exp := now.Add(time.Hour).Unix()
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T, e *env) admission.Revocation
		status int
		code   api.Code
		check  func(t *testing.T, e *env, out admission.Outcome)
	}{
		{name: "confirmation by ref", setup: func(t *testing.T, e *env) admission.Revocation {
			ref := e.confirm(t, "cnf-1", api.TrainCreate, "", costOK)
			return admission.Revocation{Kind: ledger.RevokeConfirmation, Ref: ref, Identity: "depositor", By: "desk", Reason: "mistake"}
		}, status: 201, check: func(t *testing.T, e *env, out admission.Outcome) {
			// expires_at defaults to the stored token's exp.
			want := api.Revoked{Kind: "confirmation", Subject: "cnf-1", RevokedBy: "desk",
				RevokedAt: now.Unix(), ExpiresAt: now.Add(10 * time.Minute).Unix(), Created: true}
			if !reflect.DeepEqual(out.Extra, want) || out.Notice != "revoked" {
				t.Errorf("extra %v notice %q, want %v", out.Extra, out.Notice, want)
			}
			r, err := e.store.Revoked(context.Background(), ledger.RevokeConfirmation, "cnf-1")
			if err != nil || r.Reason != "mistake" {
				t.Errorf("stored %+v, %v", r, err)
			}
		}},
		{name: "confirmation by jti, no By: the key id", setup: func(_ *testing.T, _ *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeConfirmation, Subject: "cnf-1", ExpiresAt: exp, Identity: "depositor", KeyID: "desk-key"}
		}, status: 201, check: func(t *testing.T, _ *env, out admission.Outcome) {
			if r, _ := out.Extra.(api.Revoked); r.RevokedBy != "key:desk-key" || r.ExpiresAt != exp {
				t.Errorf("extra %v", out.Extra)
			}
		}},
		{name: "again: the stored one, 200", setup: func(t *testing.T, e *env) admission.Revocation {
			e.revoke(t, ledger.RevokeBooking, scenario.Booking)
			return admission.Revocation{Kind: ledger.RevokeBooking, Subject: scenario.Booking, ExpiresAt: exp, Identity: "revoker", By: "issuer"}
		}, status: 200, check: func(t *testing.T, _ *env, out admission.Outcome) {
			if r, _ := out.Extra.(api.Revoked); r.Created || r.RevokedBy != "test-revoker" ||
				out.Notice != "already revoked: the stored revocation is unchanged" {
				t.Errorf("extra %v notice %q", out.Extra, out.Notice)
			}
		}},
		{name: "entitlement by the revoker", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeEntitlement, Subject: "ent-1", ExpiresAt: exp, Identity: "revoker", By: "issuer"}
		}, status: 201},
		{name: "caller key by the revoker", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeCallerKey, Subject: "caller-key-1", ExpiresAt: exp, Identity: "revoker", By: "issuer"}
		}, status: 201},
		{name: "unknown kind", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: "token", Subject: "x", ExpiresAt: exp, Identity: "revoker"}
		}, status: 400, code: api.CodeRequestInvalid},
		{name: "confirmation by the revoker", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeConfirmation, Subject: "cnf-1", ExpiresAt: exp, Identity: "revoker"}
		}, status: 403, code: api.CodeRevokerUnauthorized},
		{name: "entitlement by the depositor", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeEntitlement, Subject: "ent-1", ExpiresAt: exp, Identity: "depositor"}
		}, status: 403, code: api.CodeRevokerUnauthorized},
		{name: "ref and subject", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeConfirmation, Ref: ledger.NewConfirmationRef(), Subject: "cnf-1",
				ExpiresAt: exp, Identity: "depositor"}
		}, status: 400, code: api.CodeRequestInvalid},
		{name: "bad ref", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeConfirmation, Ref: "cfr_x", Identity: "depositor"}
		}, status: 400, code: api.CodeRequestInvalid},
		{name: "ref not found", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeConfirmation, Ref: ledger.NewConfirmationRef(), Identity: "depositor"}
		}, status: 404, code: api.CodeRevocationRefNotFound},
		{name: "no subject", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeEntitlement, ExpiresAt: exp, Identity: "revoker"}
		}, status: 400, code: api.CodeRequestInvalid},
		{name: "no expires_at", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeEntitlement, Subject: "ent-1", Identity: "revoker"}
		}, status: 400, code: api.CodeRequestInvalid},
		{name: "expires_at not in the future", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeEntitlement, Subject: "ent-1", ExpiresAt: now.Unix(), Identity: "revoker"}
		}, status: 400, code: api.CodeRequestInvalid},
		{name: "expires_at beyond 366 days", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeEntitlement, Subject: "ent-1",
				ExpiresAt: now.Add(admission.MaxRevocationLifetime + time.Second).Unix(), Identity: "revoker"}
		}, status: 400, code: api.CodeRequestInvalid},
		{name: "reason with a control character", setup: func(*testing.T, *env) admission.Revocation {
			return admission.Revocation{Kind: ledger.RevokeEntitlement, Subject: "ent-1", ExpiresAt: exp, Identity: "revoker",
				Reason: "a\x00b"}
		}, status: 400, code: api.CodeRequestInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			rv := tc.setup(t, e)
			var before []ledger.Revocation
			for _, k := range []ledger.RevocationKind{ledger.RevokeConfirmation, ledger.RevokeEntitlement, ledger.RevokeBooking, ledger.RevokeCallerKey} {
				for _, s := range []string{"cnf-1", "ent-1", scenario.Booking, "caller-key-1", "x"} {
					if r, err := e.store.Revoked(context.Background(), k, s); err == nil {
						before = append(before, r)
					}
				}
			}
			out := e.svc.Revoke(context.Background(), rv)
			if out.HTTPStatus() != tc.status || out.Code != tc.code {
				t.Fatalf("got %d %q (%s), want %d %q", out.HTTPStatus(), out.Code, out.Message, tc.status, tc.code)
			}
			if out.Data != nil || out.Violations != nil {
				t.Errorf("data %+v violations %v on a revocation", out.Data, out.Violations)
			}
			if tc.code != "" {
				// A refused revocation stores nothing.
				var after []ledger.Revocation
				for _, k := range []ledger.RevocationKind{ledger.RevokeConfirmation, ledger.RevokeEntitlement, ledger.RevokeBooking, ledger.RevokeCallerKey} {
					for _, s := range []string{"cnf-1", "ent-1", scenario.Booking, "caller-key-1", "x"} {
						if r, err := e.store.Revoked(context.Background(), k, s); err == nil {
							after = append(after, r)
						}
					}
				}
				if !reflect.DeepEqual(before, after) {
					t.Errorf("revocations changed: %+v -> %+v", before, after)
				}
				return
			}
			r, _ := out.Extra.(api.Revoked)
			kind, subject := r.Kind, r.Subject
			if _, err := e.store.Revoked(context.Background(), ledger.RevocationKind(kind), subject); err != nil {
				t.Errorf("revocation %s %s not stored: %v", kind, subject, err)
			}
			if tc.check != nil {
				tc.check(t, e, out)
			}
		})
	}
}

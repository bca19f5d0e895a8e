package webhook_test

import (
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ticket"
)

// stagedRun admits a second run of acct_a on bk_a, in stage pretrain under
// the entitlement ent-b, and returns its id and ticket.
func stagedRun(t *testing.T, f *fixture) (string, string) {
	t.Helper()
	ref := ledger.NewConfirmationRef()
	digest := "sha256:" + strings.Repeat("0", 64)
	if err := f.store.DepositConfirmation(t.Context(), ledger.Confirmation{Ref: ref, JTI: "jti-staged", Account: "acct_a",
		Action: "train.create", Token: []byte("x.y.z"), ExpiresAt: now.Add(time.Hour), DepositedAt: now,
		BookingID: "bk_a", ManifestDigest: digest, CostMicroUSD: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	runID := ledger.NewRunID()
	raw, err := f.keys.Issue(ticket.Claims{Account: "acct_a", ID: "dec_00000000000000000000000000000009", RunID: runID,
		BookingID: "bk_a", Action: "train.create", ManifestDigest: digest, WorldSize: 16, Nodes: 2, GPUsPerNode: 8,
		GPUType: "H100-SXM-80GB", Region: "us-east-1", BundleRevision: "r", IssuedAt: now.Add(-time.Minute),
		Expiry: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.store.Commit(t.Context(), ledger.Admission{Account: "acct_a", IdempotencyKey: "k-staged",
		RequestDigest: "sha256:" + strings.Repeat("3", 64), DecisionID: "dec_00000000000000000000000000000009",
		RunID: runID, Action: "train.create", BookingID: "bk_a", ManifestDigest: digest, ConfirmationRef: ref,
		ConfirmationJTI: "jti-staged", BundleRevision: "r", State: api.StateAdmitted, CreatedAt: now, Ticket: raw,
		CostMicroUSD: 1_000_000, GPUs: 16, BookedGPUs: 64, LiveUntil: now.Add(7 * time.Hour), Stage: "pretrain",
		EntitlementJTI: "ent-b"}); err != nil {
		t.Fatal(err)
	}
	return runID, raw
}

// TestRunStateReachesWorkloads: the webhook asks the run's state through
// RunRecord.MayWork, as the admission and the commit do. Once the run's
// booking or entitlement is revoked, or a failed eval gate halts it, a new
// Pod of its bound Job is refused with the revocation's code
// (ENTITLEMENT_REVOKED) or the halt's (WORKLOAD_RUN_HALTED), WORKLOAD_RUN_NOT_LIVE
// beside it, naming why; a revoked caller key halts no run.
func TestRunStateReachesWorkloads(t *testing.T) {
	revoke := func(kind ledger.RevocationKind, subject string) func(t *testing.T, f *fixture, runID string) {
		return func(t *testing.T, f *fixture, _ string) {
			if _, _, err := f.store.Revoke(t.Context(), ledger.Revocation{Kind: kind, Subject: subject,
				RevokedBy: "revoker", RevokedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, tc := range map[string]struct {
		stop func(t *testing.T, f *fixture, runID string)
		why  string // "" when the Pod is still allowed
		code string
	}{
		"booking revoked":     {revoke(ledger.RevokeBooking, "bk_a"), "revoked: booking bk_a revoked", "ENTITLEMENT_REVOKED"},
		"entitlement revoked": {revoke(ledger.RevokeEntitlement, "ent-b"), "revoked: entitlement ent-b revoked", "ENTITLEMENT_REVOKED"},
		"caller key revoked":  {revoke(ledger.RevokeCallerKey, "caller-key-1"), "", ""},
		"halted": {func(t *testing.T, f *fixture, runID string) {
			if _, halted, err := f.store.HaltRun(t.Context(), ledger.Halt{RunID: runID, Account: "acct_a", BookingID: "bk_a",
				RunHalt: ledger.RunHalt{At: now, DecisionID: "dec_halt", Stage: "pretrain",
					ReportDigest: "sha256:" + strings.Repeat("e", 64), FailedEvals: []string{"mmlu_5shot"}, By: "evals:k"}}); err != nil || !halted {
				t.Fatalf("HaltRun = %v, %v", halted, err)
			}
		}, "halted: the eval gate of stage pretrain failed (mmlu_5shot)", "WORKLOAD_RUN_HALTED"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			runID, tk := stagedRun(t, f)
			wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job", tk, 2, 8), false))
			wantAllowed(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-0", "p0", "uid-job", tk, 8), false))
			tc.stop(t, f, runID)
			r := post(t, f.h, "", "v1", "Pod", pod("team-a", "train-1", "p1", "uid-job", tk, 8), false)
			if tc.why == "" {
				wantAllowed(t, r)
				return
			}
			wantDenied(t, r, tc.code)
			if !strings.Contains(r.Result.Message, tc.why) || !strings.Contains(r.Result.Message, "WORKLOAD_RUN_NOT_LIVE: ") {
				t.Fatalf("message %q, want it to say %q", r.Result.Message, tc.why)
			}
			// Cancel and cleanup stay admissible; the run still gets no Pod.
			f.runID = runID
			f.cancel(t)
			wantDenied(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-2", "p2", "uid-job", tk, 8), false),
				"WORKLOAD_RUN_NOT_LIVE")
		})
	}
}

// TestExpiredTicketFollowsTheRun: a ticket lives minutes; it authorizes
// the first bind only while fresh. A Pod that the bound Job's controller
// re-creates after the ticket expired is allowed while the run is live
// and refused once it is cancelled; a new root object with the expired
// ticket, or a Pod of an unbound controller, is refused.
func TestExpiredTicketFollowsTheRun(t *testing.T) {
	f := newFixture(t)
	runID, fresh := stagedRun(t, f)
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job", fresh, 2, 8), false))
	// The same claims, expired an hour ago: what the Job's Pod template
	// still carries when the controller replaces a Pod later.
	tv, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: f.keys.Issuer(), Keys: f.keys.KeySet()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tv.Verify([]byte(fresh), now)
	if err != nil {
		t.Fatal(err)
	}
	c.IssuedAt, c.Expiry = now.Add(-2*time.Hour), now.Add(-time.Hour)
	old, err := f.keys.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-0", "p0", "uid-job", old, 8), false))
	wantDenied(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job-2", old, 2, 8), false),
		"WORKLOAD_TICKET_EXPIRED")
	wantDenied(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-1", "p1", "uid-other", old, 8), false),
		"WORKLOAD_OWNER_UNBOUND")
	f.runID = runID
	f.cancel(t)
	r := post(t, f.h, "", "v1", "Pod", pod("team-a", "train-2", "p2", "uid-job", old, 8), false)
	wantDenied(t, r, "WORKLOAD_RUN_NOT_LIVE")
	if !strings.Contains(r.Result.Message, "cancelled by train.cancel") {
		t.Fatalf("message %q, want it to say the run was cancelled", r.Result.Message)
	}
}

// reportedRun admits a run of acct_a on bk_a an hour before now, in stage
// pretrain whose eval report was due a minute before now; with pass, the
// eval authority's passing report was recorded before the deadline. It
// returns the run's ticket.
func reportedRun(t *testing.T, f *fixture, n string, pass bool) string {
	t.Helper()
	admitted := now.Add(-time.Hour)
	ref := ledger.NewConfirmationRef()
	digest := "sha256:" + strings.Repeat("0", 64)
	if err := f.store.DepositConfirmation(t.Context(), ledger.Confirmation{Ref: ref, JTI: "jti-due-" + n, Account: "acct_a",
		Action: "train.create", Token: []byte("x.y.z"), ExpiresAt: now.Add(time.Hour), DepositedAt: admitted,
		BookingID: "bk_a", ManifestDigest: digest, CostMicroUSD: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	runID, decision := ledger.NewRunID(), "dec_0000000000000000000000000000001"+n
	raw, err := f.keys.Issue(ticket.Claims{Account: "acct_a", ID: decision, RunID: runID, BookingID: "bk_a",
		Action: "train.create", ManifestDigest: digest, WorldSize: 16, Nodes: 2, GPUsPerNode: 8,
		GPUType: "H100-SXM-80GB", Region: "us-east-1", BundleRevision: "r", IssuedAt: now.Add(-time.Minute),
		Expiry: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.store.Commit(t.Context(), ledger.Admission{Account: "acct_a", IdempotencyKey: "k-due-" + n,
		RequestDigest: "sha256:" + strings.Repeat("4", 64), DecisionID: decision, RunID: runID, Action: "train.create",
		BookingID: "bk_a", ManifestDigest: digest, ConfirmationRef: ref, ConfirmationJTI: "jti-due-" + n,
		BundleRevision: "r", State: api.StateAdmitted, CreatedAt: admitted, Ticket: raw, CostMicroUSD: 1_000_000,
		GPUs: 16, BookedGPUs: 64, LiveUntil: now.Add(7 * time.Hour), Stage: "pretrain", EntitlementJTI: "ent-b",
		ReportDue: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if pass {
		if _, ok, err := f.store.RecordReport(t.Context(), ledger.Report{RunID: runID, Account: "acct_a", BookingID: "bk_a",
			RunReport: ledger.RunReport{At: now.Add(-2 * time.Minute), DecisionID: "dec_report_" + n, Stage: "pretrain",
				ReportDigest: "sha256:" + strings.Repeat("5", 64), By: "evals:k"}}); err != nil || !ok {
			t.Fatalf("RecordReport = %v, %v", ok, err)
		}
	}
	return raw
}

// TestOverdueReportReachesWorkloads: the webhook asks RunRecord.MayWork,
// so a run whose stage's eval report is overdue takes no new workload
// (WORKLOAD_RUN_HALTED, the message naming EVAL_REPORT_OVERDUE and the
// stage), while a run whose passing report arrived in time does.
func TestOverdueReportReachesWorkloads(t *testing.T) {
	f := newFixture(t)
	overdue := reportedRun(t, f, "1", false)
	r := post(t, f.h, "batch", "v1", "Job", job("team-a", "train-due", "uid-due", overdue, 2, 8), false)
	wantDenied(t, r, "WORKLOAD_RUN_HALTED")
	if !strings.Contains(r.Result.Message, "EVAL_REPORT_OVERDUE: the eval report of stage pretrain was due at") {
		t.Fatalf("message %q does not name the overdue stage", r.Result.Message)
	}
	reported := reportedRun(t, f, "2", true)
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train-ok", "uid-ok", reported, 2, 8), false))
}

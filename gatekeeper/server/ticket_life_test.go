package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Tickets that can be withdrawn (docs/tickets.md): renewal by the run's
// caller while the run may run, the scheduler's online check, one ticket
// one job.

func mintBearer(t *testing.T, k keys.Key, iss, aud, sub, account string) string {
	t.Helper()
	now := time.Now()
	claims := map[string]any{"iss": iss, "aud": aud, "sub": sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if account != "" {
		claims["account"] = account
	}
	tok, err := token.Mint(k.Private, k.KeyID, k.Algorithm, "", claims)
	if err != nil {
		t.Fatal(err)
	}
	return string(tok)
}

func schedulerToken(t *testing.T) string {
	return mintBearer(t, keys.Dev().Scheduler, trust.DevSchedulerIssuer, trust.DevSchedulerAudience, "slurm-ctl-a", "")
}

func devTicketVerifier(t *testing.T) *ticket.Verifier {
	t.Helper()
	set, err := keys.Dev().Ticket.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	v, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: trust.DevTicketIssuer, Keys: set})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ticketCall posts body to path and decodes the envelope.
func ticketCall[T any](t *testing.T, h *harness, path, bearer string, body map[string]any) (int, api.Envelope[T]) {
	t.Helper()
	status, text, err := h.runner.Post(context.Background(), path, bearer, body)
	if err != nil {
		t.Fatal(err)
	}
	var env api.Envelope[T]
	if err := json.Unmarshal([]byte(text), &env); err != nil {
		t.Fatalf("POST %s: not an envelope: %v: %s", path, err, text)
	}
	return status, env
}

func renew(t *testing.T, h *harness, runID, bearer string) (int, api.Envelope[api.TicketRenewal]) {
	t.Helper()
	return ticketCall[api.TicketRenewal](t, h, "/v1/runs/"+runID+"/ticket", bearer, map[string]any{})
}

func check(t *testing.T, h *harness, tk, job string) (int, api.Envelope[api.TicketCheck]) {
	t.Helper()
	body := map[string]any{"ticket": tk}
	if job != "" {
		body["job_id"] = job
	}
	return ticketCall[api.TicketCheck](t, h, "/v1/tickets/verify", schedulerToken(t), body)
}

func wantRefusal[T any](t *testing.T, what string, status int, env api.Envelope[T], wantStatus int, code api.Code, says string) {
	t.Helper()
	if status != wantStatus || env.Error == nil || env.Error.Code != code || !strings.Contains(env.Error.Message, says) {
		t.Fatalf("%s: %d %+v, want %d %s saying %q", what, status, env.Error, wantStatus, code, says)
	}
}

// createRun admits the llama3-8b run and returns its run id and ticket.
func createRun(t *testing.T, h *harness) (scenario.Manifest, string, string) {
	t.Helper()
	m, err := h.runner.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := h.runner.Create(context.Background(), m, h.runner.Key("create"))
	if err != nil || a.Status != http.StatusOK || a.Data.Ticket == "" {
		t.Fatalf("create: %+v, %v", a, err)
	}
	return m, a.Data.RunID, a.Data.Ticket
}

func cancelRun(t *testing.T, h *harness, m scenario.Manifest, runID string) {
	t.Helper()
	ctx := context.Background()
	ref, err := h.runner.Confirm(ctx, "train.cancel", "", "0.00", runID)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := h.runner.EntitlementFor(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := h.runner.Admit(ctx, api.AdmissionRequest{Action: "train.cancel", BookingID: scenario.Booking,
		IdempotencyKey: h.runner.Key("cancel"), EntitlementToken: ent, ConfirmationRef: ref, RunID: runID})
	if err != nil || a.Status != http.StatusOK {
		t.Fatalf("cancel: %+v, %v", a, err)
	}
}

// TestTicketRenewalAndOnlineCheck: a ticket lives the configured lifetime
// (5 min by default, not the run's 6 h); the run's caller renews it (the
// same claims, a new jti), another account cannot; the scheduler's online
// check answers live and binds the run to its first job id, idempotently,
// refusing a second job id for every ticket of the run; after a cancel,
// renewal is refused and the check says the run ended (RUN_NOT_LIVE,
// "cancelled").
func TestTicketRenewalAndOnlineCheck(t *testing.T) {
	h := newHarness(t, nil)
	m, runID, first := createRun(t, h)
	v := devTicketVerifier(t)
	c1, err := v.Verify([]byte(first), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if life := c1.Expiry.Sub(c1.IssuedAt); life != ticket.DefaultLifetime {
		t.Fatalf("exp − iat = %v, want the 5 min lifetime", life)
	}

	status, renewed := renew(t, h, runID, callerToken(t, h))
	if status != http.StatusOK || renewed.Data.RunID != runID || renewed.Data.Ticket == "" {
		t.Fatalf("renew: %d %+v", status, renewed)
	}
	c2, err := v.Verify([]byte(renewed.Data.Ticket), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c2.ID == c1.ID || c2.ID != renewed.Data.JTI || c2.Expiry.Unix() != renewed.Data.ExpiresAt ||
		c2.Expiry.Sub(c2.IssuedAt) > ticket.DefaultLifetime {
		t.Fatalf("renewed claims %+v (answer %+v), first jti %s", c2, renewed.Data, c1.ID)
	}
	same1, same2 := c1, c2
	same1.ID, same1.IssuedAt, same1.Expiry = "", time.Time{}, time.Time{}
	same2.ID, same2.IssuedAt, same2.Expiry = "", time.Time{}, time.Time{}
	if same1 != same2 {
		t.Fatalf("the renewal changed what the ticket grants:\n%+v\n%+v", same1, same2)
	}
	other := mintBearer(t, keys.Dev().Caller, trust.DevCallerIssuer, trust.DevAudience, "someone", "acct_other")
	status, env := renew(t, h, runID, other)
	wantRefusal(t, "renewal by another account", status, env, http.StatusNotFound, api.CodeRunStatusNotFound, "no run")
	status, env = renew(t, h, runID, schedulerToken(t))
	wantRefusal(t, "renewal with a scheduler token", status, env, http.StatusUnauthorized, api.CodeCallerUnauthenticated, "")

	// The online check: live, and bound to its first job.
	status, live := check(t, h, first, "")
	if status != http.StatusOK || !live.Data.Live || live.Data.State != api.RunLive || live.Data.RunID != runID ||
		live.Data.JobID != "" {
		t.Fatalf("check without a job: %d %+v", status, live)
	}
	status, live = check(t, h, first, "slurm-4711")
	if status != http.StatusOK || live.Data.JobID != "slurm-4711" || live.Data.JTI != c1.ID {
		t.Fatalf("check binding slurm-4711: %d %+v", status, live)
	}
	status, live = check(t, h, renewed.Data.Ticket, "slurm-4711")
	if status != http.StatusOK || live.Data.JobID != "slurm-4711" || live.Data.JTI != c2.ID {
		t.Fatalf("the renewed ticket for the same job: %d %+v", status, live)
	}
	for _, tk := range []string{first, renewed.Data.Ticket} {
		status, env := check(t, h, tk, "slurm-4712")
		wantRefusal(t, "a second job id", status, env, http.StatusForbidden, api.CodeTicketJobBound, "slurm-4711")
	}
	status, env2 := ticketCall[api.TicketCheck](t, h, "/v1/tickets/verify", callerToken(t, h), map[string]any{"ticket": first})
	wantRefusal(t, "a caller token on the scheduler route", status, env2, http.StatusUnauthorized,
		api.CodeSchedulerUnauthenticated, "")
	forged := first[:len(first)-4] + map[bool]string{true: "AAAA", false: "BBBB"}[!strings.HasSuffix(first, "AAAA")]
	status, env3 := check(t, h, forged, "")
	wantRefusal(t, "a forged ticket", status, env3, http.StatusForbidden, api.CodeTicketInvalid, "ticket token rejected")
	status, env3 = check(t, h, first, "job with spaces")
	wantRefusal(t, "a malformed job id", status, env3, http.StatusBadRequest, api.CodeRequestInvalid, "job_id")

	// An expired ticket of the live run: renew it.
	expired := c1
	expired.IssuedAt, expired.Expiry = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	dev := keys.Dev().Ticket
	signer, err := ticket.NewSigner(ticket.SignerOptions{Key: dev.Private, KeyID: dev.KeyID, Algorithm: dev.Algorithm,
		Issuer: trust.DevTicketIssuer})
	if err != nil {
		t.Fatal(err)
	}
	old, err := signer.Issue(expired)
	if err != nil {
		t.Fatal(err)
	}
	status, env3 = check(t, h, old, "slurm-4711")
	wantRefusal(t, "an expired ticket of a live run", status, env3, http.StatusForbidden, api.CodeTicketExpired, "renew")

	cancelRun(t, h, m, runID)
	status, env = renew(t, h, runID, callerToken(t, h))
	wantRefusal(t, "renewal after cancel", status, env, http.StatusForbidden, api.CodeRunNotLive, "cancelled")
	for _, tk := range []string{first, renewed.Data.Ticket, old} {
		status, env := check(t, h, tk, "slurm-4711")
		wantRefusal(t, "online check after cancel", status, env, http.StatusForbidden, api.CodeRunNotLive,
			"the run is cancelled (ended by train.cancel)")
	}
	// Offline, the renewed ticket still verifies until its exp and not
	// from it on: the documented window, at most the lifetime.
	if _, err := v.Verify([]byte(renewed.Data.Ticket), c2.Expiry.Add(-time.Second)); err != nil {
		t.Fatalf("offline, 1 s before its exp: %v", err)
	}
	_, err = v.Verify([]byte(renewed.Data.Ticket), c2.Expiry)
	if k, _ := verify.KindOf(err); k != verify.KindExpired || c2.Expiry.After(c2.IssuedAt.Add(ticket.DefaultLifetime)) {
		t.Fatalf("offline, at its exp (%v after its iat): %v, want expired", c2.Expiry.Sub(c2.IssuedAt), err)
	}
	assertNoSecrets(t, h.logs.String())
}

// TestTicketAfterRevocationAndHalt: after its booking is revoked, the
// run's renewal is refused and the online check says revoked
// (ENTITLEMENT_REVOKED); after an EVAL_FAILED halt, both say halted
// (RUN_HALTED, naming the failed evals). No job is bound either way.
func TestTicketAfterRevocationAndHalt(t *testing.T) {
	t.Run("revoked", func(t *testing.T) {
		h := newHarness(t, nil)
		_, runID, first := createRun(t, h)
		rev, err := h.runner.RevokerToken()
		if err != nil {
			t.Fatal(err)
		}
		status, text, err := h.runner.Post(context.Background(), "/v1/revocations", rev, map[string]any{
			"kind": "booking", "subject": scenario.Booking, "expires_at": time.Now().Add(24 * time.Hour).Unix(),
			"reason": "term breach"})
		if err != nil || status != http.StatusCreated {
			t.Fatalf("revoke: %d %s %v", status, text, err)
		}
		status, env := renew(t, h, runID, callerToken(t, h))
		wantRefusal(t, "renewal after revocation", status, env, http.StatusForbidden, api.CodeEntitlementRevoked, "the run is revoked")
		status, env2 := check(t, h, first, "slurm-1")
		wantRefusal(t, "online check after revocation", status, env2, http.StatusForbidden, api.CodeEntitlementRevoked,
			"the run is revoked")
		if _, err := h.jobs().JobBinding(context.Background(), runID); err == nil {
			t.Fatal("a revoked run was bound to a job")
		}
	})
	t.Run("halted", func(t *testing.T) {
		h := newHarness(t, nil)
		ctx := context.Background()
		m, runID, _ := lifeRun(t, h)
		st, err := h.store.Run(ctx, runID)
		if err != nil {
			t.Fatal(err)
		}
		report, err := h.runner.EvalReport(runID, "pretrain", manifest.Digest(m.Raw), "ito-battery-pretrain-2026.10",
			map[string]float64{"mmlu_5shot": 0.01, "hellaswag_acc": 0.42})
		if err != nil {
			t.Fatal(err)
		}
		a, err := h.runner.Admit(ctx, must(h.runner.AdvanceRequest(ctx, m, runID, "long_context", report)))
		if err != nil || a.Status != http.StatusForbidden || !strings.Contains(strings.Join(a.Codes(), ","), "EVAL_FAILED") {
			t.Fatalf("failing advance: %+v, %v", a, err)
		}
		status, env := renew(t, h, runID, callerToken(t, h))
		wantRefusal(t, "renewal after the halt", status, env, http.StatusForbidden, api.CodeRunHalted, "mmlu_5shot")
		status, env2 := check(t, h, st.Ticket, "slurm-1")
		wantRefusal(t, "online check after the halt", status, env2, http.StatusForbidden, api.CodeRunHalted, "mmlu_5shot")
	})
}

func (h *harness) jobs() ledger.Jobs {
	return h.store.(ledger.Jobs)
}

// TestTicketStartsOneSink: "one ticket, one job" across sinks. A run
// whose ticket created a Kubernetes workload (the webhook's bind) starts no
// scheduler job: the online check with a job id is TICKET_JOB_BOUND naming
// the workload, and nothing is bound (the reviewer's reproduction: it was
// 200, live, bound — the admitted GPUs twice). The check without a job id
// still says live; a run bound to a job first is the ledger's mirror case
// (ledgertest OneSinkPerRun).
func TestTicketStartsOneSink(t *testing.T) {
	h := newHarness(t, nil)
	_, runID, tk := createRun(t, h)
	ctx := context.Background()
	w, ok := h.store.(ledger.Workloads)
	if !ok {
		t.Fatalf("%T does not implement ledger.Workloads", h.store)
	}
	// What the webhook does for the first CREATE of the run's Job.
	if _, err := w.BindWorkload(ctx, ledger.WorkloadBind{RunID: runID, Identity: "batch/Job/team-a/train",
		UID: "uid-job", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	status, env := check(t, h, tk, "slurm-4711")
	wantRefusal(t, "a job for a run bound to a Kubernetes Job", status, env, http.StatusForbidden, api.CodeTicketJobBound,
		"the run's ticket already created Kubernetes workload batch/Job/team-a/train")
	if b, err := h.jobs().JobBinding(ctx, runID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the run is bound to a Kubernetes Job AND to scheduler job %s/%s (%v)", b.Scheduler, b.JobID, err)
	}
	status, env = check(t, h, tk, "")
	if status != http.StatusOK || !env.Data.Live || env.Data.JobID != "" {
		t.Fatalf("the check without a job id: %d %+v %+v", status, env.Data, env.Error)
	}
}

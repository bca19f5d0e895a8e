package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Guarantees of docs/security.md and docs/tickets.md that the other server
// tests leave open, each checked through the real router.

// TestSecurityClaim_TicketJWKSBareAndCacheable: docs/tickets.md "Keys":
// the ticket public keys are served "without authentication and without
// the envelope, at GET /v1/tickets/jwks (application/jwk-set+json,
// cacheable for 5 minutes)".
func TestSecurityClaim_TicketJWKSBareAndCacheable(t *testing.T) {
	h := newHarness(t, nil)
	resp, body := getRaw(t, h.srv.URL+"/v1/tickets/jwks") // no Authorization header
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/jwk-set+json" ||
		resp.Header.Get("Cache-Control") != "public, max-age=300" {
		t.Fatalf("%d, Content-Type %q, Cache-Control %q", resp.StatusCode, resp.Header.Get("Content-Type"),
			resp.Header.Get("Cache-Control"))
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if _, envelope := doc["ok"]; envelope || len(doc) != 1 || doc["keys"] == nil {
		t.Fatalf("not a bare JWKS: %s", body)
	}
	ks, _ := doc["keys"].([]any)
	if first, _ := ks[0].(map[string]any); len(ks) != 1 || first["kid"] != keys.Dev().Ticket.KeyID {
		t.Fatalf("keys %v, want the development ticket key", ks)
	}
}

// TestSecurityClaim_TicketUnavailableConsumesNothing: docs/tickets.md "If
// the policy allows but the ticket cannot be signed, the admission is
// denied with TICKET_UNAVAILABLE and nothing is consumed" (security.md §9:
// "never signed: … nothing is consumed"): the confirmation stays
// available and no admission is stored.
func TestSecurityClaim_TicketUnavailableConsumesNothing(t *testing.T) {
	h := newHarness(t, func(o *admission.Options) { o.Tickets = failingSigner{} })
	body, key := fixtureRequest(t, h, "megatron-llama3-8b-h100-fp8", "122.02")
	var req struct {
		Ref string `json:"confirmation_ref"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Ref == "" {
		t.Fatalf("no confirmation_ref in the request: %v", err)
	}
	status, env := post(t, h, "/v1/admissions", "application/json", callerToken(t, h), body)
	if status != http.StatusServiceUnavailable || errCode(env) != string(api.CodeTicketUnavailable) {
		t.Fatalf("%d %v, want 503 %s", status, env["error"], api.CodeTicketUnavailable)
	}
	c, err := h.store.Confirmation(t.Context(), req.Ref)
	if err != nil || c.State != ledger.ConfirmationAvailable || c.ConsumedBy != "" {
		t.Fatalf("confirmation after TICKET_UNAVAILABLE: state %q consumed by %q (%v), want available", c.State, c.ConsumedBy, err)
	}
	if _, err := h.store.Admission(t.Context(), scenario.Account, key); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an admission was stored: %v", err)
	}
}

// TestSecurityClaim_RenewalWritesNothing: docs/tickets.md "Nothing is
// written by a renewal; the server log names the run and the new jti" —
// the run's record, its events and its job binding are the same after two
// renewals, and the log has a line naming run and jti, never the ticket.
func TestSecurityClaim_RenewalWritesNothing(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	_, runID, _ := createRun(t, h)
	rec0, err := h.store.RunRecord(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	ev0, err := h.store.RunEvents(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	a0, err := h.store.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	var renewed []api.TicketRenewal
	for range 2 {
		status, env := renew(t, h, runID, callerToken(t, h))
		if status != http.StatusOK || env.Data.Ticket == "" {
			t.Fatalf("renew: %d %+v", status, env)
		}
		renewed = append(renewed, env.Data)
	}
	rec1, err := h.store.RunRecord(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	ev1, err := h.store.RunEvents(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	a1, err := h.store.Run(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec0, rec1) || !reflect.DeepEqual(ev0, ev1) || !reflect.DeepEqual(a0, a1) {
		t.Fatalf("a renewal changed the ledger:\nrecord %+v\n    -> %+v\nevents %d -> %d\nadmission ticket changed: %v",
			rec0, rec1, len(ev0), len(ev1), a0.Ticket != a1.Ticket)
	}
	if _, err := h.jobs().JobBinding(ctx, runID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a renewal bound a job: %v", err)
	}
	logs := h.logs.String()
	for _, r := range renewed {
		if strings.Contains(logs, r.Ticket) {
			t.Fatal("a renewed ticket reached the server log")
		}
		found := false
		for line := range strings.SplitSeq(logs, "\n") {
			if strings.Contains(line, `"msg":"ticket renewed"`) && strings.Contains(line, `"run_id":"`+runID+`"`) &&
				strings.Contains(line, `"jti":"`+r.JTI+`"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("no server log line names the run %s and the new jti %s", runID, r.JTI)
		}
	}
}

// pinnedAdmissionClock makes a harness whose admission clock is time.Now
// until pin is called, then the pinned instant (bearer tokens are still
// checked on the real clock).
func pinnedAdmissionClock(t *testing.T) (*harness, func(time.Time)) {
	var pinned atomic.Pointer[time.Time]
	h := newHarness(t, func(o *admission.Options) {
		o.Now = func() time.Time {
			if p := pinned.Load(); p != nil {
				return *p
			}
			return time.Now()
		}
	})
	return h, func(at time.Time) { pinned.Store(&at) }
}

// TestSecurityClaim_RenewedTicketNeverPastLiveUntil: docs/tickets.md "a
// renewed ticket's [exp] is never after the run's live-until (declared end
// + the bundle's run grace)": a renewal a minute before live-until gets a
// ticket ending at live-until (whole seconds), not a full lifetime later;
// at live-until the run is not live and gets none (RUN_NOT_LIVE).
func TestSecurityClaim_RenewedTicketNeverPastLiveUntil(t *testing.T) {
	h, pin := pinnedAdmissionClock(t)
	ctx := context.Background()
	_, runID, _ := createRun(t, h)
	rec, err := h.store.RunRecord(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	end := rec.LiveUntil.Truncate(time.Second)
	pin(end.Add(-time.Minute))
	status, env := renew(t, h, runID, callerToken(t, h))
	if status != http.StatusOK {
		t.Fatalf("renew a minute before live-until: %d %+v", status, env)
	}
	c, _, err := devTicketVerifier(t).VerifyAllowExpired([]byte(env.Data.Ticket), end.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Expiry.Equal(end) || c.Expiry.Unix() != env.Data.ExpiresAt {
		t.Fatalf("renewed exp %v (answer %d), want the run's live-until %v", c.Expiry, env.Data.ExpiresAt, end)
	}
	pin(rec.LiveUntil)
	status, env = renew(t, h, runID, callerToken(t, h))
	wantRefusal(t, "renewal at live-until", status, env, http.StatusForbidden, api.CodeRunNotLive, "")
}

// TestSecurityClaim_RenewalInALiveRunsLastSecond: docs/tickets.md
// "Lifetime and renewal": a ticket's exp is a whole second, never after the
// run's live-until, and after its iat. In the last part of a second before
// a live-until that is not a whole second, the run is still live but no
// ticket fits: the renewal is 403 RUN_NOT_LIVE saying so (it was 503
// TICKET_UNAVAILABLE, "retry", a fault code, from the signer refusing
// exp <= iat). The second before, it is 200 with exp the whole second.
func TestSecurityClaim_RenewalInALiveRunsLastSecond(t *testing.T) {
	h, pin := pinnedAdmissionClock(t)
	// Admitted half-way through a second: live-until (admission time plus
	// whole seconds) is too.
	pin(time.Now().Truncate(time.Second).Add(500 * time.Millisecond))
	_, runID, _ := createRun(t, h)
	rec, err := h.store.RunRecord(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	whole := rec.LiveUntil.Truncate(time.Second)
	if frac := rec.LiveUntil.Sub(whole); frac != 500*time.Millisecond {
		t.Fatalf("live-until %v is %v past a whole second, want 500ms", rec.LiveUntil, frac)
	}
	at := whole.Add(250 * time.Millisecond)
	if rec.MayWork(at) != nil {
		t.Fatalf("the run is not live at %v: %v", at, rec.MayWork(at))
	}
	pin(at)
	status, env := renew(t, h, runID, callerToken(t, h))
	wantRefusal(t, "renewal 250ms before live-until", status, env, http.StatusForbidden, api.CodeRunNotLive, "ends within the second")

	pin(whole.Add(-250 * time.Millisecond))
	status, env = renew(t, h, runID, callerToken(t, h))
	if status != http.StatusOK || env.Data.ExpiresAt != whole.Unix() {
		t.Fatalf("renewal 750ms before live-until: %d %+v, want 200 with expires_at %d", status, env, whole.Unix())
	}
}

// TestSecurityClaim_SchedulerRouteWithoutSchedulers: docs/tickets.md
// "Without trust.schedulers the route answers 401
// SCHEDULER_UNAUTHENTICATED to every call" — whatever bearer it carries.
func TestSecurityClaim_SchedulerRouteWithoutSchedulers(t *testing.T) {
	h := newHarnessServer(t, nil, func(o *server.Options) { o.Schedulers = nil })
	_, _, tk := createRun(t, h)
	for name, bearer := range map[string]string{
		"a development scheduler token": schedulerToken(t),
		"a caller token":                callerToken(t, h),
		"no token":                      "",
	} {
		status, env := ticketCall[api.TicketCheck](t, h, "/v1/tickets/verify", bearer, map[string]any{"ticket": tk, "job_id": "j-1"})
		wantRefusal(t, name, status, env, http.StatusUnauthorized, api.CodeSchedulerUnauthenticated, "")
	}
}

// TestSecurityClaim_OnlineCheckRefusesOtherPurposes: security.md §9 "a
// caller, depositor or revoker token on the online check … refused 401
// (SCHEDULER_UNAUTHENTICATED)", each binding nothing.
func TestSecurityClaim_OnlineCheckRefusesOtherPurposes(t *testing.T) {
	h := newHarness(t, nil)
	_, runID, tk := createRun(t, h)
	revoker, err := h.runner.RevokerToken()
	if err != nil {
		t.Fatal(err)
	}
	depositor := mintBearer(t, keys.Dev().Depositor, trust.DevDepositorIssuer, trust.DevDepositAudience, "desk", "")
	for name, bearer := range map[string]string{"caller": callerToken(t, h), "depositor": depositor, "revoker": revoker} {
		status, env := ticketCall[api.TicketCheck](t, h, "/v1/tickets/verify", bearer, map[string]any{"ticket": tk, "job_id": "j-" + name})
		wantRefusal(t, "a "+name+" token", status, env, http.StatusUnauthorized, api.CodeSchedulerUnauthenticated, "")
	}
	if _, err := h.jobs().JobBinding(context.Background(), runID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused check bound a job: %v", err)
	}
}

// TestSecurityClaim_JobBoundAcrossSchedulers: docs/tickets.md "the same
// scheduler and job id again is answered live (a retried prolog); another
// job id, or the same id from another scheduler identity, is 403
// TICKET_JOB_BOUND naming the bound job, and nothing is written".
func TestSecurityClaim_JobBoundAcrossSchedulers(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	_, runID, tk := createRun(t, h)
	status, live := check(t, h, tk, "cluster-a-4711")
	if status != http.StatusOK || !live.Data.Live || live.Data.JobID != "cluster-a-4711" {
		t.Fatalf("first bind: %d %+v", status, live)
	}
	before, err := h.jobs().JobBinding(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	status, live = check(t, h, tk, "cluster-a-4711")
	if status != http.StatusOK || !live.Data.Live {
		t.Fatalf("the same scheduler and job again: %d %+v", status, live)
	}
	other := mintBearer(t, keys.Dev().Scheduler, trust.DevSchedulerIssuer, trust.DevSchedulerAudience, "slurm-ctl-b", "")
	status, env := ticketCall[api.TicketCheck](t, h, "/v1/tickets/verify", other, map[string]any{"ticket": tk, "job_id": "cluster-a-4711"})
	wantRefusal(t, "the same job id from another scheduler", status, env, http.StatusForbidden, api.CodeTicketJobBound, "cluster-a-4711")
	after, err := h.jobs().JobBinding(ctx, runID)
	if err != nil || !reflect.DeepEqual(before, after) {
		t.Fatalf("the binding changed: %+v -> %+v (%v)", before, after, err)
	}
}

// TestSecurityClaim_JobIDCharsetAsDocumented: docs/tickets.md "With job_id
// (1-128 characters of [A-Za-z0-9_.:-], the first a letter or digit ...)".
// A Slurm array task and a Ray submission id bind; an id that starts with
// '-', '.' or ':' is 400 REQUEST_INVALID and binds nothing.
func TestSecurityClaim_JobIDCharsetAsDocumented(t *testing.T) {
	h := newHarness(t, nil)
	_, _, tk := createRun(t, h)
	for _, id := range []string{"-4711", ".4711", ":4711", strings.Repeat("a", 129)} {
		status, env := check(t, h, tk, id)
		if status != http.StatusBadRequest || env.Error == nil || env.Error.Code != api.CodeRequestInvalid {
			t.Errorf("job_id %q: %d %+v, want 400 REQUEST_INVALID", id, status, env.Error)
		}
	}
	// The first valid id binds the run; the second is another job.
	if status, env := check(t, h, tk, "4711_3"); status != http.StatusOK || env.Error != nil {
		t.Fatalf("job_id 4711_3 (a Slurm array task): %d %+v, want 200", status, env.Error)
	}
	status, env := check(t, h, tk, "raysubmit_AbC123")
	if status != http.StatusForbidden || env.Error == nil || env.Error.Code != api.CodeTicketJobBound {
		t.Fatalf("job_id raysubmit_AbC123 after 4711_3: %d %+v, want 403 TICKET_JOB_BOUND", status, env.Error)
	}
}

// TestSecurityClaim_CallerRevokedOnEveryCallerRoute: security.md §8
// "CALLER_REVOKED (401 on every caller route, before anything else)": once
// the caller's key is revoked, every route that takes a caller token
// answers 401 CALLER_REVOKED; the revocation is idempotent (201, then 200
// with the stored one, unchanged).
func TestSecurityClaim_CallerRevokedOnEveryCallerRoute(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	_, runID, _ := createRun(t, h)
	rev, err := h.runner.RevokerToken()
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"kind": "caller_key", "subject": keys.CallerKeyID,
		"expires_at": time.Now().Add(24 * time.Hour).Unix(), "reason": "key leaked"}
	var first map[string]any
	for i, want := range []int{http.StatusCreated, http.StatusOK} {
		status, text, err := h.runner.Post(ctx, "/v1/revocations", rev, body)
		if err != nil || status != want {
			t.Fatalf("revocation %d: %d %s %v, want %d", i+1, status, text, err, want)
		}
		var env map[string]any
		if err := json.Unmarshal([]byte(text), &env); err != nil {
			t.Fatal(err)
		}
		d, _ := env["data"].(map[string]any)
		if i == 0 {
			first = d
			continue
		}
		if d["created"] != false || d["revoked_at"] != first["revoked_at"] || d["expires_at"] != first["expires_at"] ||
			d["revoked_by"] != first["revoked_by"] {
			t.Fatalf("the repeated revocation changed the stored one: %v -> %v", first, d)
		}
	}
	caller := callerToken(t, h)
	routes := []struct{ method, path string }{
		{http.MethodPost, "/v1/admissions"},
		{http.MethodGet, "/v1/admissions/k-any"},
		{http.MethodPost, "/v1/plans"},
		{http.MethodGet, "/v1/runs/" + runID},
		{http.MethodGet, "/v1/runs"},
		{http.MethodPost, "/v1/runs/" + runID + "/ticket"},
	}
	for _, r := range routes {
		req, err := http.NewRequest(r.method, h.srv.URL+r.path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if r.method == http.MethodPost {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+caller)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var env map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&env)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || errCode(env) != string(api.CodeCallerRevoked) {
			t.Errorf("%s %s: %d %v, want 401 CALLER_REVOKED", r.method, r.path, resp.StatusCode, env["error"])
		}
	}
}

// TestSecurityClaim_RevocationsRefusedWithoutRevokers: security.md §8
// "Without trust.revokers those revocations are refused": 401
// REVOKER_UNAUTHENTICATED, nothing stored.
func TestSecurityClaim_RevocationsRefusedWithoutRevokers(t *testing.T) {
	h := newHarnessServer(t, nil, func(o *server.Options) { o.Revokers = nil })
	rev, err := h.runner.RevokerToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"entitlement", "booking", "caller_key"} {
		status, text, err := h.runner.Post(context.Background(), "/v1/revocations", rev, map[string]any{
			"kind": kind, "subject": "subject-" + kind, "expires_at": time.Now().Add(time.Hour).Unix()})
		if err != nil {
			t.Fatal(err)
		}
		var env map[string]any
		if err := json.Unmarshal([]byte(text), &env); err != nil {
			t.Fatal(err)
		}
		if status != http.StatusUnauthorized || errCode(env) != string(api.CodeRevokerUnauthenticated) {
			t.Fatalf("%s without trust.revokers: %d %s", kind, status, text)
		}
		if _, err := h.store.Revoked(context.Background(), ledger.RevocationKind(kind), "subject-"+kind); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("%s: a revocation was stored: %v", kind, err)
		}
	}
}

// TestSecurityClaim_DocumentedNumbers: the numbers docs/security.md states
// for the API's limits are the code's.
func TestSecurityClaim_DocumentedNumbers(t *testing.T) {
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"server.MaxHeaderBytes (64 KiB)", server.MaxHeaderBytes, 64 << 10},
		{"verify.DefaultMaxTokenBytes (16 KiB token limit)", verify.DefaultMaxTokenBytes, 16 << 10},
		{"verify.DefaultCacheEntries (1 024)", verify.DefaultCacheEntries, 1024},
		{"verify.DefaultLeeway (30 s)", int64(verify.DefaultLeeway), int64(30 * time.Second)},
		{"ledger.MaxIDLen (1–256 bytes)", ledger.MaxIDLen, 256},
		{"admission.MaxRevocationLifetime (366 days)", int64(admission.MaxRevocationLifetime), int64(366 * 24 * time.Hour)},
	} {
		if c.got != c.want {
			t.Errorf("%s: the code has %d", c.what, c.got)
		}
	}
}

package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// TestTicketOnlineAndRenew drives `itogate ticket verify --online` and
// `itogate ticket renew` against a real development server: a live run's
// ticket is live and binds the first job id, a second job id exits 4
// (TICKET_JOB_BOUND); the renewed ticket starts the same job; after a
// cancel the check exits 4 saying the run is cancelled and renewal exits
// 1 (RUN_NOT_LIVE); after a booking revocation the check exits 4 saying
// revoked and renewal exits 1 (ENTITLEMENT_REVOKED).
func TestTicketOnlineAndRenew(t *testing.T) {
	url, _ := startServe(t, &serveOptions{}, true)
	dir := t.TempDir()
	ctx := context.Background()
	r, err := scenario.New(url, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.LoadManifest("llama3-8b")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(url + "/v1/tickets/jwks")
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	jwksFile := filepath.Join(dir, "tickets.jwks.json")
	writeMode(t, jwksFile, jwks, 0o600)
	caller, err := r.CallerToken()
	if err != nil {
		t.Fatal(err)
	}
	callerFile := filepath.Join(dir, "caller.jwt")
	writeMode(t, callerFile, []byte(caller), 0o600)
	k := keys.Dev().Scheduler
	now := time.Now()
	sched, err := token.Mint(k.Private, k.KeyID, k.Algorithm, "", map[string]any{"iss": trust.DevSchedulerIssuer,
		"aud": trust.DevSchedulerAudience, "sub": "slurm-ctl", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	schedFile := filepath.Join(dir, "scheduler.jwt")
	writeMode(t, schedFile, sched, 0o600)

	create := func(name string) (string, string) {
		t.Helper()
		a, _, err := r.Create(ctx, m, r.Key(name))
		if err != nil || a.Status != http.StatusOK || a.Data.Ticket == "" {
			t.Fatalf("create: %+v, %v", a, err)
		}
		f := filepath.Join(dir, name+".jws")
		writeMode(t, f, []byte(a.Data.Ticket), 0o600)
		return a.Data.RunID, f
	}
	verifyOnline := func(ticketFile, job string) cliResult {
		t.Helper()
		args := []string{"ticket", "verify", "--jwks", jwksFile, "--issuer", trust.DevTicketIssuer, "--online",
			"--server", url, "--token-file", schedFile}
		if job != "" {
			args = append(args, "--job-id", job)
		}
		return runCLI(t, append(args, ticketFile)...)
	}
	want := func(what string, res cliResult, exit int, says ...string) {
		t.Helper()
		out := res.stdout + res.stderr
		for _, s := range says {
			if !strings.Contains(out, s) {
				res.exit = -1
			}
		}
		if res.exit != exit {
			t.Fatalf("%s: exit %d, stdout %q stderr %q; want exit %d saying %q", what, res.exit, res.stdout, res.stderr, exit, says)
		}
	}

	runA, ticketA := create("a")
	want("live, binding slurm-1", verifyOnline(ticketA, "slurm-1"), 0, "online: live", "bound to job slurm-1")
	want("the same job again", verifyOnline(ticketA, "slurm-1"), 0, "bound to job slurm-1")
	want("a second job id", verifyOnline(ticketA, "slurm-2"), ticketExitWithdrawn, "TICKET_JOB_BOUND", "slurm-1")
	res := runCLI(t, "ticket", "renew", "--server", url, "--token-file", callerFile, "--run-id", runA)
	want("renew", res, 0)
	renewed := filepath.Join(dir, "a-renewed.jws")
	writeMode(t, renewed, []byte(strings.TrimSpace(res.stdout)), 0o600)
	want("the renewed ticket, same job", verifyOnline(renewed, "slurm-1"), 0, "bound to job slurm-1")
	want("the renewed ticket, another job", verifyOnline(renewed, "slurm-3"), ticketExitWithdrawn, "TICKET_JOB_BOUND")

	ref, err := r.Confirm(ctx, "train.cancel", "", "0.00", runA)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := r.EntitlementFor(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := r.Admit(ctx, api.AdmissionRequest{Action: "train.cancel", BookingID: scenario.Booking,
		IdempotencyKey: r.Key("cancel"), EntitlementToken: ent, ConfirmationRef: ref, RunID: runA}); err != nil || a.Status != 200 {
		t.Fatalf("cancel: %+v, %v", a, err)
	}
	want("online after cancel", verifyOnline(renewed, "slurm-1"), ticketExitWithdrawn, "RUN_NOT_LIVE", "cancelled")
	want("renew after cancel", runCLI(t, "ticket", "renew", "--server", url, "--token-file", callerFile, "--run-id", runA),
		exitOther, "RUN_NOT_LIVE", "cancelled")
	// Offline, the renewed ticket still verifies until its exp (the
	// documented offline window).
	want("offline after cancel", runCLI(t, "ticket", "verify", "--jwks", jwksFile, "--issuer", trust.DevTicketIssuer, renewed), 0)

	runB, ticketB := create("b")
	rev, err := r.RevokerToken()
	if err != nil {
		t.Fatal(err)
	}
	if status, text, err := r.Post(ctx, "/v1/revocations", rev, map[string]any{"kind": "booking", "subject": scenario.Booking,
		"expires_at": time.Now().Add(24 * time.Hour).Unix(), "reason": "term breach"}); err != nil || status != http.StatusCreated {
		t.Fatalf("revoke: %d %s %v", status, text, err)
	}
	want("online after revocation", verifyOnline(ticketB, ""), ticketExitWithdrawn, "ENTITLEMENT_REVOKED", "revoked")
	want("renew after revocation", runCLI(t, "ticket", "renew", "--server", url, "--token-file", callerFile, "--run-id", runB),
		exitOther, "ENTITLEMENT_REVOKED", "revoked")
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
)

type envelope struct {
	OK     bool           `json:"ok"`
	Notice string         `json:"notice"`
	Data   map[string]any `json:"data"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decode(t *testing.T, body string) envelope {
	t.Helper()
	var e envelope
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("not an envelope: %s", body)
	}
	return e
}

func wantCode(t *testing.T, what string, status int, body string, wantStatus int, code string) {
	t.Helper()
	e := decode(t, body)
	got := ""
	if e.Error != nil {
		got = e.Error.Code
	}
	if status != wantStatus || got != code {
		t.Fatalf("%s: %d %s, want %d %s", what, status, body, wantStatus, code)
	}
}

// TestRevocations: each revocation kind is authenticated by its own
// identity, idempotent, audited in the decision log, and denied with its
// own code — before and after deposit for confirmations, at admission for
// entitlements and bookings (teardown stays admissible), and with a 401 for
// a caller key withdrawn from trust.
func TestRevocations(t *testing.T) {
	o := &serveOptions{}
	url, logs := startServe(t, o, true)
	r, m := scenarioFor(t, url, "llama3-8b")
	ctx := context.Background()
	digest := manifest.Digest(m.Raw)
	cost, _ := m.Doc["budget"].(map[string]any)["ceiling_usd"].(string)
	revoker, err := r.RevokerToken()
	if err != nil {
		t.Fatal(err)
	}
	desk, err := r.DepositorToken()
	if err != nil {
		t.Fatal(err)
	}
	callerTok, err := scenario.CallerToken()
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	create := func(ent, ref, key string) (int, string) {
		return r.Raw(ctx, api.AdmissionRequest{Action: "train.create", BookingID: scenario.Booking, IdempotencyKey: key,
			Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref})
	}
	ent, err := r.EntitlementFor(m, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Identities: a caller or the revoker cannot revoke a confirmation; a
	// caller or the desk cannot revoke an entitlement.
	status, body, _ := r.Post(ctx, "/v1/confirmations/revocations", callerTok, map[string]any{"jti": "x", "expires_at": exp})
	wantCode(t, "caller revokes a confirmation", status, body, 401, "DEPOSITOR_UNAUTHENTICATED")
	status, body, _ = r.Post(ctx, "/v1/confirmations/revocations", revoker, map[string]any{"jti": "x", "expires_at": exp})
	wantCode(t, "revoker revokes a confirmation", status, body, 401, "DEPOSITOR_UNAUTHENTICATED")
	status, body, _ = r.Post(ctx, "/v1/revocations", revoker, map[string]any{"kind": "confirmation", "subject": "x", "expires_at": exp})
	wantCode(t, "revoker names a confirmation", status, body, 403, "REVOKER_UNAUTHORIZED")
	for name, tok := range map[string]string{"caller": callerTok, "desk": desk} {
		status, body, _ = r.Post(ctx, "/v1/revocations", tok, map[string]any{"kind": "booking", "subject": scenario.Booking, "expires_at": exp})
		wantCode(t, name+" revokes a booking", status, body, 401, "REVOKER_UNAUTHENTICATED")
	}

	// A deposited confirmation revoked by ref: refused at admission,
	// nothing consumed; the revocation is idempotent.
	ref, err := r.Confirm(ctx, "train.create", digest, cost, "")
	if err != nil {
		t.Fatal(err)
	}
	status, body, _ = r.Post(ctx, "/v1/confirmations/revocations", desk, map[string]any{"ref": ref, "reason": "desk withdrew it"})
	if status != 201 || decode(t, body).Data["created"] != true {
		t.Fatalf("revoke by ref: %d %s", status, body)
	}
	status, body, _ = r.Post(ctx, "/v1/confirmations/revocations", desk, map[string]any{"ref": ref})
	if e := decode(t, body); status != 200 || e.Data["created"] != false || !strings.Contains(e.Notice, "already revoked") {
		t.Fatalf("revoke again: %d %s", status, body)
	}
	status, body = create(ent, ref, "after-revoke")
	wantCode(t, "revoked confirmation", status, body, 403, "CONFIRMATION_REVOKED")
	if s, _ := r.Status(ctx, "after-revoke"); s.Status != 404 {
		t.Fatalf("a revoked confirmation admitted something: %d", s.Status)
	}

	// A confirmation revoked by jti before it is deposited: the deposit is
	// refused.
	status, body, _ = r.Post(ctx, "/v1/confirmations/revocations", desk, map[string]any{"jti": "jti_revoked_early", "expires_at": exp})
	if status != 201 {
		t.Fatalf("revoke by jti: %d %s", status, body)
	}
	_, err = r.ConfirmWith(ctx, "train.create", digest, cost, "", func(c map[string]any) { c["jti"] = "jti_revoked_early" })
	if err == nil || !strings.Contains(err.Error(), "CONFIRMATION_REVOKED") {
		t.Fatalf("deposit of a revoked jti: %v", err)
	}

	// An entitlement revoked by jti.
	revokedEnt, _ := r.EntitlementFor(m, func(c map[string]any) { c["jti"] = "ent_revoked" })
	status, body, _ = r.Post(ctx, "/v1/revocations", revoker, map[string]any{"kind": "entitlement", "subject": "ent_revoked", "expires_at": exp})
	if status != 201 {
		t.Fatalf("revoke entitlement: %d %s", status, body)
	}
	ref2, _ := r.Confirm(ctx, "train.create", digest, cost, "")
	status, body = create(revokedEnt, ref2, "ent-revoked")
	wantCode(t, "revoked entitlement", status, body, 403, "ENTITLEMENT_REVOKED")

	// The booking revoked after a run was admitted: no new run; cancel of
	// the admitted one stays admissible.
	status, body = create(ent, ref2, "before-booking-revoked")
	if status != 200 {
		t.Fatalf("create: %d %s", status, body)
	}
	run, _ := decode(t, body).Data["run_id"].(string)
	status, body, _ = r.Post(ctx, "/v1/revocations", revoker, map[string]any{"kind": "booking", "subject": scenario.Booking, "expires_at": exp})
	if status != 201 {
		t.Fatalf("revoke booking: %d %s", status, body)
	}
	ref3, _ := r.Confirm(ctx, "train.create", digest, cost, "")
	status, body = create(ent, ref3, "booking-revoked")
	wantCode(t, "revoked booking", status, body, 403, "ENTITLEMENT_REVOKED")
	cancel, _ := r.Confirm(ctx, "train.cancel", "", "0", run)
	if a, err := r.Admit(ctx, api.AdmissionRequest{Action: "train.cancel", BookingID: scenario.Booking,
		IdempotencyKey: "cancel-revoked-booking", EntitlementToken: ent, ConfirmationRef: cancel, RunID: run}); err != nil || a.Status != 200 {
		t.Fatalf("cancel on a revoked booking: %+v %v", a, err)
	}

	// The caller's key withdrawn from trust: 401 CALLER_REVOKED on every route.
	status, body, _ = r.Post(ctx, "/v1/revocations", revoker, map[string]any{"kind": "caller_key", "subject": "dev-caller-1", "expires_at": exp, "reason": "key leaked"})
	if status != 201 {
		t.Fatalf("revoke caller key: %d %s", status, body)
	}
	status, body = create(ent, ref3, "caller-revoked")
	wantCode(t, "revoked caller key", status, body, 401, "CALLER_REVOKED")

	// Audited: every revocation request is a decision-log line naming the
	// kind, the subject, the revoker's key id and the outcome, never a token.
	path := filepath.Join(o.dataDir, "decisions.jsonl")
	patience.Until(t, "revocations in the decision log", func() bool {
		b, _ := os.ReadFile(path)
		return strings.Contains(string(b), `"action":"revoke.caller_key"`)
	})
	b, _ := os.ReadFile(path)
	for _, want := range []string{`"action":"revoke.confirmation"`, `"action":"revoke.entitlement"`,
		`"action":"revoke.booking"`, `"result":"refused"`, `"revoker":"dev-revoker-1"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("decision log lacks %s", want)
		}
	}
	for _, secret := range []string{revoker, desk, callerTok} {
		if strings.Contains(string(b)+logs.String(), secret) {
			t.Fatal("a bearer token reached a log")
		}
	}
}

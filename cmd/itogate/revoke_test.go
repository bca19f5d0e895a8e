package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	f := newRevokeFixture(t, url, logs)
	f.identitiesAreSeparate()
	f.confirmationRevoked()
	ref := f.entitlementRevoked()
	ref = f.bookingRevoked(ref)
	f.callerKeyRevoked(ref)
	f.audited(filepath.Join(o.dataDir, "decisions.jsonl"))
}

// revokeFixture is a spendFixture (with an entitlement for any nodes) and
// the bearer tokens of the three identities.
type revokeFixture struct {
	*spendFixture
	revoker, desk, caller string
	exp                   int64 // expires_at of the revocations
}

func newRevokeFixture(t *testing.T, url string, logs *syncBuffer) *revokeFixture {
	t.Helper()
	f := &revokeFixture{spendFixture: newSpendFixture(t, url, logs), exp: time.Now().Add(time.Hour).Unix()}
	f.ent = f.entitlement(f.m, nil)
	var err error
	if f.revoker, err = f.r.RevokerToken(); err != nil {
		t.Fatal(err)
	}
	if f.desk, err = f.r.DepositorToken(); err != nil {
		t.Fatal(err)
	}
	if f.caller, err = scenario.CallerToken(); err != nil {
		t.Fatal(err)
	}
	return f
}

// create posts a train.create with ent and ref under key.
func (f *revokeFixture) create(ent, ref, key string) (int, string) {
	req := f.createReq(ref, key)
	req.EntitlementToken = ent
	return f.r.Raw(f.ctx, req)
}

// revoke posts a revocation to path as bearer and wants status.
func (f *revokeFixture) revoke(what, path, bearer string, body map[string]any, status int) string {
	f.t.Helper()
	got, resp, _ := f.r.Post(f.ctx, path, bearer, body)
	if got != status {
		f.t.Fatalf("%s: %d %s, want %d", what, got, resp, status)
	}
	return resp
}

// identitiesAreSeparate: a caller or the revoker cannot revoke a
// confirmation; a caller or the desk cannot revoke an entitlement.
func (f *revokeFixture) identitiesAreSeparate() {
	t, ctx := f.t, f.ctx
	status, body, _ := f.r.Post(ctx, "/v1/confirmations/revocations", f.caller, map[string]any{"jti": "x", "expires_at": f.exp})
	wantCode(t, "caller revokes a confirmation", status, body, 401, "DEPOSITOR_UNAUTHENTICATED")
	status, body, _ = f.r.Post(ctx, "/v1/confirmations/revocations", f.revoker, map[string]any{"jti": "x", "expires_at": f.exp})
	wantCode(t, "revoker revokes a confirmation", status, body, 401, "DEPOSITOR_UNAUTHENTICATED")
	status, body, _ = f.r.Post(ctx, "/v1/revocations", f.revoker, map[string]any{"kind": "confirmation", "subject": "x", "expires_at": f.exp})
	wantCode(t, "revoker names a confirmation", status, body, 403, "REVOKER_UNAUTHORIZED")
	for name, tok := range map[string]string{"caller": f.caller, "desk": f.desk} {
		status, body, _ = f.r.Post(ctx, "/v1/revocations", tok, map[string]any{"kind": "booking", "subject": scenario.Booking, "expires_at": f.exp})
		wantCode(t, name+" revokes a booking", status, body, 401, "REVOKER_UNAUTHENTICATED")
	}
}

// confirmationRevoked: a deposited confirmation revoked by ref is refused
// at admission, nothing consumed, and the revocation is idempotent; one
// revoked by jti before it is deposited cannot be deposited.
func (f *revokeFixture) confirmationRevoked() {
	t := f.t
	body := f.revoke("revoke by ref", "/v1/confirmations/revocations", f.desk, map[string]any{"ref": f.ref, "reason": "desk withdrew it"}, 201)
	if decode(t, body).Data["created"] != true {
		t.Fatalf("revoke by ref: %s", body)
	}
	body = f.revoke("revoke again", "/v1/confirmations/revocations", f.desk, map[string]any{"ref": f.ref}, 200)
	if e := decode(t, body); e.Data["created"] != false || !strings.Contains(e.Notice, "already revoked") {
		t.Fatalf("revoke again: %s", body)
	}
	status, body := f.create(f.ent, f.ref, "after-revoke")
	wantCode(t, "revoked confirmation", status, body, 403, "CONFIRMATION_REVOKED")
	if s, _ := f.r.Status(f.ctx, "after-revoke"); s.Status != 404 {
		t.Fatalf("a revoked confirmation admitted something: %d", s.Status)
	}

	f.revoke("revoke by jti", "/v1/confirmations/revocations", f.desk, map[string]any{"jti": "jti_revoked_early", "expires_at": f.exp}, 201)
	_, err := f.r.ConfirmWith(f.ctx, "train.create", f.digest, f.cost, "", func(c map[string]any) { c["jti"] = "jti_revoked_early" })
	if err == nil || !strings.Contains(err.Error(), "CONFIRMATION_REVOKED") {
		t.Fatalf("deposit of a revoked jti: %v", err)
	}
}

// entitlementRevoked: an entitlement revoked by jti is refused. It returns
// the unspent confirmation it was offered with.
func (f *revokeFixture) entitlementRevoked() string {
	revokedEnt := f.entitlement(f.m, func(c map[string]any) { c["jti"] = "ent_revoked" })
	f.revoke("revoke entitlement", "/v1/revocations", f.revoker, map[string]any{"kind": "entitlement", "subject": "ent_revoked", "expires_at": f.exp}, 201)
	ref := f.confirm("train.create", f.digest, f.cost, "")
	status, body := f.create(revokedEnt, ref, "ent-revoked")
	wantCode(f.t, "revoked entitlement", status, body, 403, "ENTITLEMENT_REVOKED")
	return ref
}

// bookingRevoked: the booking revoked after a run was admitted (with ref)
// admits no new run, and cancel of the admitted one stays admissible. It
// returns the unspent confirmation the refused run was offered with.
func (f *revokeFixture) bookingRevoked(ref string) string {
	t := f.t
	status, body := f.create(f.ent, ref, "before-booking-revoked")
	if status != 200 {
		t.Fatalf("create: %d %s", status, body)
	}
	run, _ := decode(t, body).Data["run_id"].(string)
	f.revoke("revoke booking", "/v1/revocations", f.revoker, map[string]any{"kind": "booking", "subject": scenario.Booking, "expires_at": f.exp}, 201)
	unspent := f.confirm("train.create", f.digest, f.cost, "")
	status, body = f.create(f.ent, unspent, "booking-revoked")
	wantCode(t, "revoked booking", status, body, 403, "ENTITLEMENT_REVOKED")
	cancel := f.confirm("train.cancel", "", "0", run)
	if a, err := f.r.Admit(f.ctx, f.cancelReq(cancel, "cancel-revoked-booking", run)); err != nil || a.Status != 200 {
		t.Fatalf("cancel on a revoked booking: %+v %v", a, err)
	}
	return unspent
}

// callerKeyRevoked: the caller's key withdrawn from trust gives 401
// CALLER_REVOKED.
func (f *revokeFixture) callerKeyRevoked(ref string) {
	f.revoke("revoke caller key", "/v1/revocations", f.revoker, map[string]any{"kind": "caller_key", "subject": "dev-caller-1", "expires_at": f.exp, "reason": "key leaked"}, 201)
	status, body := f.create(f.ent, ref, "caller-revoked")
	wantCode(f.t, "revoked caller key", status, body, 401, "CALLER_REVOKED")
}

// audited: every revocation request is a decision-log line naming the
// kind, the subject, the revoker's key id and the outcome, never a token.
func (f *revokeFixture) audited(path string) {
	t := f.t
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
	for _, secret := range []string{f.revoker, f.desk, f.caller} {
		if strings.Contains(string(b)+f.logs.String(), secret) {
			t.Fatal("a bearer token reached a log")
		}
	}
}

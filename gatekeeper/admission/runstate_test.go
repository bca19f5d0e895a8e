package admission_test

import (
	"context"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// TestCallerKeyRevocationHaltsNoRun: a revoked caller key refuses that
// key's admissions (401 CALLER_REVOKED, at commit here; the server asks
// before Admit) and revokes no run: the same account's rotated key restarts
// the run.
func TestCallerKeyRevocationHaltsNoRun(t *testing.T) {
	e := newEnv(t)
	req := onRun(restart)(t, e)
	req.CheckpointStep = 500
	e.revoke(t, ledger.RevokeCallerKey, caller.KeyID)

	out := e.svc.Admit(context.Background(), caller, req)
	if out.HTTPStatus() != 401 || out.Code != api.CodeCallerRevoked {
		t.Fatalf("restart with the revoked key: %d %s, want 401 CALLER_REVOKED", out.HTTPStatus(), out.Code)
	}
	rec, err := e.store.RunRecord(context.Background(), req.RunID)
	if err != nil || rec.State(now) != api.RunLive {
		t.Fatalf("run after the key's revocation: %+v, %v; want live", rec, err)
	}
	rotated := admission.Caller{Subject: caller.Subject, Account: caller.Account, KeyID: "caller-key-rotated"}
	out = e.svc.Admit(context.Background(), rotated, req)
	if out.HTTPStatus() != 200 || out.Data.State != api.StateRestartAdmitted {
		t.Fatalf("restart with the rotated key: %d %s %s", out.HTTPStatus(), out.Code, out.Message)
	}
	if rec, _ := e.store.RunRecord(context.Background(), req.RunID); rec.Restarts != 1 || rec.State(now) != api.RunLive {
		t.Fatalf("run after the rotated restart: %+v", rec)
	}
}

const restart = api.TrainRestart

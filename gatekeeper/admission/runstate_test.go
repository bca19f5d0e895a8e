package admission_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

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
	req.CheckpointStep = new(int64(500))
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

// TestRunStatus: GET /v1/runs/{run_id}'s answer for the caller's account —
// the state (the ledger's), how it ended, the halt, the restarts with their
// steps and every event with its decision id; another account's run and an
// unknown one answer alike, 404.
func TestRunStatus(t *testing.T) {
	e := newEnv(t)
	runID := e.admitRun(t)
	ref := e.confirm(t, "cnf-r", restart, runID, "0")
	r := e.runReq(restart, "key-r", ref, e.entitlement("ent-r", nil), runID)
	r.CheckpointStep = new(int64(500))
	restarted := e.mustAdmit(t, caller, r)
	e.haltRun(t, runID)

	out := e.svc.RunStatus(context.Background(), caller, runID)
	st, ok := out.Extra.(api.RunStatus)
	if out.HTTPStatus() != 200 || !ok {
		t.Fatalf("RunStatus = %d %s %s", out.HTTPStatus(), out.Code, out.Message)
	}
	if st.RunID != runID || st.State != api.RunHalted || st.Stage != "pretrain" || st.GPUs != 64 ||
		st.Restarts != 1 || st.LastCheckpointStep == nil || *st.LastCheckpointStep != 500 || st.Halt == nil || st.Halt.FailedEvals[0] != "mmlu_5shot" ||
		st.Checkpoint == nil || st.Checkpoint.IntervalSteps != 500 || st.LiveUntil != now.Add(7*time.Hour).Unix() {
		t.Fatalf("RunStatus = %+v", st)
	}
	if len(st.Events) != 3 || st.Events[0].Action != api.TrainCreate || st.Events[1].DecisionID != restarted.Data.DecisionID ||
		st.Events[0].CheckpointStep != nil || st.Events[1].CheckpointStep == nil || *st.Events[1].CheckpointStep != 500 ||
		st.Events[2].CheckpointStep != nil || st.Events[2].To != api.RunHalted || st.Events[2].DecisionID != "dec_halting" {
		t.Fatalf("events %+v", st.Events)
	}

	// The status by key shows the run's state beside the admission.
	if o := e.svc.Status(context.Background(), caller, "key-run"); o.Data.State != api.StateAdmitted || o.Data.RunState != api.RunHalted {
		t.Fatalf("Status(key-run) = %+v, want admitted with run_state halted", o.Data)
	}

	for name, tc := range map[string]struct {
		caller admission.Caller
		runID  string
		code   api.Code
	}{
		"another account's run": {otherAccount, runID, api.CodeRunStatusNotFound},
		"unknown run":           {caller, "run_00000000000000000000000000", api.CodeRunStatusNotFound},
		"malformed run id":      {caller, "run/1", api.CodeRequestInvalid},
	} {
		if o := e.svc.RunStatus(context.Background(), tc.caller, tc.runID); o.Code != tc.code || o.Extra != nil {
			t.Errorf("%s: %d %s, want %s", name, o.HTTPStatus(), o.Code, tc.code)
		}
	}
}

// TestListRuns: GET /v1/runs lists the caller account's runs only, oldest
// first, by booking and by state (the ledger's state now), a page at a
// time; a bad query is 400.
func TestListRuns(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := range 3 {
		ref := e.confirm(t, fmt.Sprintf("cnf-c%d", i), api.TrainCreate, "", costOK)
		ids = append(ids, e.mustAdmit(t, caller, e.createReq(fmt.Sprintf("key-c%d", i), ref,
			e.entitlement(fmt.Sprintf("ent-c%d", i), nil))).Data.RunID)
		time.Sleep(2 * time.Millisecond) // run ids order by their millisecond
	}
	e.admitRunAs(t, otherAccount, "bk_other_acct")
	e.haltRun(t, ids[1])
	list := func(q admission.RunQuery) api.RunList {
		t.Helper()
		o := e.svc.ListRuns(context.Background(), caller, q)
		l, ok := o.Extra.(api.RunList)
		if o.HTTPStatus() != 200 || !ok {
			t.Fatalf("ListRuns(%+v) = %d %s %s", q, o.HTTPStatus(), o.Code, o.Message)
		}
		return l
	}
	runIDs := func(l api.RunList) []string {
		out := []string{}
		for _, r := range l.Runs {
			if len(r.Events) != 0 {
				t.Errorf("a listed run carries its events: %+v", r)
			}
			out = append(out, r.RunID)
		}
		return out
	}
	if got := runIDs(list(admission.RunQuery{})); !slices.Equal(got, ids) {
		t.Fatalf("runs %v, want %v", got, ids)
	}
	if got := runIDs(list(admission.RunQuery{State: api.RunHalted})); !slices.Equal(got, ids[1:2]) {
		t.Fatalf("halted runs %v, want %v", got, ids[1:2])
	}
	first := list(admission.RunQuery{Limit: 2})
	if got := runIDs(first); !slices.Equal(got, ids[:2]) || first.Next != ids[1] {
		t.Fatalf("first page %v next %q", got, first.Next)
	}
	second := list(admission.RunQuery{Limit: 2, After: first.Next})
	if got := runIDs(second); !slices.Equal(got, ids[2:]) || second.Next != "" {
		t.Fatalf("second page %v next %q", got, second.Next)
	}
	// A state-filtered page may be short, and still have a next.
	if l := list(admission.RunQuery{Limit: 1, State: api.RunHalted}); len(l.Runs) != 0 || l.Next != ids[0] {
		t.Fatalf("a short filtered page: %+v", l)
	}
	if got := runIDs(list(admission.RunQuery{BookingID: "bk_other_acct"})); len(got) != 0 {
		t.Fatalf("another account's booking lists %v", got)
	}
	for name, q := range map[string]admission.RunQuery{
		"unknown state": {State: "running"},
		"limit above":   {Limit: api.MaxRunPage + 1},
		"bad booking":   {BookingID: "bk/1"},
		"bad cursor":    {After: "run 1"},
	} {
		if o := e.svc.ListRuns(context.Background(), caller, q); o.Code != api.CodeRequestInvalid {
			t.Errorf("%s: %d %s, want REQUEST_INVALID", name, o.HTTPStatus(), o.Code)
		}
	}
}

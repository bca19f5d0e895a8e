package admission_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/scenario"
)

// TestForeignAccountOnThisBooking: another account naming this account's
// booking id (and, for an action on a run, this account's run) is refused
// on every action, even by a policy that allows everything, and changes
// nothing: its confirmation stays unspent, no admission is stored, the
// booking's usage is unchanged and this account's run stays live. Its
// booking.release in particular leaves this account's runs live.
func TestForeignAccountOnThisBooking(t *testing.T) {
	want := map[api.Action]api.Code{
		api.TrainCreate:       api.CodeBookingAccountMismatch,
		api.BookingRelease:    api.CodeBookingAccountMismatch,
		api.TrainCancel:       api.CodeRunNotFound,
		api.TrainCleanup:      api.CodeRunNotFound,
		api.TrainRestart:      api.CodeRunNotFound,
		api.TrainStageAdvance: api.CodeRunNotFound,
	}
	for _, spec := range api.Actions() {
		t.Run(string(spec.Action), func(t *testing.T) {
			e := newEnv(t)
			runID := e.admitRun(t) // this account's run on scenario.Booking
			act := spec.Action
			named := runID
			if !act.ActsOnRun() {
				named = ""
			}
			ownedByOther := func(m map[string]any) { m["sub"] = otherAccount.Account }
			ref := e.deposit(t, e.confirmation("cnf-foreign", act, named, costOK, ownedByOther))
			ent := e.entitlement("ent-foreign", ownedByOther)
			req := e.runReq(act, "key-foreign", ref, ent, named)
			if act == api.TrainCreate {
				req = e.createReq("key-foreign", ref, ent)
			}
			if spec.CheckpointStep {
				req.CheckpointStep = new(int64(500))
			}
			if req.BookingID != scenario.Booking {
				t.Fatalf("the request names %q, want this account's booking", req.BookingID)
			}
			e.decider = allow()
			before := e.snap(t, otherAccount, req)
			out := e.svc.Admit(context.Background(), otherAccount, req)
			if out.HTTPStatus() != 403 || out.Code != want[act] {
				t.Fatalf("%s by another account: %d %s (%s), want 403 %s", act, out.HTTPStatus(), out.Code, out.Message, want[act])
			}
			if after := e.snap(t, otherAccount, req); !reflect.DeepEqual(before, after) {
				t.Errorf("the ledger changed:\nbefore %+v\nafter  %+v", before, after)
			}
			rec, err := e.store.RunRecord(context.Background(), runID)
			if err != nil || rec.State(now) != api.RunLive || rec.Restarts != 0 || rec.Stage != "pretrain" {
				t.Errorf("this account's run after the refusal: %+v, %v; want live, pretrain, no restart", rec, err)
			}
		})
	}
}

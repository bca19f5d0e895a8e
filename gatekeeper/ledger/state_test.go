package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// TestMay is the predicate's table: every state against every action that
// acts on a run, and the error that says why not.
func TestMay(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	live := RunRecord{RunID: "run_1", AdmittedAt: at, LiveUntil: at.Add(time.Hour), Stage: "pretrain"}
	ended := func(by api.Action) RunRecord { r := live; r.EndedAt, r.EndedBy = at.Add(time.Minute), by; return r }
	halted := live
	halted.Halt = RunHalt{At: at, Stage: "pretrain", FailedEvals: []string{"mmlu_5shot"}}
	revoked := halted // revoked wins over halted
	revoked.Revocation = RunRevocation{At: at, Kind: RevokeBooking, Subject: "bk_1"}
	now := at.Add(2 * time.Minute)
	for name, tc := range map[string]struct {
		r     RunRecord
		at    time.Time
		state api.RunState
		step  error // what a step (advance, restart) and a new workload get
	}{
		"live":                         {live, now, api.RunLive, nil},
		"halted":                       {halted, now, api.RunHalted, ErrRunHalted},
		"revoked (and halted)":         {revoked, now, api.RunRevoked, ErrRevoked},
		"cancelled":                    {ended(api.TrainCancel), now, api.RunCancelled, ErrRunEnded},
		"cleaned up":                   {ended(api.TrainCleanup), now, api.RunCleanedUp, ErrRunEnded},
		"released":                     {ended(api.BookingRelease), now, api.RunReleased, ErrRunEnded},
		"expired":                      {live, live.LiveUntil, api.RunExpired, ErrRunEnded},
		"cancelled after the decision": {ended(api.TrainCancel), at, api.RunLive, nil},
		"revoked, then cancelled":      {func() RunRecord { r := ended(api.TrainCancel); r.Revocation = revoked.Revocation; return r }(), now, api.RunCancelled, ErrRunEnded},
	} {
		if got := tc.r.State(tc.at); got != tc.state {
			t.Errorf("%s: State = %q, want %q", name, got, tc.state)
		}
		for _, a := range []api.Action{api.TrainStageAdvance, api.TrainRestart} {
			if err := tc.r.May(a, tc.at); !errors.Is(err, tc.step) || (tc.step == nil) != (err == nil) {
				t.Errorf("%s: May(%s) = %v, want %v", name, a, err, tc.step)
			}
		}
		if err := tc.r.MayWork(tc.at); !errors.Is(err, tc.step) || (tc.step == nil) != (err == nil) {
			t.Errorf("%s: MayWork = %v, want %v", name, err, tc.step)
		}
		for _, a := range []api.Action{api.TrainCancel, api.TrainCleanup} {
			if err := tc.r.May(a, tc.at); err != nil {
				t.Errorf("%s: May(%s) = %v; a teardown is always admissible", name, a, err)
			}
		}
		for _, a := range []api.Action{api.TrainCreate, api.BookingRelease, "train.delete"} {
			if err := tc.r.May(a, tc.at); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: May(%s) = %v, want ErrInvalid", name, a, err)
			}
		}
	}
	var he *RunHaltedError
	if err := halted.MayWork(now); !errors.As(err, &he) || !strings.Contains(err.Error(), "mmlu_5shot") {
		t.Errorf("halted: %v, want a RunHaltedError naming mmlu_5shot", err)
	}
	var re *RevocationError
	if err := revoked.MayWork(now); !errors.As(err, &re) || re.Revocation.Kind != RevokeBooking || re.Revocation.Subject != "bk_1" {
		t.Errorf("revoked: %v, want the booking's RevocationError", err)
	}
}

// TestCheckEvents: the fsck finds a step after a halt, a revocation or an
// end, a record that disagrees with its events, and a history that does not
// start with the create.
func TestCheckEvents(t *testing.T) {
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	r := RunRecord{RunID: "run_1", AdmittedAt: at, LiveUntil: at.Add(time.Hour), Stage: "sft", Restarts: 1, LastCheckpointStep: 500,
		GPUs: 8}
	create := RunEvent{RunID: "run_1", At: at, To: api.RunLive, Action: api.TrainCreate, DecisionID: "d0", Stage: "pretrain", GPUs: 8}
	advance := RunEvent{RunID: "run_1", At: at.Add(time.Minute), To: api.RunLive, Action: api.TrainStageAdvance, DecisionID: "d1", Stage: "sft"}
	restart := RunEvent{RunID: "run_1", At: at.Add(2 * time.Minute), To: api.RunLive, Action: api.TrainRestart, DecisionID: "d2", CheckpointStep: 500}
	halt := RunEvent{RunID: "run_1", At: at.Add(90 * time.Second), To: api.RunHalted, DecisionID: "dh"}
	if p := CheckEvents(r, []RunEvent{create, advance, restart}); len(p) != 0 {
		t.Fatalf("a sound history: %v", p)
	}
	// an advance that grew the run from 8 to 16 GPUs
	grown, grow := r, advance
	grown.GPUs, grow.GPUs = 16, 16
	if p := CheckEvents(grown, []RunEvent{create, grow, restart}); len(p) != 0 {
		t.Fatalf("a sound history with a grow: %v", p)
	}
	shrink := grow
	shrink.GPUs = 4
	restartSets := restart
	restartSets.GPUs = 16
	halted := r
	halted.Halt = RunHalt{At: halt.At}
	for name, tc := range map[string]struct {
		r      RunRecord
		events []RunEvent
		want   string
	}{
		"restart after the halt":    {halted, []RunEvent{create, advance, halt, restart}, "was not admissible"},
		"halt not on the record":    {r, []RunEvent{create, advance, restart, halt}, "1 halt and 0 revocation events"},
		"restarts disagree":         {r, []RunEvent{create, advance}, "0 (0)"},
		"no create first":           {r, []RunEvent{advance, restart}, "first event is not the train.create"},
		"grow not on the record":    {r, []RunEvent{create, grow, restart}, "8 GPUs on the record; the events say 16"},
		"record grown without grow": {grown, []RunEvent{create, advance, restart}, "16 GPUs on the record; the events say 8"},
		"an advance that shrinks":   {r, []RunEvent{create, shrink, restart}, "set 4 GPUs on a run holding 8"},
		"a restart that sets GPUs":  {grown, []RunEvent{create, advance, restartSets}, "only a stage advance grows a run"},
		"a create without its GPUs": {r, []RunEvent{func() RunEvent { e := create; e.GPUs = 0; return e }(), advance, restart},
			"its train.create event admitted 0 GPUs"},
		"end not on the record": {r, []RunEvent{create, advance, restart,
			{RunID: "run_1", At: at.Add(3 * time.Minute), To: api.RunCancelled, Action: api.TrainCancel}}, "ended false on the record"},
	} {
		p := CheckEvents(tc.r, tc.events)
		if !strings.Contains(strings.Join(p, "; "), tc.want) {
			t.Errorf("%s: %v, want a problem saying %q", name, p, tc.want)
		}
	}
}

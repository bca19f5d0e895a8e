package admission

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The run's status: GET /v1/runs/{run_id} and GET /v1/runs, scoped to the
// caller's account. The state is the ledger's (RunRecord.State at now), the
// one every enforcement point reads.

// accountRun reads the run runID of the caller's account for op. An
// invalid id is REQUEST_INVALID; another account's run answers like an
// unknown one, RUN_STATUS_NOT_FOUND; a ledger failure is its fault. The
// outcome is nil when the run is returned.
func (s *Service) accountRun(ctx context.Context, caller Caller, runID, op string) (ledger.RunRecord, *Outcome) {
	if !reID.MatchString(runID) {
		o := fail(api.CodeRequestInvalid, "run_id: 1-128 characters of [A-Za-z0-9._:-]")
		return ledger.RunRecord{}, &o
	}
	r, err := s.opts.Ledger.RunRecord(ctx, runID)
	var o Outcome
	switch {
	case errors.Is(err, ledger.ErrNotFound) || (err == nil && r.Account != caller.Account):
		o = fail(api.CodeRunStatusNotFound, "no run with this id was admitted for this account")
	case err != nil:
		o = s.ledgerFault(op, err)
	default:
		return r, nil
	}
	return ledger.RunRecord{}, &o
}

// RunStatus answers the run runID of the caller's account with its state,
// stage, GPUs, times, restarts, checkpoint plan, halt or revocation and
// every event (the decision id of every admission on it). Another
// account's run answers like an unknown one: 404 RUN_STATUS_NOT_FOUND.
func (s *Service) RunStatus(ctx context.Context, caller Caller, runID string) Outcome {
	r, refused := s.accountRun(ctx, caller, runID, "run status")
	if refused != nil {
		return *refused
	}
	events, err := s.opts.Ledger.RunEvents(ctx, runID)
	if err != nil {
		return s.ledgerFault("run status", err)
	}
	st := runStatus(r, s.opts.Now())
	for _, e := range events {
		ev := api.RunEvent{At: e.At.Unix(), To: e.To, Action: e.Action,
			DecisionID: e.DecisionID, Reason: e.Reason, Stage: e.Stage, GPUs: e.GPUs}
		if spec, _ := e.Action.Spec(); spec.CheckpointStep {
			ev.CheckpointStep = new(e.CheckpointStep)
		}
		st.Events = append(st.Events, ev)
	}
	return Outcome{Status: http.StatusOK, Extra: st}
}

// RunQuery is GET /v1/runs's query: booking_id and state filter, after is
// the previous page's next, limit is 1 to api.MaxRunPage (0: the default).
type RunQuery struct {
	BookingID, After string
	State            api.RunState
	Limit            int
}

// ListRuns answers a page of the caller account's runs, oldest first,
// without their events. It reads at most limit runs from the ledger; the
// state filter applies to those (RunRecord.State at now), so a filtered
// page may hold fewer, and Next says where the next page starts.
func (s *Service) ListRuns(ctx context.Context, caller Caller, q RunQuery) Outcome {
	switch {
	case q.BookingID != "" && !reID.MatchString(q.BookingID):
		return fail(api.CodeRequestInvalid, "booking_id: 1-128 characters of [A-Za-z0-9._:-]")
	case q.After != "" && !reID.MatchString(q.After):
		return fail(api.CodeRequestInvalid, "after: a run id from the previous page's next")
	case q.State != "" && !slices.Contains(api.RunStates(), q.State):
		return fail(api.CodeRequestInvalid, "state: one of live, halted, revoked, cancelled, cleaned_up, released, expired")
	case q.Limit < 0 || q.Limit > api.MaxRunPage:
		return fail(api.CodeRequestInvalid, "limit: 1 to 200")
	}
	if q.Limit == 0 {
		q.Limit = api.DefaultRunPage
	}
	runs, more, err := s.opts.Ledger.Runs(ctx, ledger.RunQuery{Account: caller.Account, BookingID: q.BookingID,
		After: q.After, Limit: q.Limit})
	if err != nil {
		if errors.Is(err, ledger.ErrInvalid) {
			return fail(api.CodeRequestInvalid, "the run query is malformed")
		}
		return s.ledgerFault("run list", err)
	}
	now := s.opts.Now()
	list := api.RunList{Runs: []api.RunStatus{}}
	for _, r := range runs {
		if st := runStatus(r, now); q.State == "" || st.State == q.State {
			list.Runs = append(list.Runs, st)
		}
	}
	if more && len(runs) > 0 {
		list.Next = runs[len(runs)-1].RunID
	}
	return Outcome{Status: http.StatusOK, Extra: list}
}

// runStatus is r as the status routes show it at now.
func runStatus(r ledger.RunRecord, now time.Time) api.RunStatus {
	st := api.RunStatus{RunID: r.RunID, BookingID: r.BookingID, State: r.State(now), Stage: r.Stage,
		ManifestDigest: r.ManifestDigest, GPUs: r.GPUs, AdmittedAt: r.AdmittedAt.Unix(), LiveUntil: r.LiveUntil.Unix(),
		Restarts: r.Restarts}
	if r.Restarts > 0 {
		st.LastCheckpointStep = new(r.LastCheckpointStep)
	}
	if !r.EndedAt.IsZero() {
		st.EndedAt, st.EndedBy = r.EndedAt.Unix(), r.EndedBy
	}
	if p := r.Plan; p.Known() {
		st.Checkpoint = &api.RunCheckpoint{IntervalSteps: p.IntervalSteps, Steps: p.Steps,
			WallClockSeconds: p.WallClockSeconds, LostSecondsPerRestart: p.LostSecondsPerRestart}
	}
	if h := r.Halt; !h.At.IsZero() {
		st.Halt = &api.RunHalt{At: h.At.Unix(), Stage: h.Stage, FailedEvals: slices.Clone(h.FailedEvals),
			ReportDigest: h.ReportDigest, DecisionID: h.DecisionID}
	}
	if v := r.Revocation; !v.At.IsZero() {
		st.Revocation = &api.RunRevocation{At: v.At.Unix(), Kind: string(v.Kind), Subject: v.Subject, Reason: v.Reason}
	}
	if !r.ReportDue.IsZero() {
		st.ReportDue = r.ReportDue.Unix()
	}
	if p := r.Report; !p.At.IsZero() && p.Stage == r.Stage {
		st.Report = &api.RunReport{At: p.At.Unix(), Stage: p.Stage, ReportDigest: p.ReportDigest, DecisionID: p.DecisionID}
	}
	st.ReportOverdue = st.State == api.RunHalted && r.Halt.At.IsZero()
	return st
}

package webhook

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// LedgerRuns answers RunFacts from the ledger's run record: the webhook
// has no notion of a live run of its own. A new workload is work the run
// takes on, so it asks the one predicate the admission pipeline and the
// ledger's commit ask, RunRecord.MayWork: a run that is halted (a failed
// eval gate, or its stage's eval report overdue), revoked (its booking or entitlement), cancelled, cleaned up,
// released or past its declared end gets none.
type LedgerRuns struct{ Store ledger.Store }

// RunFacts implements Runs.
func (l LedgerRuns) RunFacts(ctx context.Context, runID string, now time.Time) (RunFacts, error) {
	r, err := l.Store.RunRecord(ctx, runID)
	if err != nil {
		return RunFacts{}, err
	}
	f := RunFacts{Account: r.Account, BookingID: r.BookingID, Live: true, State: string(r.State(now)), GPUs: r.GPUs}
	if err := r.MayWork(now); err != nil {
		f.Live, f.EndedBy = false, notLive(r, now, err)
	}
	return f, nil
}

// notLive says why a run takes no workload: its state, and what put it
// there.
func notLive(r ledger.RunRecord, now time.Time, err error) string {
	state := string(r.State(now))
	if re, ok := errors.AsType[*ledger.RevocationError](err); ok {
		return state + ": " + string(re.Revocation.Kind) + " " + re.Revocation.Subject + " revoked"
	}
	if he, ok := errors.AsType[*ledger.RunHaltedError](err); ok {
		return state + ": the eval gate of stage " + he.Halt.Stage + " failed (" + strings.Join(he.Halt.FailedEvals, ", ") + ")"
	}
	if oe, ok := errors.AsType[*ledger.ReportOverdueError](err); ok {
		return state + ": " + string(api.CodeEvalReportOverdue) + ": the eval report of stage " + oe.Stage + " was due at " +
			oe.Due.UTC().Format(time.RFC3339)
	}
	if r.EndedBy != "" && !now.Before(r.EndedAt) {
		return state + " by " + string(r.EndedBy)
	}
	return state + ": past its declared end"
}

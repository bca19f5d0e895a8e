package webhook

import (
	"context"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// LedgerRuns answers RunFacts from the ledger's run record: the webhook
// has no notion of a live run of its own, it asks RunRecord.Live, the one
// the capacity check and stage gates use (not cancelled, not cleaned up,
// booking not released, before the declared end plus grace).
type LedgerRuns struct{ Store ledger.Store }

// RunFacts implements Runs.
func (l LedgerRuns) RunFacts(ctx context.Context, runID string, now time.Time) (RunFacts, error) {
	r, err := l.Store.RunRecord(ctx, runID)
	if err != nil {
		return RunFacts{}, err
	}
	f := RunFacts{Account: r.Account, BookingID: r.BookingID, Live: r.Live(now), EndedBy: string(r.EndedBy)}
	if !f.Live && f.EndedBy == "" {
		f.EndedBy = "past its declared end"
	}
	return f, nil
}
